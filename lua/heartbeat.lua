#!lua flags=allow-oom
-- heartbeat: note a reporter process alive in the registry, forget the expired ones, and
-- count the live ones.
-- Sent again after a lost reply it writes the same deadline again: no change, no receipt.
-- A registry of another type is set aside (lua/_guard.lua) and started again.
-- allow-oom: without it no reporter could renew its heartbeat (a plain ZADD is refused at
-- maxmemory), leases would lapse and nothing would drain a full Redis.  Its growth is bounded:
-- a live process's member is updated in place (same size); a new process adds one member of
-- about 100 bytes, and expired members are removed first, so the registry holds one member
-- per live reporter process at most.
--
-- KEYS[1]  reporters  zset   reporter process id -> heartbeat deadline (ms, its own clock)
-- KEYS[2]  stats      hash   the counters of the registry's shard (only of what is set aside)
-- KEYS[3]  quarantine list   the registry's shard's records set aside, newest first
-- ARGV[1]  owner: this process's id
-- ARGV[2]  now_ms: now in ms (the reporter's clock, as every deadline in the registry)
-- ARGV[3]  deadline_ms: heartbeat deadline in ms (now + lease)
-- returns  the number of live reporter processes, this one included
-- include: _guard
guard_open('heartbeat', KEYS[3], KEYS[2], {})
expect(KEYS[1], 'zset')
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return redis.call('ZCARD', KEYS[1])
