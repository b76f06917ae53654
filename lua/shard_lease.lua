#!lua flags=allow-oom
-- shard_lease: take or renew one reporter process's lease on a shard.
-- Sent again after a lost reply it answers the same (the holder renews, from a little
-- later; a shard given up stays given up), so it needs no receipt.  An owner key of another
-- type is set aside (lua/_guard.lua) and the shard is free.
-- allow-oom: the reporter needs its shards to drain a full Redis.  Renewing (PEXPIRE) and
-- giving up (DEL) do not grow memory; taking a free shard writes one small string (the
-- owner's id, about 100 bytes with its expiry), at most one per shard: a constant that
-- does not grow with the events.
--
-- KEYS[1]  owner      string the process holding the shard
-- KEYS[2]  stats      hash   the shard's counters (only of what is set aside)
-- KEYS[3]  quarantine list   records set aside, newest first
-- ARGV[1]  owner: this process's id
-- ARGV[2]  lease_ms: lease length in ms; 0 gives the shard up if this process holds it
-- returns  1 if this process holds the shard now, 0 if another one does
-- include: _guard
guard_open('shard_lease', KEYS[3], KEYS[2], {})
local holder = read('string', false, 'GET', KEYS[1])
if ARGV[2] == '0' then
  if holder == ARGV[1] then redis.call('DEL', KEYS[1]) end
  return 0
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if holder then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
