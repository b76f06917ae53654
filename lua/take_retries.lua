#!lua flags=allow-oom
-- take_retries: lease batches whose retry time has come.
-- allow-oom: each batch moves from the retry set to the lease set and its metadata gets a
-- new token of the same length: no growth; the retries are what a full Redis must send first.
--
-- KEYS[1]  retry      zset   batch id -> when it is due (ms)
-- KEYS[2]  inflight   zset   batch id -> lease deadline (ms)
-- KEYS[3]  batches    hash   batch id -> metadata (JSON)
-- KEYS[4]  payloads   hash   batch id -> entries
-- ARGV[1]  lease token for every batch taken
-- ARGV[2]  lease length in ms
-- ARGV[3]  batches to take at most
-- ARGV[4]  only batches of this game ('' = any game)
-- returns  {batch id, game, attempts so far, entries, ...}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local want = tonumber(ARGV[3])
local scan = ARGV[4] == '' and want or want * 8
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, scan)
local out = {}
local taken = 0
for _, id in ipairs(due) do
  if taken >= want then break end
  local raw = redis.call('HGET', KEYS[3], id)
  if not raw then
    redis.call('ZREM', KEYS[1], id)
  else
    local meta = cjson.decode(raw)
    if ARGV[4] == '' or meta.g == ARGV[4] then
      redis.call('ZREM', KEYS[1], id)
      meta.t = ARGV[1]
      redis.call('HSET', KEYS[3], id, cjson.encode(meta))
      redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), id)
      out[#out + 1] = id
      out[#out + 1] = meta.g
      out[#out + 1] = meta.a
      out[#out + 1] = redis.call('HGET', KEYS[4], id)
      taken = taken + 1
    end
  end
end
return out
