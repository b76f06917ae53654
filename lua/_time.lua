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
