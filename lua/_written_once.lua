-- (included by collect) Written once, and duplicates merged in a window.
--
-- A write carries its writer's id and a sequence number, counted per writer and shard (as
-- Kafka's idempotent producer: producer id plus a sequence per partition). The shard
-- remembers the writes it applied, and answers a repeat (a write sent again after a lost
-- reply, a timeout or an unconfirmed WAIT) with what it answered the first time, storing
-- nothing. Each write also says the writer's lowest sequence number still without an answer
-- (`low`): every write below it has been answered, so its memory is let go (sixteen at a
-- time, in one HDEL).
--
--   writes  (hash)  "<writer>"       -> "<lo> <hi> <ms>": the range of sequence numbers kept,
--                                       and when the writer's entry in writers was renewed
--                   "<writer>:<seq>" -> "<evicted> <merged>": what that write answered
--   writers (zset)  writer -> ms of its latest write here, renewed at most once a second;
--                   a writer idle for the horizon, or the least recent beyond the most kept,
--                   is forgotten (two per renewal)
--
-- A forgotten writer's repeat is applied again (a duplicate, never a loss). Both keys live
-- as long as the horizon after the shard's latest write (to the second). A call costs three
-- commands here (TIME, HMGET, HSET), the letting go one in sixteen, the rest once a second.

-- include: _time

-- The writer's write state, and the first answer if this write is a repeat (nil if it is to
-- be applied), or nil and an error text for bad arguments. Nothing is written here.
local function once_begin(writes, writer, seq_arg, low_arg, most_arg)
  if writer == '' then return nil end
  local seq, low, most = tonumber(seq_arg), tonumber(low_arg), tonumber(most_arg)
  if #writer > 64 or not string.find(writer, '^[%w_.-]+$') then
    return nil, nil, string.format('writer id: expected 1 to 64 of [A-Za-z0-9_.-], got %.80s',
                                   writer)
  end
  if not (seq and low and most) or seq < 1 or low < 1 or low > seq or seq - low >= most
      or seq ~= math.floor(seq) or low ~= math.floor(low) then
    return nil, nil, 'sequence number ' .. tostring(seq_arg) .. ' with lowest unanswered '
      .. tostring(low_arg) .. ': expected whole numbers, 1 <= lowest <= sequence < lowest + '
      .. tostring(most_arg)
  end
  local w = {writer = writer, field = writer .. ':' .. seq, lo = low, hi = seq, ms = 0}
  local found = redis.call('HMGET', writes, writer, w.field)
  local meta = found[1]
  if meta then
    local lo, hi, ms = string.match(meta, '^(%d+) (%d+) ?(%d*)$')
    w.lo, w.hi = tonumber(lo) or low, math.max(tonumber(hi) or seq, seq)
    w.ms = tonumber(ms) or 0
  end
  -- Writes below `low` have been answered: their memory goes, sixteen or more at a time
  -- (never more than `most`).
  if low >= w.lo + 16 then
    w.gone = {}
    for s = w.lo, math.min(low - 1, w.hi) do w.gone[#w.gone + 1] = writer .. ':' .. s end
    w.lo = low
  end
  if seq < w.lo then return w, '0 0' end -- answered and let go: a late repeat
  return w, found[2] or nil
end

local function once_forget(writes, writers, writer)
  local meta = redis.call('HGET', writes, writer)
  if meta then
    local lo, hi = string.match(meta, '^(%d+) (%d+)')
    local gone = {writer}
    for s = tonumber(lo) or 1, tonumber(hi) or 0 do gone[#gone + 1] = writer .. ':' .. s end
    redis.call('HDEL', writes, unpack(gone))
  end
  redis.call('ZREM', writers, writer)
end

-- Note the write (with `answer`, "<evicted> <merged>", unless it is a repeat): always a
-- write, so that a WAIT after a repeat covers the first write too. Once a second per writer:
-- renew its entry in writers and the keys' TTL, and forget idle writers.
local function once_end(w, writes, writers, answer, now_ms, horizon_ms, most_writers)
  if w == nil then return end
  if w.gone and #w.gone > 0 then redis.call('HDEL', writes, unpack(w.gone)) end
  local renew = now_ms - w.ms >= 1000
  local meta = w.lo .. ' ' .. w.hi .. ' ' .. (renew and now_ms or w.ms)
  if answer then
    redis.call('HSET', writes, w.field, answer, w.writer, meta)
  else
    redis.call('HSET', writes, w.writer, meta)
  end
  if not renew then return end
  redis.call('ZADD', writers, now_ms, w.writer)
  local old = redis.call('ZRANGEBYSCORE', writers, '-inf', now_ms - horizon_ms, 'LIMIT', 0, 2)
  local extra = redis.call('ZCARD', writers) - most_writers - #old
  if extra > 0 then
    for _, writer in ipairs(redis.call('ZRANGE', writers, #old, #old + math.min(extra, 2) - 1)) do
      old[#old + 1] = writer
    end
  end
  for _, writer in ipairs(old) do
    if writer ~= w.writer then once_forget(writes, writers, writer) end
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
  local n, merged, len, pos, slice, keyed = 0, 0, nil, 1, {}, false
  while pos <= #blob do
    local stop = string.find(blob, '\n', pos, true) or (#blob + 1)
    local entry = nil
    n = n + 1
    if string.byte(blob, pos) == 30 then
      local close = string.find(blob, '\30', pos + 1, true)
      if close and close < stop then
        local key = string.sub(blob, pos + 1, close - 1)
        entry = string.sub(blob, close + 1, stop - 1)
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
    if entry == nil then entry = string.sub(blob, pos, stop - 1) end
    if entry then
      slice[#slice + 1] = entry
      if #slice == 1000 then
        len = redis.call('RPUSH', queue, unpack(slice))
        slice = {}
      end
    end
    pos = stop + 1
  end
  if #slice > 0 then len = redis.call('RPUSH', queue, unpack(slice)) end
  if keyed then
    redis.call('ZREMRANGEBYSCORE', seen, '-inf', now_ms - window_ms)
    local extra = redis.call('ZCARD', seen) - most
    if extra > 0 then redis.call('ZREMRANGEBYRANK', seen, 0, extra - 1) end
    redis.call('PEXPIRE', seen, window_ms)
  end
  return n, merged, len
end
