#!lua flags=allow-oom
-- note_late: items of one request were delivered with their behaviour time moved into the
-- interface's window ([nppa] late_behaviour = "resend"): count them, and keep the record of
-- their original times (newest first, the oldest trimmed beyond a bound) for an auditor.
-- allow-oom: it follows a delivery whose ack freed more than the record takes; the list is
-- bounded.
--
-- KEYS[1]  stats      hash   the shard's counters
-- KEYS[2]  late       list   audit records (JSON), newest first
-- ARGV[1]  items moved (count)
-- ARGV[2]  the record (JSON)
-- ARGV[3]  records kept at most
-- returns  the records kept now
local moved = tonumber(ARGV[1])
if moved > 0 then redis.call('HINCRBY', KEYS[1], 'late_sent', moved) end
redis.call('LPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
return redis.call('LLEN', KEYS[2])
