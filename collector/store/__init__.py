"""The store layer: the only code that talks to Redis, shared by the SDK and the reporter.

    from collector.store import Ack, open_store
    store = open_store(config.redis)           # the backend of the deployment mode, chosen once
    shard = store.schema.for_game("my-game")
    delivered = store.call(Ack(shard, batch_id, token))
    results = store.call_many([Ack(...), Ack(...)])   # few socket writes; a result or error each

- keys: ``KeySchema`` and ``ShardKeys`` name every key; game names are checked by
  ``validate_game`` so none can move a key to another hash slot.
- entries: a stored entry is 13 digits of collect time (ms), then the event's JSON.
- scripts: one typed request per Lua script (``Collect``, ``Claim``, ``Ack``, ...), each with
  its typed result; scripts load by SHA and reload on NOSCRIPT in one place.
- settings: ``RedisSettings`` (``[redis]``), which the store is built from; they live here
  so the store depends on nothing above it.
- backends: ``SingleServer``, ``Cluster`` and ``Sentinel``, one per deployment mode
  (``open_backend``).
- views: what the sweeper, ``status``, ``dead`` and the metrics read (``ShardView``,
  ``ShardLevels``, ``QuarantineRecord``, ...), as methods of ``Store``; none fails on a bad
  record.
- poison and receipts: every script that writes sets aside what it cannot use (a key of
  another type, metadata that does not decode) in the shard's quarantine, at most
  ``QUARANTINE_KEEP`` records, and keeps a receipt so that a call sent again after a lost
  reply answers the same without applying twice (``lua/_guard.lua``).
- errors: ``BackendUnavailable`` and ``BackendRefused`` (both ``collector.BackendError``);
  ``BackendFull`` (a ``BackendRefused``) is Redis at maxmemory refusing a write;
  ``WriteRefused`` (a ``BackendRefused``) a script's own refusal of a write, for good;
  ``BackendUnconfirmed`` (a ``BackendUnavailable``) a call that may have run (its reply
  lost), and ``BackendUnreplicated`` (a ``BackendUnconfirmed``) a write that ran but too few
  replicas confirmed (``[redis] wait_for_replicas``), its result attached.
"""

from collector._exceptions import (
    BackendError,
    BackendFull,
    BackendRefused,
    BackendUnavailable,
    BackendUnconfirmed,
    BackendUnreplicated,
    WriteRefused,
)
from collector.retry import RetryPolicy  # the policy Nack, Settle and Reap take
from collector.store._backends import Backend, Cluster, SingleServer
from collector.store._batch_calls import (
    Ack,
    AckMany,
    Claim,
    Extend,
    Nack,
    NoteLate,
    Reap,
    Release,
    Settle,
    TakeRetries,
)
from collector.store._collect_call import PROTOCOL_VERSION, Collect
from collector.store._dead_letter_calls import Purge, PurgeIds, Replay
from collector.store._entries import (
    ENTRY_TIME_DIGITS,
    encode_entry,
    entry_event,
    entry_time_ms,
    join_entries,
    keyed_entry,
    split_entries,
    time_prefix,
)
from collector.store._keys import (
    GAME_NAME_CHARS,
    MAX_GAME_NAME_LENGTH,
    QUARANTINE_KEEP,
    KeySchema,
    ShardKeys,
    is_valid_prefix,
    validate_game,
)
from collector.store._modes import BACKENDS, backend_class, describe_settings, open_backend
from collector.store._pacing_calls import Hold, HoldOp, ReserveSlot, TakeTokens
from collector.store._remembered import Remembered, remembered_totals
from collector.store._results import (
    Claimed,
    ClaimedBatch,
    HoldState,
    LeaseAnswer,
    LiveReporters,
    Moved,
    NackResult,
    Reaped,
    Replayed,
    RetryBatch,
    RetryState,
    Settled,
    Slot,
    Stored,
    Tokens,
)
from collector.store._script_call import ScriptCall
from collector.store._scripts import SCRIPT_NAMES, LuaScript, lua_script, script_text
from collector.store._sentinel import Sentinel
from collector.store._settings import RedisSettings, redis_problems, tls_notices
from collector.store._shard_upkeep_calls import Heartbeat, ReadShard, SetAside, ShardLease
from collector.store._store import Store, open_store
from collector.store._views import (
    Alert,
    BatchDetail,
    DeadBatch,
    GameState,
    GameView,
    MemoryUse,
    QuarantineRecord,
    Reporter,
    RingSlice,
    ShardLevels,
    ShardView,
)

__all__ = [
    "BACKENDS",
    "ENTRY_TIME_DIGITS",
    "GAME_NAME_CHARS",
    "MAX_GAME_NAME_LENGTH",
    "PROTOCOL_VERSION",
    "QUARANTINE_KEEP",
    "SCRIPT_NAMES",
    "Ack",
    "AckMany",
    "Alert",
    "Backend",
    "BackendError",
    "BackendFull",
    "BackendRefused",
    "BackendUnavailable",
    "BackendUnconfirmed",
    "BackendUnreplicated",
    "BatchDetail",
    "Claim",
    "Claimed",
    "ClaimedBatch",
    "Cluster",
    "Collect",
    "DeadBatch",
    "Extend",
    "GameState",
    "GameView",
    "Heartbeat",
    "Hold",
    "HoldOp",
    "HoldState",
    "KeySchema",
    "LeaseAnswer",
    "LiveReporters",
    "LuaScript",
    "MemoryUse",
    "Moved",
    "Nack",
    "NackResult",
    "NoteLate",
    "Purge",
    "PurgeIds",
    "QuarantineRecord",
    "ReadShard",
    "Reap",
    "Reaped",
    "RedisSettings",
    "Release",
    "Remembered",
    "Replay",
    "Replayed",
    "Reporter",
    "ReserveSlot",
    "RetryBatch",
    "RetryPolicy",
    "RetryState",
    "RingSlice",
    "ScriptCall",
    "Sentinel",
    "SetAside",
    "Settle",
    "Settled",
    "ShardKeys",
    "ShardLease",
    "ShardLevels",
    "ShardView",
    "SingleServer",
    "Slot",
    "Store",
    "Stored",
    "TakeRetries",
    "TakeTokens",
    "Tokens",
    "WriteRefused",
    "backend_class",
    "describe_settings",
    "encode_entry",
    "entry_event",
    "entry_time_ms",
    "is_valid_prefix",
    "join_entries",
    "keyed_entry",
    "lua_script",
    "open_backend",
    "open_store",
    "redis_problems",
    "remembered_totals",
    "script_text",
    "split_entries",
    "time_prefix",
    "tls_notices",
    "validate_game",
]
