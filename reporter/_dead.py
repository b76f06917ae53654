"""``telemetry-reporter dead list | show ID | replay [ID | --all] | purge``."""

from __future__ import annotations

import argparse
import json
import time

from collector.store import Purge, Replay, Store, entry_event, open_store
from reporter._body_limit import BodyLimit, body_model
from reporter._config import ReporterConfig
from reporter._constants import DEAD_LIST_LIMIT, REPLAY_STEP
from reporter._tables import table


def run_dead(config: ReporterConfig, args: argparse.Namespace) -> int:
    store = open_store(config.redis)
    if args.action == "list":
        batches = store.dead_batches(DEAD_LIST_LIMIT)
        rows = [(b.batch_id, b.game, b.shard, b.events, b.attempts,
                 time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(b.dead_at)), b.reason[:60])
                for b in batches]
        print(table(("batch", "game", "shard", "events", "attempts", "dead since", "reason"),
                    rows) if rows else "no dead-lettered batches")
        return 0
    if args.action == "show":
        keys = store.find_batch(args.batch_id)
        detail = store.batch(keys, args.batch_id) if keys is not None else None
        if detail is None:
            print(f"no batch {args.batch_id!r}")
            return 1
        shown = {"batch_id": detail.batch_id, "shard": detail.shard, "game": detail.game,
                 "attempts": detail.attempts, "reason": detail.reason,
                 "events": [_shown(e) for e in detail.entries]}
        if detail.item_reasons:  # refused one by one: each event's own reason
            shown["item_reasons"] = detail.item_reasons
        print(json.dumps(shown, indent=2))
        return 0
    if args.action == "replay":
        return _replay(config, store, args)
    purged = events = 0
    for keys in store.schema.all_shards():
        while (done := store.call(Purge(keys))).batches:
            purged += done.batches
            events += done.events
    print(f"purged {purged} batches ({events} events)")
    return 0


def _shown(entry: bytes) -> object:
    """An event as JSON, or a malformed entry as its text."""
    try:
        return json.loads(entry_event(entry))
    except ValueError:
        return {"malformed entry": entry.decode("utf-8", "replace")}


def _replay(config: ReporterConfig, store: Store, args: argparse.Namespace) -> int:
    """Replayed batches are cut again by the configured body limit (``[sink]
    max_batch_bytes``)."""
    budget = BodyLimit(config.sink.max_batch_bytes, body_model(config.sink.kind)).claim_budget()
    batches = events = malformed = 0
    if args.batch_id:
        keys = store.find_batch(args.batch_id)
        if keys is not None:
            batches, events, malformed = store.call(Replay(keys, args.batch_id, 1, *budget))
        if malformed:
            print(f"batch {args.batch_id!r} holds a malformed entry, which can never be sent; "
                  "it stays dead-lettered (dead purge removes the oldest dead letters)")
            return 1
        if not batches:
            print(f"no dead-lettered batch {args.batch_id!r}")
            return 1
    elif args.all:
        for keys in store.schema.all_shards():
            # Malformed entries' dead letters go back to the head of the list: take exactly as
            # many from the tail as there were at the start, so each is seen once.
            left = store.read_shard(keys).dead
            while left > 0:
                step = min(REPLAY_STEP, left)
                done = store.call(Replay(keys, "", step, *budget))
                batches, events = batches + done.batches, events + done.events
                malformed += done.malformed
                left -= step
    else:
        print("replay needs a batch id or --all")
        return 2
    print(f"replayed {batches} batches ({events} events); stale events are dropped when sent")
    if malformed:
        print(f"{malformed} dead letters of malformed entries stay (they can never be sent)")
    return 0
