#!lua flags=allow-oom
-- note_late: items of the anti-addiction sink that missed the interface's window: those of
-- one request delivered with their behaviour time moved into it ([nppa] late_behaviour =
-- "resend"), counted late_sent, or those of one batch dropped as stale, counted as logins
-- and logouts.  The record of them (session, behaviour, original time) is kept for an
-- auditor, newest first; the oldest beyond a bound are trimmed and counted
-- (late_records_trimmed).
-- Sent again after a lost reply (its receipt is there): answers what it answered, counting
-- and keeping nothing twice.  An audit list of another type is set aside (lua/_guard.lua).
-- allow-oom: it follows a delivery whose ack freed more than the record takes; the list is
-- bounded, and the receipt expires after its lifetime.
--
-- KEYS[1]  stats      hash   the shard's counters
-- KEYS[2]  late       list   audit records (JSON), newest first
-- KEYS[3]  quarantine list   records set aside, newest first
-- KEYS[4]  receipt    string this call's answer, kept for a resend (done:<call id>)
-- ARGV[1]  moved: items delivered with their time moved (count)
-- ARGV[2]  record: the record (JSON)
-- ARGV[3]  keep: records kept at most
-- ARGV[4]  logins: logins dropped as stale (count)
-- ARGV[5]  logouts: logouts dropped as stale (count)
-- ARGV[6]  receipt_ms: receipt lifetime in ms
-- returns  the records kept now
-- include: _guard
guard_open('note_late', KEYS[3], KEYS[1],
  {'late_sent', 'stale_logins', 'stale_logouts', 'late_records_trimmed'})
local done = receipt_of(KEYS[4], '', is_whole)
if done then return done end
expect(KEYS[2], 'list')
local moved = tonumber(ARGV[1])
local keep = tonumber(ARGV[3])
local logins = tonumber(ARGV[4])
local logouts = tonumber(ARGV[5])
if moved > 0 then redis.call('HINCRBY', KEYS[1], 'late_sent', moved) end
if logins > 0 then redis.call('HINCRBY', KEYS[1], 'stale_logins', logins) end
if logouts > 0 then redis.call('HINCRBY', KEYS[1], 'stale_logouts', logouts) end
local kept = redis.call('LPUSH', KEYS[2], ARGV[2])
if kept > keep then
  redis.call('LTRIM', KEYS[2], 0, keep - 1)
  redis.call('HINCRBY', KEYS[1], 'late_records_trimmed', kept - keep)
  kept = keep
end
keep_receipt(KEYS[4], '', kept, ARGV[6])
return kept
