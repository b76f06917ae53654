-- (included by ack and ack_many, after _guard and _order)
-- Finish batches the endpoint accepted whole, all leased under one token, in one call: what
-- ack.lua does for one batch, for each of `ids` (their stale counts in `stales`, their
-- receipt keys in `receipts`), with the reads of all of them first and each command once
-- for all where it takes several members (HMGET, ZMSCORE, ZREM, HDEL, the counters).
--
-- Each batch gets the answer a call of ack.lua for it alone would give: the events counted
-- as delivered, or -1 if the caller no longer holds its lease (its receipt answers instead
-- when this is a call sent again after a lost reply).  Metadata that cannot be used is set
-- aside (lua/_guard.lua) and answers -1; the others are acked all the same.  Counts that
-- exceed a batch's size refuse the whole call before its first write, as ack.lua does.
local MAX_ACKS = 64 -- batches of one call at most (a claim's at most: MAX_CLAIM_BATCHES)

-- Ack `ids`; returns the answers, in their order, or an error reply.
local function ack_batches(inflight, batches, payloads, stats, order, token, ids, stales,
                           receipts, receipt_ms)
  local n = #ids
  if n < 1 or n > MAX_ACKS then
    return redis.error_reply(string.format('ERR %s: 1 to %d batches, not %d', guard.script,
                                           MAX_ACKS, n))
  end
  local seen = {}
  for k = 1, n do
    if seen[ids[k]] then
      return redis.error_reply('ERR ' .. guard.script .. ': batch ' .. printable(ids[k])
                               .. ' named twice')
    end
    seen[ids[k]] = true
  end
  -- Read and check everything first.
  local raws = read('hash', {}, 'HMGET', batches, unpack(ids))
  local leases = read('zset', {}, 'ZMSCORE', inflight, unpack(ids))
  local answers, done, aside, members = {}, {}, {}, {}
  local delivered_all, stale_all = 0, 0
  for k = 1, n do
    local raw = raws[k]
    if not (raw and leases[k]) then
      answers[k] = receipt_of(receipts[k], token, is_whole) or -1
    else
      local meta, why = read_meta(raw)
      if not meta then
        aside[#aside + 1] = {ids[k], raw, why}
        answers[k] = -1
      elseif meta.t ~= token then
        answers[k] = receipt_of(receipts[k], token, is_whole) or -1
      else
        local delivered = meta.n - stales[k]
        if delivered < 0 then return redis.error_reply('ack counts exceed the batch size') end
        answers[k] = delivered
        done[#done + 1] = k
        members[#members + 1] = queued_member(order, ids[k], meta)
        delivered_all = delivered_all + delivered
        stale_all = stale_all + stales[k]
      end
    end
  end
  -- Then write.
  for _, bad in ipairs(aside) do
    set_aside_batch(batches, payloads, bad[1], bad[2], bad[3], true)
    redis.call('ZREM', inflight, bad[1])
  end
  if #done == 0 then return answers end
  expect(payloads, 'hash')
  local acked = {}
  for m, k in ipairs(done) do acked[m] = ids[k] end
  redis.call('ZREM', inflight, unpack(acked))
  redis.call('HDEL', batches, unpack(acked))
  redis.call('HDEL', payloads, unpack(acked))
  if #members > 0 then redis.call('ZREM', order, unpack(members)) end
  if delivered_all > 0 then redis.call('HINCRBY', stats, 'delivered', delivered_all) end
  if stale_all > 0 then redis.call('HINCRBY', stats, 'stale', stale_all) end
  redis.call('HINCRBY', stats, 'batches_delivered', #done)
  for _, k in ipairs(done) do keep_receipt(receipts[k], token, answers[k], receipt_ms) end
  return answers
end
