#!lua flags=allow-oom
-- shard_lease: take or renew one reporter process's lease on a shard.
-- An owner key nobody can be renewing is taken over: one without expiry, or whose expiry
-- lies further ahead than any lease (both written by hand or by another tool: no script
-- sets them, and nothing would ever free the shard), or whose holder the caller names as
-- missing from the live registry (the caller saw it missing twice, a round apart: a process
-- that registered a moment ago is not missed).  Each takeover is noted in the quarantine
-- (the old holder as the sample) and counted in owners_taken_over.
-- Sent again after a lost reply it answers the same (the holder renews, from a little
-- later; a shard given up stays given up), so it needs no receipt.  An owner key of another
-- type is set aside (lua/_guard.lua) and the shard is free.
-- allow-oom: the reporter needs its shards to drain a full Redis.  Renewing (PEXPIRE) and
-- giving up (DEL) do not grow memory; taking a free shard writes one small string (the
-- owner's id, about 100 bytes with its expiry), at most one per shard: a constant that
-- does not grow with the events.
--
-- KEYS[1]  owner      string the process holding the shard
-- KEYS[2]  stats      hash   the shard's counters
-- KEYS[3]  quarantine list   records set aside, newest first
-- ARGV[1]  owner: this process's id
-- ARGV[2]  lease_ms: lease length in ms; 0 gives the shard up if this process holds it
-- ARGV[3]  missing: a holder the caller found missing from the live registry ('' for none)
-- returns  {1 if this process holds the shard now else 0, the holder found ('' for none),
--           why it was taken over ('' if it was not)}
-- include: _guard
local SHARD_LEASE_MOST_MS = 600000 -- [reporter] shard_lease_seconds at most
guard_open('shard_lease', KEYS[3], KEYS[2], {'owners_taken_over'})
local lease = arg_number(2, 'lease_ms', 0, SHARD_LEASE_MOST_MS)
local me = ARGV[1]
local holder = read('string', false, 'GET', KEYS[1])
if lease == 0 then
  if holder == me then redis.call('DEL', KEYS[1]) end
  return {0, holder or '', ''}
end
if holder == me then
  redis.call('PEXPIRE', KEYS[1], lease)
  return {1, holder, ''}
end
local why = ''
if holder then
  local left = redis.call('PTTL', KEYS[1])
  if left < 0 then
    why = 'an owner key without expiry'
  elseif left > SHARD_LEASE_MOST_MS + CLOCK_SLACK_MS then
    why = 'an owner key that outlives any lease'
  elseif ARGV[3] ~= '' and holder == ARGV[3] then
    why = 'an owner missing from the live registry'
  else
    return {0, holder, ''}
  end
  quarantine({k = KEYS[1], r = why .. ': taken over', v = printable(holder)}, 0)
  redis.call('HINCRBY', KEYS[2], 'owners_taken_over', 1)
end
redis.call('SET', KEYS[1], me, 'PX', lease)
return {1, holder or '', why}
