"""The JSON body of a batch, ``{"game", "batch_id", "events"}``, that the ``json`` sink POSTs
and the ``print`` sink writes as a line."""

from __future__ import annotations

from collections.abc import Sequence

import orjson


def json_body(game: str, batch_id: str, events: Sequence[bytes]) -> bytes:
    """Assemble the body from the events' raw JSON, without decoding them."""
    return b"".join(
        (
            b'{"game":',
            orjson.dumps(game),
            b',"batch_id":',
            orjson.dumps(batch_id),
            b',"events":[',
            b",".join(events),
            b"]}",
        )
    )
