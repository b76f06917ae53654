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

-- include: _time

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
