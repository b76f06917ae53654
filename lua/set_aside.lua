#!lua flags=allow-oom
-- set_aside: move to the quarantine what a sweep's plain reads of a shard met and cannot use
-- (lua/_guard.lua): a key of the shard's registry of another type than it needs, and ring
-- members that are not game names (the store's ring read finds both, and calls this once).
-- A ring moved aside is built again from `active`, a thousand games per call: a member that
-- marks where the rebuild goes on (lua/_guard.lua, rebuild_ring) is not junk, and goes on.
-- Sent again after a lost reply it finds nothing more to set aside: no receipt needed.
-- allow-oom: it deletes junk and writes records to the quarantine, whose length is capped.
--
-- KEYS[1]  ring       zset   active games, all scored 0
-- KEYS[2]  active     set    games with buffered events
-- KEYS[3]  retry      zset   batch id -> when it is due (ms)
-- KEYS[4]  marker     string the shard's identity
-- KEYS[5]  stats      hash   the shard's counters
-- KEYS[6]  legacy_ring list the ring of versions before the sorted set
-- KEYS[7]  quarantine list   records set aside, newest first
-- ARGV     members: ring members that are not game names (each removed from the ring and
--          `active`)
-- returns  the records set aside
-- include: _guard
guard_open('set_aside', KEYS[7], KEYS[5], {})
expect(KEYS[2], 'set')
expect_ring(KEYS[1], KEYS[2])
expect(KEYS[3], 'zset')
expect(KEYS[4], 'string')
expect(KEYS[6], 'list')
local rebuilt = false
for _, member in ipairs(ARGV) do
  local cursor = string.sub(member, 1, #REBUILD_MARK) == REBUILD_MARK
    and string.match(string.sub(member, #REBUILD_MARK + 1), '^%d+$')
  if cursor and (#cursor < 20 or #cursor == 20 and cursor <= '18446744073709551615') then
    -- where a ring's rebuild goes on (lua/_guard.lua): a part, not junk
    if redis.call('ZREM', KEYS[1], member) > 0 and not rebuilt
        and redis.call('TYPE', KEYS[2]).ok == 'set' then
      rebuilt = true
      rebuild_ring(KEYS[1], KEYS[2], cursor)
    end
  elseif redis.call('ZREM', KEYS[1], member) + redis.call('SREM', KEYS[2], member) > 0 then
    quarantine({k = KEYS[1], f = printable(member),
                r = 'a ring member that is not a game name'}, 0)
  end
end
return guard.count
