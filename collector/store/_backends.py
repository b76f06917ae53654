"""One backend class per Redis deployment mode, chosen once from ``[redis]``.

A backend owns its redis-py client (every timeout and retry set explicitly from the
settings), the bulk path that runs script calls in few socket writes, and the description
used in logs (password masked).  Adding a mode is one more subclass (as ``_sentinel`` does)
and one more entry in ``_modes.BACKENDS``.

``[redis] wait_for_replicas`` is the backend's too: a ``run`` asked to ``confirm`` its
writes follows them with ``WAIT`` on each node written, on the connection that wrote
(``_bulk``); with 0 nothing is added.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Self

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import RedisCluster
from redis.exceptions import AskError, MovedError
from redis.retry import Retry

from collector._exceptions import ConfigError
from collector.logs import mask_url
from collector.store._bulk import WireCall, run_calls
from collector.store._errors import LOST, REROUTE, UNAVAILABLE, MaybeRan, maybe_ran
from collector.store._settings import RECEIPT_MS_LEAST, RedisSettings

RedisClient = redis.Redis | RedisCluster


class Backend(ABC):
    """A connection to one Redis deployment."""

    mode: ClassVar[str]
    client: RedisClient
    # [redis] wait_for_replicas and wait_timeout_ms: set by from_settings (0: no WAIT).
    wait_for_replicas: int = 0
    wait_timeout_ms: int = 0
    # How long a script keeps a call's receipt for a resend (RedisSettings.receipt_ms).
    receipt_ms: int = RECEIPT_MS_LEAST

    def __init__(self, client: RedisClient, url: str) -> None:
        self.client = client
        self._url = url

    def waiting_for(self, settings: RedisSettings) -> Self:
        """This backend, confirming writes as ``settings`` say, and keeping receipts as long
        as its client, built from them, may send a call again."""
        self.wait_for_replicas = settings.wait_for_replicas
        self.wait_timeout_ms = settings.wait_timeout_ms
        self.receipt_ms = settings.receipt_ms
        return self

    @classmethod
    @abstractmethod
    def from_settings(cls, settings: RedisSettings) -> Backend:
        """A backend with a new client built from ``settings``."""

    @abstractmethod
    def run(self, calls: Sequence[WireCall], confirm: bool = False) -> list[Any]:
        """Run script calls in as few writes as possible; one reply or exception per call.
        ``confirm``: the replies of calls whose writes too few replicas confirmed are
        ``NotReplicated`` (nothing changes while ``wait_for_replicas`` is 0)."""

    def _wait(self, confirm: bool) -> tuple[int, int]:
        return (self.wait_for_replicas, self.wait_timeout_ms) if confirm else (0, 0)

    @classmethod
    def describe_settings(cls, settings: RedisSettings) -> str:
        """What ``describe()`` of a backend built from ``settings`` says, without
        connecting."""
        return f"{cls.mode} {mask_url(settings.url)}"

    def describe(self) -> str:
        return f"{self.mode} {mask_url(self._url)}"

    def close(self) -> None:
        self.client.close()


class SingleServer(Backend):
    """One Redis server (or a proxy that looks like one)."""

    mode = "redis"
    client: redis.Redis

    def __init__(self, client: redis.Redis, url: str = "") -> None:
        super().__init__(client, url or _client_url(client))

    @classmethod
    def from_settings(cls, settings: RedisSettings) -> SingleServer:
        try:
            client = redis.Redis.from_url(settings.url, **client_options(settings))
        except ValueError as exc:
            raise bad_url(settings, exc) from exc
        return cls(client, settings.url).waiting_for(settings)

    def run(self, calls: Sequence[WireCall], confirm: bool = False) -> list[Any]:
        return run_calls(self.client, calls, *self._wait(confirm))


class Cluster(Backend):
    """Redis Cluster: each call goes to the node that serves its keys' slot."""

    mode = "cluster"
    client: RedisCluster

    def __init__(self, client: RedisCluster, url: str = "") -> None:
        super().__init__(client, url or "redis cluster")

    @classmethod
    def from_settings(cls, settings: RedisSettings) -> Cluster:
        try:
            client = RedisCluster.from_url(settings.url, **client_options(settings))
        except ValueError as exc:
            raise bad_url(settings, exc) from exc
        return cls(client, settings.url).waiting_for(settings)

    def run(self, calls: Sequence[WireCall], confirm: bool = False) -> list[Any]:
        """One batch of writes per node, by the client's slot map.

        Calls the map sent astray (a moved or moving slot, no node for it) go once more
        through redis-py's own routing, which follows MOVED/ASK and refreshes the map; after
        a connection failure one call does, so the map is refreshed, and the rest are
        answered with the error.  Confirmed calls are sent again by this class instead
        (``_rerouted``), so that their WAIT goes to the node that ran them, on the same
        connection.  A call that may have run before it was rerouted stays ``MaybeRan``
        unless it is answered; so does one redis-py's routing lost the reply of (it sends
        again on its own).
        """
        wait = self._wait(confirm)
        client: Any = self.client  # redis-py leaves the node lookups untyped
        replies: list[Any] = [None] * len(calls)
        by_node: dict[str, tuple[Any, list[int]]] = {}
        for i, (_, keys, _) in enumerate(calls):
            try:
                node = client.get_node_from_key(keys[0])
            except Exception as exc:  # no node for the slot: redis-py's routing decides below
                replies[i] = exc
                continue
            by_node.setdefault(node.name, (node, []))[1].append(i)
        for node, numbers in by_node.values():
            got = run_calls(client.get_redis_connection(node), [calls[i] for i in numbers], *wait)
            for i, reply in zip(numbers, got, strict=True):
                replies[i] = reply
        refreshed = False
        for i, reply in enumerate(replies):
            if isinstance(reply, UNAVAILABLE):
                if refreshed:
                    continue
                refreshed = True
            elif not isinstance(reply, REROUTE):
                continue
            replies[i] = maybe_ran(reply, self._again(calls[i], wait, reply))
        return replies

    def _again(self, call: WireCall, wait: tuple[int, int], reply: Any) -> Any:
        """A call sent astray, sent again: after a refreshed slot map (confirmed calls), or
        through redis-py's routing, whose lost reply may follow a run (it resends on its own)."""
        if wait[0]:
            return self._rerouted(call, wait, reply)
        reply = self._routed(call)
        return (
            MaybeRan(reply)
            if isinstance(reply, LOST) and not isinstance(reply, MaybeRan)
            else reply
        )

    def _rerouted(self, call: WireCall, wait: tuple[int, int], reply: Any) -> Any:
        """One call, followed by its WAIT, on the node that serves its slot now: the node a
        MOVED or ASK ``reply`` names, else the one a freshly read slot map names; and once
        more if that node redirects it too.  A map read right after a failover may still
        name the old primary (the node asked has not heard yet), while a MOVED reply names
        the node that took over."""
        client: Any = self.client
        for _ in range(2):
            try:
                node, asking = self._redirect(call, reply)
                [reply] = run_calls(client.get_redis_connection(node), [call], *wait, asking=asking)
            except Exception as exc:
                return exc
            if not isinstance(reply, AskError):  # MovedError is an AskError
                return reply
        return reply

    def _redirect(self, call: WireCall, reply: Any) -> tuple[Any, bool]:
        """Where to send a call again after ``reply``, and whether after ASKING: a MOVED
        reply's node (noted in the client's map for the calls that follow), an ASK reply's
        (for this call only), else the node of a freshly read map."""
        client: Any = self.client
        manager = client.nodes_manager
        if isinstance(reply, AskError):
            moved = isinstance(reply, MovedError)
            if moved:
                manager.move_slot(reply)
            node = client.get_node(host=reply.host, port=reply.port)
            if node is not None:
                return node, not moved
        manager.initialize()
        return client.get_node_from_key(call[1][0]), False

    def _routed(self, call: WireCall) -> Any:
        """One call through redis-py's cluster routing, loading the script if the node
        lacks it (on that node only: another primary that hangs must not stop this call)."""
        script, keys, args = call
        client: Any = self.client
        try:
            try:
                return client.evalsha(script.sha, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                node = client.get_node_from_key(keys[0])
                client.get_redis_connection(node).script_load(script.text)
                return client.evalsha(script.sha, len(keys), *keys, *args)
        except Exception as exc:
            return exc


def client_options(settings: RedisSettings) -> dict[str, Any]:
    return {
        "socket_timeout": settings.socket_timeout_seconds,
        "socket_connect_timeout": settings.connect_timeout_seconds,
        "retry": Retry(ExponentialWithJitterBackoff(cap=1.0, base=0.05), settings.retries),
        "health_check_interval": settings.health_check_interval_seconds,
    }


def bad_url(settings: RedisSettings, exc: ValueError) -> ConfigError:
    return ConfigError(f"[redis] url: {exc} (url: {mask_url(settings.url)})")


def _client_url(client: redis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}"
    return f"redis://{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"
