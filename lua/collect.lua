#!lua
-- collect: append events of one game to its capped buffer and register the game.
-- No allow-oom: it grows memory.  At maxmemory (policy noeviction) Redis refuses the whole
-- call before it runs (an OOM reply, nothing written); the SDK keeps the events, counts them
-- in refused_oom and sends them again once the reporters have drained some memory.
--
-- KEYS[1]  q:<game>   list   the game's buffer
-- KEYS[2]  active     set    games with buffered events
-- KEYS[3]  ring       zset   active games, all scored 0 (swept in name order)
-- KEYS[4]  stats      hash   the shard's counters
-- KEYS[5]  marker     string the shard's identity (set here if absent)
-- KEYS[6]  quarantine list   records set aside, newest first (lua/_guard.lua)
-- ARGV[1]  game name
-- ARGV[2]  cap: most events the buffer keeps (the oldest go first)
-- ARGV[3]  buffer TTL in seconds, refreshed on every push
-- ARGV[4]  events the client already evicted for this game before sending (count)
-- ARGV[5]  events the client dropped because its buffer was full (count, reported here)
-- ARGV[6]  events the client dropped as too large (count, reported here)
-- ARGV[7]  entries joined by "\n"; an entry is the 13-digit collect time in ms followed by
--          the event's JSON (which never holds a raw newline). One argument instead of one per
--          event halves the client's cost of sending them.
-- ARGV[8]  an identity for the shard, written if it has none ('' = one made from the time)
-- returns  {number of events the cap evicted, including ARGV[4]; the shard's identity}

-- include: _guard
-- Poison set aside (lua/_guard.lua), before the first write: a key of another type than the
-- one below needs is moved to the quarantine, so no command below can fail half-way (the
-- events pushed and the call failed, and sent again).
guard_open('collect', KEYS[6], KEYS[4],
           {'stored', 'evicted', 'dropped_buffer_full', 'dropped_too_large'})
expect(KEYS[1], 'list')
expect(KEYS[2], 'set')
expect_ring(KEYS[3], KEYS[2])
expect(KEYS[5], 'string')

local game, cap, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local evicted = tonumber(ARGV[4])
local n = 0
local len = nil
-- Cut with a plain find (memchr), not a pattern; unpack() is limited by Lua's stack, so push
-- in slices of 1000.
local blob, pos, slice = ARGV[7], 1, {}
while pos <= #blob do
  local stop = string.find(blob, '\n', pos, true) or (#blob + 1)
  n = n + 1
  slice[#slice + 1] = string.sub(blob, pos, stop - 1)
  if #slice == 1000 then
    len = redis.call('RPUSH', KEYS[1], unpack(slice))
    slice = {}
  end
  pos = stop + 1
end
if #slice > 0 then len = redis.call('RPUSH', KEYS[1], unpack(slice)) end
if len == nil then len = redis.call('LLEN', KEYS[1]) end
if len > cap then
  redis.call('LTRIM', KEYS[1], len - cap, -1)
  evicted = evicted + (len - cap)
end
if len > 0 then
  redis.call('EXPIRE', KEYS[1], ttl)
  if redis.call('SADD', KEYS[2], game) == 1 then
    redis.call('ZADD', KEYS[3], 0, game)
  end
end
if n + tonumber(ARGV[4]) > 0 then
  redis.call('HINCRBY', KEYS[4], 'stored', n + tonumber(ARGV[4]))
end
if evicted > 0 then redis.call('HINCRBY', KEYS[4], 'evicted', evicted) end
if tonumber(ARGV[5]) > 0 then
  redis.call('HINCRBY', KEYS[4], 'dropped_buffer_full', ARGV[5])
end
if tonumber(ARGV[6]) > 0 then
  redis.call('HINCRBY', KEYS[4], 'dropped_too_large', ARGV[6])
end
local identity = ARGV[8]
if identity == '' then
  local t = redis.call('TIME')
  identity = 't' .. t[1] .. t[2]
end
return {evicted, redis.call('SET', KEYS[5], identity, 'NX', 'GET') or identity}
