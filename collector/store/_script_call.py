"""The base of every typed script request (``ScriptCall``), and the ids of their receipts."""

# One request per Lua script (its KEYS and ARGV as the script's header lists them).
# ``Store.call(request)`` runs one and returns the typed result; ``Store.call_many(requests)``
# runs many in few socket writes and returns a result or a ``BackendError`` per request.
# Callers never see raw replies.

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, ClassVar, Generic, TypeVar

R_co = TypeVar("R_co", covariant=True)


def call_id() -> str:
    """A new id for one script call that keeps a receipt under its own id."""
    return uuid.uuid4().hex


class ScriptCall(Generic[R_co]):
    """A call of the script named ``script``; subclasses are frozen dataclasses."""

    __slots__ = ()
    script: ClassVar[str]
    # A write that a failover must not undo unnoticed: with [redis] wait_for_replicas, WAIT
    # follows it, and too few replicas make it ``BackendUnreplicated``.
    confirmed: ClassVar[bool] = False
    # A script that keeps a receipt for a resend (lua/_guard.lua): the store passes the
    # receipt lifetime in ms as its last ARGV.
    receipt: ClassVar[bool] = False
    # How the error replies begin with which the script refuses a call for good (the same
    # call would be refused again, so it never runs): such a refusal is the call's outcome
    # even after an attempt whose reply was lost (``WriteRefused``).
    refusals: ClassVar[tuple[str, ...]] = ()

    def keys(self) -> Sequence[str]:
        raise NotImplementedError

    def args(self) -> Sequence[Any]:
        raise NotImplementedError

    def parse(self, reply: Any) -> R_co:
        raise NotImplementedError
