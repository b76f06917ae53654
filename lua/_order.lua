-- (included by the scripts that lease or finish batches: claim, take_retries, ack, ack_many,
-- nack, settle, reap; after _guard)
-- A game's batches first in, first out, for a sink that asks for it (the anti-addiction
-- interface: a session's logout must never reach it before its login).  Such a claim gives
-- each batch a place in its game's queue: a member '<game>\n<seq>\n<batch id>' of the
-- shard's `order` zset, every member scored 0, so that a game's members are one range by
-- name (ZRANGEBYLEX), in the order claimed.  seq is the claim's time (13 digits of ms) and
-- the batch's index in the claim (2 digits); the batch's metadata keeps it (`o`, checked by
-- read_meta).  Game names
-- hold no newline, so no game's range holds another's.
--
-- While any batch of a game is pending (leased, or waiting in the retry set), no new batch
-- of it is claimed, and the retry set gives up only the game's first pending batch (its head)
-- and those right behind it: a batch that failed holds back its game's later batches until it
-- is settled (delivered, dead-lettered, stale).  A batch that leaves (acked, dead-lettered)
-- takes its member out; a member whose batch left another way (set aside, dead-lettered by
-- the reaper) is dropped when a look meets it.  A batch whose metadata names a place that is
-- not in the queue (a dead letter replayed) is sent when due, like one of any other sink.
local ORDER_LOOK = 16 -- members of one game read per look: a bound, whatever the queue holds

local function order_member(game, seq, id)
  return game .. '\n' .. seq .. '\n' .. id
end

-- The seq of a claim's `index`-th batch (0-based), claimed at `now_ms`.
local function order_seq(now_ms, index)
  return string.format('%013d%02d', now_ms, index)
end

-- The member of batch `id` in its game's queue, if it is there (else nil).
local function queued_member(order, id, meta)
  if meta.o == nil then return nil end
  local member = order_member(meta.g, meta.o, id)
  if read('zset', false, 'ZSCORE', order, member) then return member end
  return nil
end

-- The first ORDER_LOOK members of `game`'s queue: the live ones in order, each {member, id,
-- lease = its lease deadline (ms) if leased, due = its retry time (ms) if waiting}; the
-- members whose batch is neither (gone); and whether the look was full (more may follow).
local function order_look(order, inflight, retry, game)
  local members = read('zset', {}, 'ZRANGEBYLEX', order, '[' .. game .. '\n',
                       '(' .. game .. '\v', 'LIMIT', 0, ORDER_LOOK)
  local live, gone = {}, {}
  for _, member in ipairs(members) do
    local id = string.match(member, '^[^\n]*\n%d+\n(.+)$')
    local lease = id and read('zset', false, 'ZSCORE', inflight, id)
    local due = id and not lease and read('zset', false, 'ZSCORE', retry, id)
    if lease or due then
      live[#live + 1] = {member = member, id = id, lease = lease and tonumber(lease),
                         due = due and tonumber(due)}
    else
      gone[#gone + 1] = member
    end
  end
  return live, gone, #members == ORDER_LOOK
end

-- Take `members` (one look's worth at most) out of the queue.
local function drop_members(order, members)
  if #members > 0 then redis.call('ZREM', order, unpack(members)) end
end
