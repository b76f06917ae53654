-- (included by the scripts that schedule a retry: nack, settle)
-- The retry backoff: exponential with full jitter, never below the endpoint's Retry-After.
-- The one copy of the formula in Lua; collector.retry.backoff is the one in Python (this keeps
-- its whole ms), and a test runs both on the same cases.  `draw`, in [0, 1), is the caller's
-- random number (a script cannot draw its own: its writes must replay the same on a replica).
local function backoff_ms(attempt, first_ms, longest_ms, draw, least_ms)
  local ceiling = math.min(longest_ms, first_ms * 2 ^ (attempt - 1))
  return math.max(least_ms, math.floor(draw * ceiling))
end
