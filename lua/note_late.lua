#!lua flags=allow-oom
-- note_late: items of one request were delivered with their behaviour time moved into the
-- interface's window ([nppa] late_behaviour = "resend"): count them, and keep the record of
-- their original times (newest first, the oldest trimmed beyond a bound) for an auditor.
-- Sent again after a lost reply (its receipt is there): answers what it answered, counting
-- and keeping nothing twice.  An audit list of another type is set aside (lua/_guard.lua).
-- allow-oom: it follows a delivery whose ack freed more than the record takes; the list is
-- bounded, and the receipt expires after its lifetime.
--
-- KEYS[1]  stats      hash   the shard's counters
-- KEYS[2]  late       list   audit records (JSON), newest first
-- KEYS[3]  quarantine list   records set aside, newest first
-- KEYS[4]  receipt    string this call's answer, kept for a resend (done:<call id>)
-- ARGV[1]  moved: items moved (count)
-- ARGV[2]  record: the record (JSON)
-- ARGV[3]  keep: records kept at most
-- ARGV[4]  receipt_ms: receipt lifetime in ms
-- returns  the records kept now
-- include: _guard
guard_open('note_late', KEYS[3], KEYS[1], {'late_sent'})
local done = receipt_of(KEYS[4], '', is_whole)
if done then return done end
expect(KEYS[2], 'list')
local moved = tonumber(ARGV[1])
if moved > 0 then redis.call('HINCRBY', KEYS[1], 'late_sent', moved) end
redis.call('LPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
local kept = redis.call('LLEN', KEYS[2])
keep_receipt(KEYS[4], '', kept, ARGV[4])
return kept
