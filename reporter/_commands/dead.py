"""``telemetry-reporter dead list | show ID | replay [ID | --all] | purge``.

``list`` and ``purge`` take the same filters: ``--game NAME`` (only that game's shard is read)
and ``--older-than DURATION`` (dead for longer than 90s, 15m, 2h, 1d...).  ``purge`` says what
it is about to delete and asks first, unless ``--yes``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from collector.logs import counted
from collector.store import (
    DeadBatch,
    Purge,
    PurgeIds,
    Replay,
    Store,
    entry_event,
    validate_game,
)
from reporter._config import ReporterConfig
from reporter._constants import DEAD_LIST_LIMIT, REPLAY_STEP
from reporter._pacing.body_limit import BodyLimit
from reporter._sinks.registry import make_sink
from reporter._tables import json_text, table

EXIT_NOT_FOUND = 1
EXIT_DECLINED = 1
EXIT_USAGE = 2
# Ids one purge_ids call deletes at most: each costs a scan of the shard's dead list.
PURGE_IDS_PER_CALL = 200
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """Seconds in ``90s``, ``15m``, ``2h``, ``1d`` (``argparse`` type)."""
    match = _DURATION.fullmatch(text.strip().lower())
    if not match:
        raise argparse.ArgumentTypeError(
            f"expected a duration like 90s, 15m, 2h or 1d, found {text!r}"
        )
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def game_name(text: str) -> str:
    try:
        return validate_game(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_dead_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """The ``dead`` command and its actions; ``common`` holds the global options, accepted
    after the action too."""
    dead = commands.add_parser(
        "dead", parents=[common], help="inspect, replay and purge dead-lettered batches"
    )
    actions = dead.add_subparsers(dest="action", required=True, metavar="ACTION")
    filters = argparse.ArgumentParser(add_help=False)
    group = filters.add_argument_group("filters")
    group.add_argument("--game", type=game_name, help="only this game's dead letters")
    group.add_argument(
        "--older-than",
        type=duration,
        metavar="DURATION",
        help="only those dead for longer than this (90s, 15m, 2h, 1d)",
    )
    listing = actions.add_parser(
        "list", parents=[common, filters], help="list dead-lettered batches, oldest first"
    )
    listing.add_argument("--json", action="store_true", help="one JSON array of the batches")
    show = actions.add_parser("show", parents=[common], help="show one batch with its events")
    show.add_argument("batch_id")
    replay = actions.add_parser("replay", parents=[common], help="send dead-lettered batches again")
    replay.add_argument("batch_id", nargs="?")
    replay.add_argument("--all", action="store_true", help="every dead-lettered batch")
    purge = actions.add_parser(
        "purge",
        parents=[common, filters],
        help="delete dead-lettered batches for good (asks first)",
    )
    purge.add_argument("--yes", "-y", action="store_true", help="do not ask")


def replay_budget(config: ReporterConfig) -> tuple[int, int]:
    """How replayed batches are cut again: the claim's rule for ``[sink] max_batch_bytes``."""
    return BodyLimit(config.sink.max_batch_bytes, make_sink(config).body_model).claim_budget()


def run_dead(
    store: Store,
    args: argparse.Namespace,
    ask: Callable[[str], bool] | None = None,
    budget: tuple[int, int] = (0, 0),
) -> int:
    """``budget``: how replayed batches are cut again (``replay_budget``; (0, 0): never)."""
    if args.action == "list":
        return _list(store, args)
    if args.action == "show":
        return _show(store, args.batch_id)
    if args.action == "replay":
        return _replay(store, args, budget)
    return _purge(store, args, ask or confirm)


def _matching(store: Store, args: argparse.Namespace, limit: int | None) -> list[DeadBatch]:
    before = None if args.older_than is None else time.time() - args.older_than
    return store.dead_batches(limit, game=args.game or "", before=before)


def _filters(args: argparse.Namespace) -> str:
    parts = [
        f"of game {args.game!r}" if args.game else "",
        f"dead for more than {args.older_than:g}s" if args.older_than is not None else "",
    ]
    return " ".join(p for p in parts if p)


def _list(store: Store, args: argparse.Namespace) -> int:
    batches = _matching(store, args, DEAD_LIST_LIMIT)
    if args.json:
        print(
            json_text(
                [
                    {
                        "batch_id": b.batch_id,
                        "game": b.game,
                        "shard": b.shard,
                        "events": b.events,
                        "attempts": b.attempts,
                        "reason": b.reason,
                        "dead_at": b.dead_at,
                    }
                    for b in batches
                ]
            )
        )
        return 0
    rows = [
        (
            b.batch_id,
            b.game,
            b.shard,
            b.events,
            b.attempts,
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(b.dead_at)),
            b.reason[:60],
        )
        for b in batches
    ]
    what = _filters(args)
    print(
        table(
            ("batch", "game", "shard", "events", "attempts", "dead since", "reason"),
            rows,
            align="llrrrll",
        )
        if rows
        else "no dead-lettered batches" + (f" {what}" if what else "")
    )
    return 0


def _show(store: Store, batch_id: str) -> int:
    keys = store.find_batch(batch_id)
    detail = store.batch(keys, batch_id) if keys is not None else None
    if detail is None:
        print(f"telemetry-reporter: no batch {batch_id!r}", file=sys.stderr)
        return EXIT_NOT_FOUND
    shown: dict[str, Any] = {
        "batch_id": detail.batch_id,
        "shard": detail.shard,
        "game": detail.game,
        "attempts": detail.attempts,
        "reason": detail.reason,
        "events": [_shown(e) for e in detail.entries],
    }
    if detail.item_reasons:  # refused one by one: each event's own reason
        shown["item_reasons"] = detail.item_reasons
    print(json_text(shown))
    return 0


def _shown(entry: bytes) -> object:
    """An event as JSON, or a malformed entry as its text."""
    try:
        return json.loads(entry_event(entry))
    except ValueError:
        return {"malformed entry": entry.decode("utf-8", "replace")}


def _replay(store: Store, args: argparse.Namespace, budget: tuple[int, int]) -> int:
    if args.batch_id and args.all:
        print("telemetry-reporter: replay takes a batch id or --all, not both", file=sys.stderr)
        return EXIT_USAGE
    batches = events = malformed = 0
    if args.batch_id:
        keys = store.find_batch(args.batch_id)
        if keys is not None:
            batches, events, malformed = store.call(Replay(keys, args.batch_id, 1, *budget))
        if malformed:
            print(
                f"telemetry-reporter: batch {args.batch_id!r} holds a malformed entry, which "
                "can never be sent; it stays dead-lettered (dead purge removes it)",
                file=sys.stderr,
            )
            return EXIT_NOT_FOUND
        if not batches:
            print(f"telemetry-reporter: no dead-lettered batch {args.batch_id!r}", file=sys.stderr)
            return EXIT_NOT_FOUND
    elif args.all:
        for keys in store.schema.all_shards():
            # Malformed entries' dead letters go back to the head of the list: take exactly
            # as many from the tail as there were at the start, so each is seen once.
            left = store.dead_listed([keys])
            while left > 0:
                step = min(REPLAY_STEP, left)
                done = store.call(Replay(keys, "", step, *budget))
                batches, events = batches + done.batches, events + done.events
                malformed += done.malformed
                left -= step
    else:
        print("telemetry-reporter: replay needs a batch id or --all", file=sys.stderr)
        return EXIT_USAGE
    print(
        f"replayed {counted(batches, 'batch', 'batches')} ({counted(events, 'event')}); "
        "stale events are dropped when sent"
    )
    if malformed:
        print(f"{malformed} dead letters of malformed entries stay (they can never be sent)")
    return 0


# -- purge -------------------------------------------------------------------------------------


def confirm(question: str, stdin: TextIO | None = None, stderr: TextIO | None = None) -> bool:
    """Ask on stderr; True only for an answer of y or yes (end of input is a no)."""
    stdin, stderr = stdin or sys.stdin, stderr or sys.stderr
    stderr.write(f"{question} [y/N] ")
    stderr.flush()
    answer = stdin.readline()
    if not answer:
        stderr.write("\n")
    return answer.strip().lower() in ("y", "yes")


def _purge(store: Store, args: argparse.Namespace, ask: Callable[[str], bool]) -> int:
    filtered = bool(args.game) or args.older_than is not None
    matches = _matching(store, args, None) if filtered else []
    count = len(matches) if filtered else store.dead_listed()
    what = _filters(args)
    if not count:
        print("no dead-lettered batches to purge" + (f" {what}" if what else ""))
        return 0
    described = f"{counted(count, 'dead-lettered batch', 'dead-lettered batches')}" + (
        f" ({counted(sum(b.events for b in matches), 'event')}) {what}" if filtered else ""
    )
    if not args.yes and not ask(
        f"delete {described} in {store.describe()} (key prefix {store.schema.prefix!r}) for good?"
    ):
        print("telemetry-reporter: nothing purged", file=sys.stderr)
        return EXIT_DECLINED
    purged, events = _purge_ids(store, matches) if filtered else _purge_all(store)
    print(f"purged {counted(purged, 'batch', 'batches')} ({counted(events, 'event')})")
    return 0


def _purge_all(store: Store) -> tuple[int, int]:
    purged = events = 0
    for keys in store.schema.all_shards():
        while (done := store.call(Purge(keys))).batches:
            purged += done.batches
            events += done.events
    return purged, events


def _purge_ids(store: Store, batches: Sequence[DeadBatch]) -> tuple[int, int]:
    """Delete these dead letters (those still dead: a replay meanwhile wins)."""
    by_shard: dict[int, list[str]] = defaultdict(list)
    for b in batches:
        by_shard[b.shard].append(b.batch_id)
    purged = events = 0
    for shard, ids in by_shard.items():
        keys = store.schema.shard(shard)
        for i in range(0, len(ids), PURGE_IDS_PER_CALL):
            done = store.call(PurgeIds(keys, ids[i : i + PURGE_IDS_PER_CALL]))
            purged += done.batches
            events += done.events
    return purged, events
