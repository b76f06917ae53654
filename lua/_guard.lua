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
-- include: _time
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
