"""The reporter's fixed numbers, named in one place.  Settings an operator may want to change
are in the config instead; these are choices of the implementation."""

from __future__ import annotations

# Reaper: seconds between runs, and expired leases one script call returns at most.
REAP_INTERVAL_SECONDS = 1.0
REAP_PER_CALL = 200
# A worker refused by the claim limiter waits for the next token when it is this near.
LIMITER_WAIT_SECONDS = 0.25
# Requests count as scarce for this long after the limiter refused one: lingering games then
# wait longer, so the requests go to full batches.
CONTENDED_SECONDS = 1.0
# The anti-addiction interface counts requests as they arrive, and network and scheduling
# jitter can bring two of them closer than they were sent: the shared bucket runs this much
# below the configured rate so that no second at the server holds more than the rate.
NPPA_RATE_HEADROOM = 0.04
# Every reporter looks at the shared request rate's state in Redis this often, so that each
# finds it lost (a restart, a failover) within this long, however idle it is.
RATE_WATCH_SECONDS = 1.0
# Due retries one claim of retries takes at most.
RETRIES_PER_LOOP = 16
# A job keeps looping this long while its worker reports more work, before yielding its thread.
BUSY_SLICE_SECONDS = 0.05
# Longest pause between runs of a failing worker (Redis down), unless its interval is longer.
FAILING_PAUSE_SECONDS = 5.0
# Dead letters `dead list` shows per shard at most.
DEAD_LIST_LIMIT = 1000
# dead replay --all: dead letters moved per script call.  Each call blocks Redis while it runs:
# 50 letters of 128 events take about 1 ms (3 ms when each is checked against the byte limit);
# 1,000 took 40 to 80 ms.
REPLAY_STEP = 50
# What an endpoint may answer: more is a protocol error, not a memory problem.
MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 8 * 1024 * 1024
# While the body limit learned from HTTP 413 is below [sink] max_batch_bytes, one claim this
# often is cut at twice the limit, so it grows back when the endpoint takes more again.
BODY_PROBE_SECONDS = 60.0
# Bytes one socket read asks for.
READ_BYTES = 65536
# A stopping reporter's Redis calls (acks, releases, giving shards back) use this timeout (or
# the configured one, if shorter) and no retries: Redis that does not answer must not hold
# the exit.
STOP_REDIS_TIMEOUT_SECONDS = 1.0
# A stop ends within grace + the Redis socket timeout + this, whatever Redis and the endpoint
# do: the last of it is for the jobs under way to return.
STOP_MARGIN_SECONDS = 1.5
# How often the main thread of `run` looks whether a stop signal came (its handler only
# counts, so that it takes no lock).
SIGNAL_POLL_SECONDS = 0.1
# A held sender (an answer about our identity or configuration): each reporter reads the hold
# from Redis this often, and reminds the operator at most this often; a hold nobody probes
# for this long is forgotten (no reporter runs for that app id).
HOLD_POLL_SECONDS = 1.0
HOLD_REMINDER_SECONDS = 60.0
HOLD_KEEP_SECONDS = 86_400.0
# A hold of the reporters using one key, or of one reporter, is forgotten this many probe
# intervals after its last probe turn (its reporters restarted with another key, or gone).
OWN_HOLD_KEEP_PROBES = 4
# The first probe of a hold is due this soon after it starts (then one per probe interval):
# a batch that draws its own refusal is told from a cause in the scope in seconds.
HOLD_FIRST_PROBE_SECONDS = 0.0
# A lifted hold remembers for this long the batches whose requests met it: one of them that
# meets the same answer again is the cause itself (dead-lettered, nothing held).
HOLD_SUSPECT_SECONDS = 600.0
# A batch of a held game (or app, or key) handed back is due again this much later.
HELD_BATCH_DELAY_SECONDS = 3.0
# The held scopes a reporter (or status) reads at most, oldest first.
HOLDS_READ_MOST = 1000
# Files of secrets ([nppa] secret_key_file, [sink] header_files) are looked at this often, so
# a mounted secret that changes is used without a signal.
SECRET_FILE_POLL_SECONDS = 2.0
# Audit records of late items sent with their time moved, kept per shard (one per request).
LATE_RECORDS_KEPT = 10_000
