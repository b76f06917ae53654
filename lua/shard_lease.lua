-- shard_lease: take or renew one reporter process's lease on a shard.
--
-- KEYS[1]  owner      string the process holding the shard
-- ARGV[1]  this process's id
-- ARGV[2]  lease length in ms; 0 gives the shard up if this process holds it
-- returns  1 if this process holds the shard now, 0 if another one does
local holder = redis.call('GET', KEYS[1])
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
