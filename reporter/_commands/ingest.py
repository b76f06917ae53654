"""``telemetry-reporter ingest``: serve the HTTP ingest until SIGTERM or SIGINT, then stop it
within ``[collector] close_timeout_seconds`` (a second signal exits at once).  SIGHUP reads
``[ingest] token_file`` again."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Protocol

from collector.store import describe_settings
from reporter._config import ReporterConfig
from reporter._constants import SIGNAL_POLL_SECONDS
from reporter._ingest.service import IngestService

logger = logging.getLogger("reporter")


class Signals(Protocol):
    received: int
    reloads: int

    def on_signal(self, signum: int, frame: FrameType | None) -> None: ...

    def on_reload(self, signum: int, frame: FrameType | None) -> None: ...


def run_ingest(config: ReporterConfig, signals: Signals) -> int:
    if hasattr(signal, "SIGHUP"):  # not on Windows
        signal.signal(signal.SIGHUP, signals.on_reload)
    service = IngestService(config)
    service.start()
    signal.signal(signal.SIGTERM, signals.on_signal)
    signal.signal(signal.SIGINT, signals.on_signal)
    for notice in config.notices:
        logger.warning(notice)
    if config.collector.mode != "background":
        logger.warning(
            "[collector] mode = %r does not apply to the ingest: it always buffers, and a 202 "
            "means the events are in its buffer",
            config.collector.mode,
        )
    token = "required" if service.api.token else "none asked for"
    logger.info(
        "ingest: config %s; serving %s/v1/games/<game>/events (token %s); writing to %s, "
        "key prefix %r",
        config.source,
        service.url,
        token,
        describe_settings(config.redis),
        config.redis.key_prefix,
        extra={"url": service.url, "config": config.source},
    )
    idle = threading.Event()  # never set: a wait that a signal handler does not touch
    reloads = 0
    while not signals.received:
        idle.wait(SIGNAL_POLL_SECONDS)
        if signals.reloads != reloads:  # one re-read for any number of SIGHUPs meanwhile
            reloads = signals.reloads
            service.reload()
    logger.info(
        "ingest stopping: new requests answered 503; storing what is buffered within %gs",
        config.collector.close_timeout_seconds,
    )
    counts = service.stop()
    sdk = counts["sdk"]
    logger.info(
        "ingest stopped: answers %s, events taken %d; SDK accepted=%d stored=%d "
        "dropped_at_close=%d dropped_buffer_full=%d",
        counts["answers"],
        counts["events"],
        sdk["accepted"],
        sdk["stored"],
        sdk["dropped_at_close"],
        sdk["dropped_buffer_full"],
        extra={"counts": counts},
    )
    return 0
