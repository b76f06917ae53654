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
-- ARGV[1]  game: game name
-- ARGV[2]  cap: most events the buffer keeps (the oldest go first), >= 1
-- ARGV[3]  ttl_seconds: buffer TTL in seconds, refreshed on every push, >= 1
-- ARGV[4]  pre_evicted: events the client already evicted for this game before sending (count)
-- ARGV[5]  dropped_buffer_full: events the client dropped, its buffer full (count, reported here)
-- ARGV[6]  dropped_too_large: events the client dropped as too large (count, reported here)
-- ARGV[7]  entries: entries joined by "\n"; an entry is the 13-digit collect time in ms followed by
--          the event's JSON (which never holds a raw newline). One argument instead of one per
--          event halves the client's cost of sending them.
-- ARGV[8]  identity: the shard's identity, written if it has none ('' = one made from the time)
-- Written once, and duplicates merged (lua/_written_once.lua):
-- KEYS[7]  writes       hash   the shard's remembered writes:
--                              "<writer>" -> "<lo> <hi> <ms>", the sequence numbers kept;
--                              "<writer>:<seq>" -> "<evicted> <merged> <bytes> <checksum>"
-- KEYS[8]  writers      zset   writer id -> ms of its latest write here
-- KEYS[9]  seen:<game>  zset   dedup key -> ms its first event was stored
-- ARGV[9]  writer: writer id, 1-64 of [A-Za-z0-9_.-] ('' = not remembered: applied every
--          time, and ARGV[10] to [14] and [17] are not read)
-- ARGV[10] seq: the write's sequence number, counted from 1 per writer and shard
-- ARGV[11] low: the writer's lowest sequence number for this shard still without an answer
--          (<= ARGV[10]); the memory of the writes below it is let go
-- ARGV[12] writes_remembered_ms: ms a writer's writes are remembered after its latest write
--          here (the horizon)
-- ARGV[13] writers_per_shard: writers remembered per shard at most (the least recent forgotten
--          first)
-- ARGV[14] writes_per_writer: writes without an answer per writer and shard at most, <= 4096
--          (ARGV[10] - ARGV[11] must be less)
-- ARGV[15] dedup_window_ms: an entry "\30<key>\30<entry>" is merged (not stored) if an
--          entry of the game with the same key was stored within it (0 = keys ignored)
-- ARGV[16] dedup_keys_per_game: dedup keys remembered per game at most (the oldest forgotten first)
-- ARGV[17] checksum: 1-16 of [A-Za-z0-9]: with the length of ARGV[7], what tells a repeat from
--          another write under the same writer id and number. The SDK sends the CRC-32 of
--          ARGV[1] .. "\n" .. ARGV[4] .. " " .. ARGV[5] .. " " .. ARGV[6] .. "\n" .. ARGV[7],
--          as 8 lowercase hex digits
-- ARGV[18] protocol_version: the producer protocol version the caller speaks (docs/protocol.md),
--          "1"; always the last argument, in every version, so that a script can name the
--          version of a call built for another one
-- returns  {number of events the cap evicted, including ARGV[4]; the shard's identity;
--           entries merged; 1 if the write was a repeat (nothing stored: the numbers are
--           the first answer's), else 0}
-- errors   (nothing stored; the same call would be refused again, so the write is never
--          applied under its writer id and number):
--          "collect: producer protocol version <v>, this script speaks version 1: ..."
--                                  the call was built for another version of the protocol
--                                  (checked first, before any other argument)
--          "collect: <what>"       an argument out of its range, named (nothing written)
--          "WRITECONFLICT collect: <what>"  the writer id and number are taken by a write
--                                  with other content, or the number is below the range
--                                  the shard remembers of the writer: another process uses
--                                  the same writer id. Counted in the shard's
--                                  `refused_repeats` (the one write such a call makes)
-- Nothing else is written before every argument and record is read and checked: a key of
-- the wrong type, a counter or a remembered write that cannot be read is first moved to the
-- quarantine (lua/_guard.lua), after which no command can fail.
-- include: _guard
-- include: _written_once

-- == arguments: all checked before anything is written ===================================
-- The protocol version first: a call built for another version may mean anything by its
-- other arguments.  It is the last argument in every version (docs/protocol.md).
local PROTOCOL_VERSION = '1'
local PROTOCOL_ARGS = 18
local SHOWN_BYTES = 40 -- of an argument quoted in the error
local offered = ARGV[#ARGV] or ''
if offered ~= PROTOCOL_VERSION then
  local shown = string.gsub(string.sub(offered, 1, SHOWN_BYTES), '[^%w%p ]', '?')
  local said = "sent none (its last argument is '" .. shown .. "')"
  if string.find(offered, '^%d+$') and #offered <= 6 then said = 'version ' .. offered end
  return redis.error_reply('collect: producer protocol ' .. said .. ', this script speaks '
    .. 'version ' .. PROTOCOL_VERSION .. ': use a producer of protocol version '
    .. PROTOCOL_VERSION .. ' (docs/protocol.md)')
end
if #ARGV ~= PROTOCOL_ARGS then
  return redis.error_reply(string.format('collect: producer protocol version %s has %d '
    .. 'arguments, the call sent %d', PROTOCOL_VERSION, PROTOCOL_ARGS, #ARGV))
end

local tonumber = tonumber
local function whole(text, lo, hi)
  local n = tonumber(text)
  if n and n % 1 == 0 and n >= lo and n <= hi then return n end
  return nil
end
local function refuse(what, value)
  return redis.error_reply(string.format('collect: %s: got %.80s', what, tostring(value)))
end
local MAX_WHOLE = 1e14 - 1 -- numbers Lua writes back in full (its "%.14g")
local game = ARGV[1]
local cap, ttl = whole(ARGV[2], 1, MAX_WHOLE), whole(ARGV[3], 1, 2 ^ 31)
local pre_evicted = whole(ARGV[4], 0, MAX_WHOLE)
local dropped_full, dropped_large = whole(ARGV[5], 0, MAX_WHOLE), whole(ARGV[6], 0, MAX_WHOLE)
if game == '' then return refuse('game name: expected one', "''") end
if not cap then return refuse('cap (ARGV[2]): expected a whole number >= 1', ARGV[2]) end
if not ttl then return refuse('TTL (ARGV[3]): expected whole seconds, 1 to 2^31', ARGV[3]) end
if not (pre_evicted and dropped_full and dropped_large) then
  return refuse('counts (ARGV[4] to [6]): expected whole numbers >= 0',
                tostring(ARGV[4]) .. ' ' .. tostring(ARGV[5]) .. ' ' .. tostring(ARGV[6]))
end
local blob = ARGV[7]
local writer = ARGV[9]
local seq, low, horizon_ms, most_writers
if writer ~= '' then
  seq, low = whole(ARGV[10], 1, MAX_WHOLE), whole(ARGV[11], 1, MAX_WHOLE)
  local bad = once_check(writer, seq, low, whole(ARGV[14], 1, 2 ^ 31), ARGV[17] or '',
                         ARGV[10], ARGV[11], ARGV[14])
  if bad then return redis.error_reply('collect: ' .. bad) end
  horizon_ms, most_writers = whole(ARGV[12], 1, 2 ^ 40), whole(ARGV[13], 1, 2 ^ 31)
  if not (horizon_ms and most_writers) then
    return refuse('horizon and writers (ARGV[12], [13]): expected whole numbers >= 1',
                  tostring(ARGV[12]) .. ' ' .. tostring(ARGV[13]))
  end
end
local keyed = string.find(blob, '\30', 1, true) -- any entry with a dedup key (memchr)
local window_ms, dedup_most
if keyed then
  window_ms, dedup_most = whole(ARGV[15], 0, 2 ^ 40), whole(ARGV[16], 1, 2 ^ 31)
  if not (window_ms and dedup_most) then
    return refuse('dedup window and keys (ARGV[15], [16]): expected whole numbers',
                  tostring(ARGV[15]) .. ' ' .. tostring(ARGV[16]))
  end
end

-- Poison set aside (lua/_guard.lua), before the first write: a key of another type than the
-- one below needs is moved to the quarantine, so no command below can fail half-way (the
-- events pushed and the call failed, and sent again).
guard_open('collect', KEYS[6], KEYS[4], {'stored', 'evicted', 'dropped_buffer_full',
           'dropped_too_large', 'merged', 'refused_repeats'})
expect(KEYS[1], 'list')
expect(KEYS[2], 'set')
expect_ring(KEYS[3], KEYS[2])
expect(KEYS[5], 'string')
if writer ~= '' then -- only what this call will touch is checked
  expect(KEYS[7], 'hash')
  expect(KEYS[8], 'zset')
end
if keyed then expect(KEYS[9], 'zset') end

local evicted = pre_evicted
local n = 0
local len = nil

-- == written once: a repeat is answered, not applied ======================================
local now_ms = 0 -- Redis time, read only when needed
if writer ~= '' or keyed then now_ms = clock_ms() end
local once = nil
if writer ~= '' then
  once = once_begin(KEYS[7], KEYS[8], writer, seq, low, ARGV[17], #blob, now_ms, horizon_ms,
                    most_writers)
  if once.conflict then
    redis.call('HINCRBY', KEYS[4], 'refused_repeats', 1)
    return redis.error_reply('WRITECONFLICT collect: ' .. once.conflict)
  end
end
local function identity_of(offered)
  if offered == '' then
    local t = clock_raw()
    offered = 't' .. t[1] .. t[2]
  end
  return redis.call('SET', KEYS[5], offered, 'NX', 'GET') or offered
end
if once and once.answer then
  once_end(once, KEYS[7], KEYS[8], nil, now_ms, horizon_ms)
  local was_evicted, was_merged = string.match(once.answer, '^(%d+) (%d+)$')
  return {tonumber(was_evicted), identity_of(ARGV[8]), tonumber(was_merged), 1}
end
local merged = 0
if keyed then
  n, merged, len = dedup_push(KEYS[1], KEYS[9], blob, now_ms, window_ms, dedup_most)
end
-- == end of written once ==================================================================

-- Cut with a plain find (memchr), not a pattern; unpack() is limited by Lua's stack, so push
-- in slices of 1000.  The hot loop of the script (once per event): the functions are locals,
-- the slice's length is counted (Lua's # searches for it) and the one table is filled again.
local pos, slice, k = 1, {}, 0
if n > 0 then blob = '' end -- pushed with their dedup keys above
local find, sub, size = string.find, string.sub, #blob
while pos <= size do
  local stop = find(blob, '\n', pos, true) or (size + 1)
  k = k + 1
  slice[k] = sub(blob, pos, stop - 1)
  if k == 1000 then
    len = redis.call('RPUSH', KEYS[1], unpack(slice, 1, k))
    n, k = n + k, 0
  end
  pos = stop + 1
end
if k > 0 then
  len = redis.call('RPUSH', KEYS[1], unpack(slice, 1, k))
  n = n + k
end
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
if n + pre_evicted > 0 then
  redis.call('HINCRBY', KEYS[4], 'stored', n + pre_evicted)
end
if evicted > 0 then redis.call('HINCRBY', KEYS[4], 'evicted', evicted) end
if dropped_full > 0 then
  redis.call('HINCRBY', KEYS[4], 'dropped_buffer_full', dropped_full)
end
if dropped_large > 0 then
  redis.call('HINCRBY', KEYS[4], 'dropped_too_large', dropped_large)
end
-- == written once: remember the answer ====================================================
if merged > 0 then redis.call('HINCRBY', KEYS[4], 'merged', merged) end
once_end(once, KEYS[7], KEYS[8], evicted .. ' ' .. merged, now_ms, horizon_ms)
-- == end of written once ==================================================================
return {evicted, identity_of(ARGV[8]), merged, 0}
