#!lua flags=allow-oom
-- heartbeat: note a reporter process alive in the registry until one lease from now, forget
-- the expired ones, and answer who is live.  Every deadline in the registry is the server's
-- time (TIME), never a reporter's clock: a process whose clock runs fast cannot outlive its
-- lease.  A deadline further than one lease ahead (written by an older version from a fast
-- clock, or by hand) is cut to one lease from now, so a dead process counts as live for one
-- lease at most.
-- Sent again after a lost reply it renews the heartbeat again, from a little later (as the
-- next heartbeat would): no receipt needed.
-- A registry of another type is set aside (lua/_guard.lua) and started again.
-- allow-oom: without it no reporter could renew its heartbeat (a plain ZADD is refused at
-- maxmemory), leases would lapse and nothing would drain a full Redis.  Its growth is bounded:
-- a live process's member is updated in place (same size); a new process adds one member of
-- about 100 bytes, and expired members are removed first, so the registry holds one member
-- per live reporter process at most.
--
-- KEYS[1]  reporters  zset   reporter process id -> heartbeat deadline (ms, server time)
-- KEYS[2]  stats      hash   the counters of the registry's shard (only of what is set aside)
-- KEYS[3]  quarantine list   the registry's shard's records set aside, newest first
-- ARGV[1]  owner: this process's id
-- ARGV[2]  lease_ms: how long this heartbeat lasts, in ms
-- returns  {the number of live reporter processes (this one included), then the ids of the
--          first LIVE_LISTED of them}
-- include: _guard
local LIVE_LISTED = 1000   -- ids answered at most (the count is always whole)
local CLAMPED_MOST = 100   -- deadlines cut per call at most (a registry of junk: over calls)
local SHARD_LEASE_MOST_MS = 600000 -- [reporter] shard_lease_seconds at most
guard_open('heartbeat', KEYS[3], KEYS[2], {})
local lease = arg_number(2, 'lease_ms', 1, SHARD_LEASE_MOST_MS)
expect(KEYS[1], 'zset')
local now = clock_ms()
local deadline = now + lease
local ahead = redis.call('ZRANGEBYSCORE', KEYS[1], string.format('(%.0f', deadline), '+inf',
                         'LIMIT', 0, CLAMPED_MOST)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
for _, member in ipairs(ahead) do redis.call('ZADD', KEYS[1], 'XX', deadline, member) end
redis.call('ZADD', KEYS[1], deadline, ARGV[1])
local out = {redis.call('ZCARD', KEYS[1])}
for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, LIVE_LISTED - 1)) do
  out[#out + 1] = member
end
return out
