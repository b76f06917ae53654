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
-- (included by every script that writes: poison set aside, and receipts)
--
-- Poison set aside, never spread.  Before its first write a script makes sure of every key it
-- may write: a key of another type than the one it needs (written by hand, by another tool,
-- by a bug) is moved to the shard's quarantine and the script goes on as if the key were
-- absent.  A read that meets such a key does the same (read); batch metadata is decoded under
-- pcall and checked field by field (read_meta), and a batch whose metadata cannot be used is
-- moved to the quarantine whole (set_aside_batch).  A counter the script will add to that
-- does not hold an integer is moved aside too (guard_open), so no HINCRBY can fail half-way.
-- So a script either does its whole change or none of it, and one bad record never stops the
-- rest of its shard.
--
-- The quarantine is a list, newest first, of at most QUARANTINE_KEEP records (the oldest fall
-- off; each one counted when it came): JSON {k = the key, f = the field or batch id, y = the
-- type found, r = the reason, v = the record's first SAMPLE_BYTES bytes, n = events in it,
-- s = the script, at = ms}.  Every record counts one in `quarantined_records`; the events of
-- a pending batch set aside (in flight or waiting for a retry) count in `quarantined_events`
-- (those of a dead letter were counted in `dead_events` already).  QUARANTINE_KEEP is
-- collector.store's QUARANTINE_KEEP too (a test checks).
--
-- Receipts.  A call that changed something leaves, in the same atomic step, a receipt under
-- its own key (in KEYS, with the shard's hash tag): what it answered, the script and the
-- token.  It expires after the receipt lifetime the store passes (how long a client may
-- still send a call again after it ran).  The same call sent again, because its reply was
-- lost, finds the receipt and answers the same, changing nothing.
-- (included by _guard and _written_once, so by every script but read_shard, which reads no time;
-- a part is included once)
-- The server's clock, read with TIME at most once per call: every time a script uses comes
-- from here (ms for deadlines and records, us for the rate limiters), so all of one call's
-- times agree and no script does this arithmetic itself.
local clock_reply = nil

-- TIME's reply: {seconds, microseconds}, as strings.
local function clock_raw()
  if not clock_reply then clock_reply = redis.call('TIME') end
  return clock_reply
end

-- Milliseconds since the epoch.
local function clock_ms()
  local t = clock_raw()
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Microseconds since the epoch (below 2^53 for the next 250 years: exact in a Lua number).
local function clock_us()
  local t = clock_raw()
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local QUARANTINE_KEEP = 1000
local SAMPLE_BYTES = 256
local guard = {script = '?', q = '', stats = '', q_checked = false, count = 0}

-- Text for a record: at most SAMPLE_BYTES, every byte outside printable ASCII as \xNN (so a
-- record is plain JSON, and nothing from it can drive a terminal).
local function printable(value)
  return (string.gsub(string.sub(value, 1, SAMPLE_BYTES), '[^ -~]', function(c)
    return string.format('\\x%02x', string.byte(c))
  end))
end

-- The first bytes of whatever a key holds, for the quarantine record.
local function sample(key, kind)
  local ok, value = pcall(function()
    if kind == 'string' then return redis.call('GETRANGE', key, 0, SAMPLE_BYTES - 1) end
    local part
    if kind == 'list' then part = redis.call('LRANGE', key, 0, 2)
    elseif kind == 'hash' then part = redis.call('HSCAN', key, 0, 'COUNT', 3)[2]
    elseif kind == 'set' then part = redis.call('SSCAN', key, 0, 'COUNT', 3)[2]
    elseif kind == 'zset' then part = redis.call('ZRANGE', key, 0, 2)
    else return '' end
    return table.concat(part, ' ')
  end)
  if not ok or type(value) ~= 'string' then return '' end
  return printable(value)
end

local quarantine

-- The quarantine list itself of another type: moved aside like any key (checked once per
-- call, before its first record).
local function check_quarantine()
  if guard.q_checked then return end
  guard.q_checked = true
  local found = redis.call('TYPE', guard.q).ok
  if found ~= 'list' and found ~= 'none' then
    local record = {k = guard.q, y = found, r = 'a ' .. found .. ' where a list belongs',
                    v = sample(guard.q, found)}
    redis.call('UNLINK', guard.q)
    quarantine(record, 0)
  end
end

-- Add a record to the quarantine and count it (and `events` of a pending batch in it).
quarantine = function(record, events)
  check_quarantine()
  record.s = guard.script
  record.at = clock_ms()
  redis.call('LPUSH', guard.q, cjson.encode(record))
  redis.call('LTRIM', guard.q, 0, QUARANTINE_KEEP - 1)
  redis.call('HINCRBY', guard.stats, 'quarantined_records', 1)
  guard.count = guard.count + 1
  if events > 0 then redis.call('HINCRBY', guard.stats, 'quarantined_events', events) end
end

local function set_key_aside(key, found, kind)
  local record = {k = key, y = found, r = 'a ' .. found .. ' where a ' .. kind .. ' belongs',
                  v = sample(key, found)}
  redis.call('UNLINK', key)
  quarantine(record, 0)
end

-- Make sure `key` is a `kind` (or absent); else move it to the quarantine.  True if it was.
local function expect(key, kind)
  local found = redis.call('TYPE', key).ok
  if found == kind or found == 'none' then return true end
  set_key_aside(key, found, kind)
  return false
end

-- Run a read of a key (the command's first argument after its name) that must be a `kind`;
-- a key of another type is moved to the quarantine and reads as `absent`.
local function read(kind, absent, ...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err then
    if string.find(reply.err, 'WRONGTYPE', 1, true) then
      expect(select(2, ...), kind)
      return absent
    end
    error(reply)
  end
  return reply
end

local function is_count(value)
  return type(value) == 'string' and #value <= 18 and string.find(value, '^%-?%d+$') ~= nil
end

-- Start guarding: the script's name, its shard's quarantine and counters, and the counters it
-- may add to.  A counters key of another type, or a counter that is not an integer, is moved
-- aside before anything else is written.
local function guard_open(script, q, stats, fields)
  guard.script, guard.q, guard.stats = script, q, stats
  local names = {'quarantined_records', 'quarantined_events'}
  for _, name in ipairs(fields) do names[#names + 1] = name end
  local values = redis.pcall('HMGET', stats, unpack(names))
  if values.err then
    if not string.find(values.err, 'WRONGTYPE', 1, true) then error(values) end
    set_key_aside(stats, redis.call('TYPE', stats).ok, 'hash')
    return
  end
  for i, value in ipairs(values) do
    if value and not is_count(value) then
      redis.call('HDEL', stats, names[i])
      quarantine({k = stats, f = names[i], r = 'a counter that is not an integer',
                  v = printable(value)}, 0)
    end
  end
end

-- The ring (games, a zset) moved aside is built again from `active`, so that no registered
-- game stops being swept: RING_PAGES pages of SSCAN per call (about 1,000 games), one ZADD
-- each.  Where a larger set goes on is kept in the ring itself, as a member that is never a
-- game name (REBUILD_MARK .. the SSCAN cursor; it sorts before every game): the sweeper
-- meets it in its first slice and hands it to set_aside, which goes on from there.
local RING_PAGES = 2
local REBUILD_MARK = '\1rebuild:'
local function rebuild_ring(ring, active, cursor)
  for _ = 1, RING_PAGES do
    local page = redis.call('SSCAN', active, cursor, 'COUNT', 500)
    cursor = page[1]
    local members = {}
    for _, game in ipairs(page[2]) do
      members[#members + 1] = 0
      members[#members + 1] = game
    end
    if #members > 0 then redis.call('ZADD', ring, unpack(members)) end
    if cursor == '0' then return end
  end
  redis.call('ZADD', ring, 0, REBUILD_MARK .. cursor)
end

local function expect_ring(ring, active)
  if expect(ring, 'zset') then return end
  if redis.call('TYPE', active).ok ~= 'set' then return end
  rebuild_ring(ring, active, '0')
end

local function is_whole(value)
  return type(value) == 'number' and value >= 0 and value == math.floor(value)
    and value < 2 ^ 53
end

-- What a record may hold.  A value outside these bounds was written by hand, by another tool
-- or by a bug (never by these scripts): the record is set aside like one that does not decode.
-- Each is the most the reporter's settings allow (a test holds them to the config's bounds).
local MAX_BATCH_EVENTS = 128     -- events in one batch ([reporter] batch_size)
local MAX_CLAIM_BATCHES = 64     -- batches of one claim ([reporter] max_batches_per_claim)
local MAX_ATTEMPTS = 1000        -- attempts of one batch ([retry] max_attempts)
local LONGEST_WAIT_MS = 3600000  -- a batch lease or a retry delay ([reporter] lease_seconds,
                                 -- [retry] max_delay_ms; a Retry-After is cut at 600 s)
-- A time a script wrote as "now" may lie this far ahead of the server's clock (a replica
-- promoted with its own clock): further is junk.  Metadata times are only shown, so they
-- get a day; coordination times (leases, retries) a minute beyond their longest wait.
local CLOCK_SLACK_MS = 60000
local SHOWN_TIME_SLACK_MS = 86400000

-- ARGV[i] as a number from lo to hi (whole unless `fraction`); anything else refuses the call
-- before its first write, with an error that names the argument.
local function arg_number(i, name, lo, hi, fraction)
  local x = tonumber(ARGV[i])
  if x == nil or x ~= x or x < lo or x > hi or (not fraction and x ~= math.floor(x)) then
    error({err = string.format('ERR %s: ARGV[%d] (%s) must be a %s from %.17g to %.17g, not %q',
                               guard.script, i, name, fraction and 'number' or 'whole number',
                               lo, hi, string.sub(tostring(ARGV[i]), 1, 40))})
  end
  return x
end

-- A time in ms a script wrote as "now": whole, not negative, at most `slack` after now.
local function is_time_ms(value, slack)
  return is_whole(value) and value <= clock_ms() + slack
end

-- Batch metadata as a table, or nil and why it cannot be used.  Everything a script reads
-- from it is checked here, and that it can be written back: cjson reads 1e999 or nan as a
-- number it will not write, so a script that found out at its HSET would fail after its
-- first write.
local function read_meta(raw)
  local ok, meta = pcall(cjson.decode, raw)
  if not ok then return nil, 'metadata that is not JSON' end
  if type(meta) ~= 'table' then return nil, 'metadata that is not a JSON object' end
  if type(meta.g) ~= 'string' or type(meta.t) ~= 'string' or not is_whole(meta.n)
      or not is_whole(meta.a) or type(meta.c or 0) ~= 'number' then
    return nil, 'metadata without a game, token, size or attempt count of the right type'
  end
  if meta.n > MAX_BATCH_EVENTS or meta.a > MAX_ATTEMPTS then
    return nil, 'metadata with a size or attempt count out of range'
  end
  if (meta.c ~= nil and not is_time_ms(meta.c, SHOWN_TIME_SLACK_MS))
      or (meta.d ~= nil and not is_time_ms(meta.d, SHOWN_TIME_SLACK_MS)) then
    return nil, 'metadata with a time that is not a whole ms up to now'
  end
  if (meta.r ~= nil and type(meta.r) ~= 'string') or (meta.ir ~= nil and type(meta.ir) ~= 'table')
  then
    return nil, 'metadata with a reason of the wrong type'
  end
  -- a place in its game's queue (lua/_order.lua): 15 digits
  if meta.o ~= nil and (type(meta.o) ~= 'string' or #meta.o ~= 15
                        or not string.find(meta.o, '^%d+$')) then
    return nil, 'metadata with a queue place of the wrong form'
  end
  if not pcall(cjson.encode, meta) then
    return nil, 'metadata with a number that is not finite'
  end
  return meta
end

local function entries_in(blob)
  if not blob or blob == '' then return 0 end
  local _, newlines = string.gsub(blob, '\n', '')
  return newlines + 1
end

-- Move batch `id` (metadata `raw`, payload) to the quarantine; the caller takes it out of the
-- set or list it was found in.  `pending`: it was in flight or waiting for a retry, so its
-- events (those of its payload, or `events` when given) leave the pending ones and count as
-- quarantined (a dead letter's were counted in dead_events).
local function set_aside_batch(batches, payloads, id, raw, reason, pending, events)
  local blob = read('hash', false, 'HGET', payloads, id)
  events = events or entries_in(blob)
  quarantine({k = batches, f = printable(id), r = reason, v = printable(raw or ''),
              n = events}, pending and events or 0)
  redis.call('HDEL', batches, id)
  redis.call('HDEL', payloads, id)
end

-- Metadata `raw` of batch `id` as a table if it can be used and its payload is there; else
-- nil, why, and the events to count if it is set aside (nil: those of its payload).  With
-- `blob` (a script that hands the payload out reads it anyway) the payload holds no more
-- entries than a batch can.  Nothing is written: the caller sets the batch aside
-- (set_aside_batch) when its checks are done.
local function check_batch(payloads, id, raw, blob)
  local meta, why = read_meta(raw)
  if not meta then return nil, why end
  if blob == nil and meta.n > 0 and read('hash', 0, 'HEXISTS', payloads, id) == 0
      or blob == false and meta.n > 0 then
    return nil, 'a batch without its payload', meta.n
  end
  if blob and entries_in(blob) > MAX_BATCH_EVENTS then
    return nil, 'a payload of more entries than a batch holds', meta.n
  end
  return meta
end

-- Up to `most` members of zset `key` due at `now` (scored at or before it), then those scored
-- further ahead than now + `longest` + CLOCK_SLACK_MS: no script writes such a time (a lease
-- or a retry is never that long), so it is junk and its member is due now.  The second answer
-- holds those (member -> score), for the caller to note in the quarantine when it writes.
local function due_members(key, now, longest, most)
  local due = read('zset', {}, 'ZRANGEBYSCORE', key, '-inf', now, 'LIMIT', 0, most)
  local far = {}
  if #due < most then
    local found = read('zset', {}, 'ZRANGEBYSCORE', key,
                       string.format('(%.0f', now + longest + CLOCK_SLACK_MS), '+inf',
                       'WITHSCORES', 'LIMIT', 0, most - #due)
    for k = 1, #found, 2 do
      due[#due + 1] = found[k]
      far[found[k]] = found[k + 1]
    end
  end
  return due, far
end

-- Note in the quarantine a time that lies further ahead than any a script writes: the record
-- (its batch, its time) is used as due now, so nothing is removed and no event counted.
local function note_far_time(key, member, score, what)
  quarantine({k = key, f = printable(member), r = what .. ' further ahead than any script sets',
              v = printable(score)}, 0)
end

-- A hash field kept as a number (a rate's slot, a hold's probe time): `value` (as HMGET gave
-- it) from lo to hi, else nil.  A value outside (not a number, not finite, a time further
-- ahead than any script sets) is refused: it reads as absent, and goes on `refused`, for
-- drop_refused to move to the quarantine once the call writes.
local function field_number(refused, key, name, value, lo, hi)
  if not value then return nil end
  local x = tonumber(value)
  if x and x == x and x >= lo and x <= hi then return x end
  refused[#refused + 1] = {key, name, value}
  return nil
end

local function drop_refused(refused)
  for _, r in ipairs(refused) do
    redis.call('HDEL', r[1], r[2])
    quarantine({k = r[1], f = printable(r[2]), r = 'a value out of its bounds: refused',
                v = printable(r[3])}, 0)
  end
end

-- A list of at most `most` strings (a receipt's batch ids).
local function is_strings(value, most)
  if type(value) ~= 'table' or #value > most then return false end
  for k = 1, #value do
    if type(value[k]) ~= 'string' then return false end
  end
  return true
end

-- What this call answered when it ran, if this is it sent again; else nil.
-- `shape` (optional) says whether the answer kept is one this script gives: a receipt
-- written by anything else is not this call's, and is ignored.
local RECEIPT_MOST_BYTES = 65536 -- larger: not a receipt a script wrote (decoding it is slow)
local function receipt_of(key, token, shape)
  local size = redis.pcall('STRLEN', key)
  if type(size) ~= 'number' or size == 0 or size > RECEIPT_MOST_BYTES then return nil end
  local raw = redis.call('GET', key)
  local ok, r = pcall(cjson.decode, raw)
  if not ok or type(r) ~= 'table' or r.s ~= guard.script or r.t ~= token or r.r == nil then
    return nil
  end
  if shape and not shape(r.r) then return nil end
  return r.r
end

local function keep_receipt(key, token, reply, lifetime_ms)
  redis.call('SET', key, cjson.encode({s = guard.script, t = token, r = reply}), 'PX',
             lifetime_ms)
end
-- (included by collect, after _guard) Written once, and duplicates merged in a window.
--
-- A write carries its writer's id and a sequence number, counted per writer and shard (as
-- Kafka's idempotent producer: producer id plus a sequence per partition), and a checksum
-- of its content. The shard remembers the writes it applied, and answers a repeat (a write
-- sent again after a lost reply, a timeout or an unconfirmed WAIT) with what it answered the
-- first time, storing nothing. A "repeat" whose content differs (its length or checksum) is
-- not one: another process uses the same writer id (a cloned machine, a fork the SDK did not
-- see). It is refused, stored nowhere and counted (`refused_repeats`), and so is a write
-- below the range the shard remembers of its writer: the refused writer takes a new id and
-- sends the events again. Each write also says the writer's lowest sequence number still
-- without an answer (`low`): every write below it has been answered, so its memory is let
-- go (sixteen or more at a time, in one HDEL).
--
--   writes  (hash)  "<writer>"       -> "<lo> <hi> <ms>": the range of sequence numbers kept
--                                       (lo <= hi, hi - lo < ONCE_SPAN), and when the
--                                       writer's entry in writers was renewed (ms)
--                   "<writer>:<seq>" -> "<evicted> <merged> <bytes> <checksum>": what that
--                                       write answered, the length of its entries argument
--                                       and the checksum it came with
--   writers (zset)  writer -> ms of its latest write here, renewed at most once a second;
--                   a writer idle for the horizon, or the least recent beyond the most kept,
--                   is forgotten (two per renewal)
--
-- Every loop is bounded by a constant, whatever a record holds: the range kept of a writer
-- is shorter than ONCE_SPAN (a longer one, or one that does not parse, is a record this code
-- never writes: it is set aside to the quarantine), so letting a range go, or forgetting a
-- writer, deletes at most ONCE_SPAN fields, ONCE_SLICE per HDEL. A sequence that jumps far
-- (writes refused for a long time, a failover to a lagging replica, a restart from an older
-- snapshot) lets go of the old range and starts the new one at `low`: no loop over the gap.
-- Everything is read and checked before the first write (set-asides apart).
--
-- A forgotten writer's repeat is applied again (a duplicate, never a loss). Both keys live
-- as long as the horizon after the shard's latest write (to the second). A call costs three
-- commands here (TIME, HMGET, HSET), the letting go one in sixteen, the rest once a second.

local ONCE_MOST = 4096 -- writes without an answer a call may declare at most (ARGV[14])
local ONCE_LET_GO = 16 -- answered writes are let go this many or more at a time
local ONCE_SPAN = ONCE_MOST + ONCE_LET_GO -- a writer's range is shorter than this
local ONCE_FORGET = 2 -- writers forgotten per renewal at most
local ONCE_SLICE = 1000 -- fields per HDEL (unpack() is limited by Lua's stack)

-- (_time is included above)

-- A whole number of at most 14 digits (written back exactly by Lua's "%.14g") from a
-- record's text.
local function once_digits(text)
  if text == nil or #text == 0 or #text > 14 then return nil end
  return tonumber(text)
end

-- A writer's record: its range and renewal time, or nil if it cannot be one.
local function once_range(meta)
  local lo, hi, ms = string.match(meta, '^(%d+) (%d+) ?(%d*)$')
  lo, hi = once_digits(lo), once_digits(hi)
  if not (lo and hi) or lo < 1 or hi < lo or hi - lo >= ONCE_SPAN then return nil end
  return lo, hi, (ms == '' and 0) or once_digits(ms) or 0
end

-- A write's record: its answer ("<evicted> <merged>") and content, or nil if it cannot be one.
local function once_record(record)
  local answer, bytes, sum = string.match(record, '^(%d+ %d+) (%d+) (%w+)$')
  if not answer or not once_digits(bytes) then return nil end
  return answer, tonumber(bytes), sum
end

-- The checks of a write's own numbers (arguments, not records): nil, or what is wrong.
-- `seq`, `low` and `most` are nil unless whole numbers; the texts are those three arguments as
-- sent (for the error).
local function once_check(writer, seq, low, most, checksum, seq_text, low_text, most_text)
  if #writer > 64 or not string.find(writer, '^[%w_.-]+$') then
    return string.format('writer id: expected 1 to 64 of [A-Za-z0-9_.-], got %.80s', writer)
  end
  if not (seq and low and most) or low > seq or most > ONCE_MOST or seq - low >= most then
    return string.format('sequence number %.20s with lowest unanswered %.20s: expected whole '
      .. 'numbers, 1 <= lowest <= sequence < lowest + %.20s (at most %d)', seq_text,
      low_text, most_text, ONCE_MOST)
  end
  if #checksum < 1 or #checksum > 16 or not string.find(checksum, '^%w+$') then
    return string.format('checksum: expected 1 to 16 of [A-Za-z0-9], got %.80s', checksum)
  end
  return nil
end

-- Fields `writer`:lo .. `writer`:hi (a range once_range accepted: at most ONCE_SPAN).
local function once_fields(fields, writer, lo, hi)
  for s = lo, math.min(hi, lo + ONCE_SPAN - 1) do fields[#fields + 1] = writer .. ':' .. s end
end

-- Set aside a record this code never writes (the writer's range, or a write's answer).
local function once_set_aside(writes, field, value, why)
  quarantine({k = writes, f = printable(field), r = why, v = printable(value)}, 0)
  redis.call('HDEL', writes, field)
end

-- Read what the write needs: the writer's range, this write's record, and (once a second)
-- the writers to forget. Returns the state for once_end, with `answer` set if the write is
-- a repeat, or `conflict` (why it is refused) if it claims a number it cannot have. Writes
-- nothing but set-asides.
local function once_begin(writes, writers, writer, seq, low, checksum, bytes, now_ms,
                          horizon_ms, most_writers)
  local w = {writer = writer, field = writer .. ':' .. seq, lo = low, hi = seq, ms = 0,
             gone = {}, forget = {}, checksum = checksum, bytes = bytes}
  local found = redis.call('HMGET', writes, writer, w.field)
  local known = false
  if found[1] then
    local lo, hi, ms = once_range(found[1])
    if lo then
      known = true
      if seq < lo then
        w.conflict = string.format('write %d of writer %s is below the range %d-%d this '
          .. 'shard remembers of it: another process uses the same writer id', seq, writer,
          lo, hi)
        return w
      end
      w.lo, w.hi, w.ms = lo, math.max(hi, seq), ms
      -- Writes below `low` have been answered: their memory goes, sixteen or more at a time.
      -- Only the range kept is deleted (never the gap up to a far `low`).
      if low >= lo + ONCE_LET_GO then
        once_fields(w.gone, writer, lo, math.min(low - 1, hi))
        w.lo = low
      end
    else
      once_set_aside(writes, writer, found[1], "a writer's range that cannot be one")
    end
  end
  if found[2] then
    local answer, was_bytes, was_sum = once_record(found[2])
    if not answer then
      once_set_aside(writes, w.field, found[2], 'a remembered write that cannot be read')
    elseif was_bytes ~= bytes or was_sum ~= checksum then
      w.conflict = string.format('write %d of writer %s was applied with other content '
        .. '(%d bytes, checksum %s; this one %d bytes, checksum %s): another process uses '
        .. 'the same writer id', seq, writer, was_bytes, was_sum, bytes, checksum)
      return w
    else
      w.answer = answer
    end
  end
  -- Once a second per writer: renew its place in writers, and forget idle writers (or the
  -- least recent beyond the most kept), reading their ranges now.
  w.renew = not known or now_ms - w.ms >= 1000 or w.ms > now_ms
  if w.renew then
    local count = redis.call('ZCARD', writers)
    if not redis.call('ZSCORE', writers, writer) then count = count + 1 end
    local over = count - most_writers
    local least = redis.call('ZRANGE', writers, 0, ONCE_FORGET + 1, 'WITHSCORES')
    for i = 1, #least, 2 do
      local name, score = least[i], tonumber(least[i + 1]) or 0
      if name ~= writer and #w.forget < ONCE_FORGET
          and (score <= now_ms - horizon_ms or over > 0) then
        over = over - 1
        local fields = {name}
        local meta = redis.call('HGET', writes, name)
        local lo, hi = nil, nil
        if meta then lo, hi = once_range(meta) end
        if lo then
          once_fields(fields, name, lo, hi)
        elseif meta then -- its writes' records, if any, stay until the keys expire
          once_set_aside(writes, name, meta, "a writer's range that cannot be one")
        end
        w.forget[#w.forget + 1] = {name = name, fields = fields}
      end
    end
  end
  return w
end

-- HDEL `fields` in slices of ONCE_SLICE.
local function once_delete(writes, fields)
  local i = 1
  while i <= #fields do
    redis.call('HDEL', writes, unpack(fields, i, math.min(i + ONCE_SLICE - 1, #fields)))
    i = i + ONCE_SLICE
  end
end

-- Note the write (with `answer`, "<evicted> <merged>", unless it is a repeat): always a
-- write, so that a WAIT after a repeat covers the first write too. Once a second per writer:
-- renew its entry in writers and the keys' TTL, and forget the writers once_begin chose.
local function once_end(w, writes, writers, answer, now_ms, horizon_ms)
  if w == nil then return end
  once_delete(writes, w.gone)
  local meta = w.lo .. ' ' .. w.hi .. ' ' .. (w.renew and now_ms or w.ms)
  if answer then
    redis.call('HSET', writes, w.field, answer .. ' ' .. w.bytes .. ' ' .. w.checksum,
               w.writer, meta)
  else
    redis.call('HSET', writes, w.writer, meta)
  end
  if not w.renew then return end
  redis.call('ZADD', writers, now_ms, w.writer)
  for _, gone in ipairs(w.forget) do
    once_delete(writes, gone.fields)
    redis.call('ZREM', writers, gone.name)
  end
  redis.call('PEXPIRE', writes, horizon_ms)
  redis.call('PEXPIRE', writers, horizon_ms)
end

-- Push the entries of `blob` (joined by "\n") onto `queue`, in slices of 1000 (unpack() is
-- limited by Lua's stack). An entry "\30<key>\30<entry>" carries a dedup key: it is stored
-- unless `seen` holds the key from within the last `window_ms` (then it is merged, counted,
-- not stored); the first of a key wins. `seen` (zset: key -> ms when its event was stored)
-- keeps at most `most` keys, the oldest forgotten first, and expires with the window.
-- Returns the entries read (merged included), those merged, and the list's length (nil if
-- nothing was pushed).
local function dedup_push(queue, seen, blob, now_ms, window_ms, most)
  local n, merged, len, pos, slice, k, keyed = 0, 0, nil, 1, {}, 0, false
  local find, sub, byte, size = string.find, string.sub, string.byte, #blob
  while pos <= size do
    local stop = find(blob, '\n', pos, true) or (size + 1)
    local entry = nil
    n = n + 1
    if byte(blob, pos) == 30 then
      local close = find(blob, '\30', pos + 1, true)
      if close and close < stop then
        local key = sub(blob, pos + 1, close - 1)
        entry = sub(blob, close + 1, stop - 1)
        if key ~= '' and window_ms > 0 then
          keyed = true
          if redis.call('ZADD', seen, 'NX', now_ms, key) == 0 then -- the key was there
            if tonumber(redis.call('ZSCORE', seen, key)) > now_ms - window_ms then
              merged = merged + 1
              entry = false
            else -- from before the window: this event is the key's first now
              redis.call('ZADD', seen, 'XX', now_ms, key)
            end
          end
        end
      end
    end
    if entry == nil then entry = sub(blob, pos, stop - 1) end
    if entry then
      k = k + 1
      slice[k] = entry
      if k == 1000 then
        len = redis.call('RPUSH', queue, unpack(slice, 1, k))
        k = 0
      end
    end
    pos = stop + 1
  end
  if k > 0 then len = redis.call('RPUSH', queue, unpack(slice, 1, k)) end
  if keyed then
    redis.call('ZREMRANGEBYSCORE', seen, '-inf', now_ms - window_ms)
    local extra = redis.call('ZCARD', seen) - most
    if extra > 0 then redis.call('ZREMRANGEBYRANK', seen, 0, extra - 1) end
    redis.call('PEXPIRE', seen, window_ms)
  end
  return n, merged, len
end

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
