"""Redis managed by Sentinel: a single-server backend whose client finds the primary through
the sentinels.

redis-py's ``Sentinel.master_for`` gives a client whose connections ask the sentinels for the
primary's address each time they connect.  After a failover the old connections break (the
old primary died) or meet ``READONLY`` (it was demoted; redis-py then drops the connection
and raises ``ConnectionError``), and the next connection goes to the promoted replica.  So the
single-server bulk path and its resend of unanswered calls (``[redis] retries``), its
``NOSCRIPT`` reload (a promoted replica has no scripts cached) and whatever else it does per
node all apply unchanged: this class only builds the client.
"""

from __future__ import annotations

from typing import Any

import redis
from redis import connection as _connection
from redis import sentinel as _sentinel
from redis.backoff import NoBackoff
from redis.connection import SSLConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError

from collector.logs import mask
from collector.store._backends import SingleServer, bad_url, client_options
from collector.store._settings import RedisSettings, sentinel_address

# redis-py leaves these untyped.
_parse_url: Any = _connection.parse_url
_SentinelBase: Any = _sentinel.Sentinel


class SentinelClient(_SentinelBase):  # type: ignore[misc]
    """redis-py's ``Sentinel``, with a short error naming each sentinel and what it said
    when none names a healthy primary (redis-py's repeats every client's whole repr)."""

    def discover_master(self, service_name: str) -> tuple[str, int]:
        said: list[str] = []
        for number, sentinel in enumerate(self.sentinels):
            kwargs = sentinel.connection_pool.connection_kwargs
            name = f"{kwargs.get('host')}:{kwargs.get('port')}"
            try:
                masters = sentinel.sentinel_masters()
            except (RedisConnectionError, RedisTimeoutError) as exc:
                said.append(f"{name}: {type(exc).__name__}: {exc}")
                continue
            state = masters.get(service_name)
            if state is None:
                said.append(f"{name}: monitors no service of that name")
            elif not self.check_master_state(state, service_name):
                said.append(f"{name}: primary {state['ip']}:{state['port']} is down")
            else:  # ask this one first next time
                self.sentinels[0], self.sentinels[number] = sentinel, self.sentinels[0]
                return state["ip"], int(state["port"])
        raise MasterNotFoundError(f"No master found for {service_name!r} ({'; '.join(said)})")


# What the URL gives the data nodes besides their address, which comes from the sentinels.
_ADDRESS_OPTIONS = ("host", "port", "path", "connection_class")


class Sentinel(SingleServer):
    """The primary of one service that a group of sentinels monitors."""

    mode = "sentinel"

    def __init__(self, client: redis.Redis, sentinels: Any, description: str) -> None:
        super().__init__(client, "sentinel")
        self.sentinels = sentinels
        self._description = description

    @classmethod
    def describe_settings(cls, settings: RedisSettings) -> str:
        addresses = ", ".join(mask(a) for a in settings.sentinels)
        return f"sentinel service {mask(settings.sentinel_service)!r} via {addresses}"

    @classmethod
    def from_settings(cls, settings: RedisSettings) -> Sentinel:
        try:
            url_options = _parse_url(settings.url)
        except ValueError as exc:
            raise bad_url(settings, exc) from exc
        tls = url_options.get("connection_class") is SSLConnection
        data = {k: v for k, v in url_options.items() if k not in _ADDRESS_OPTIONS}
        options = client_options(settings)
        sentinels = SentinelClient(
            [sentinel_address(a) for a in settings.sentinels],
            sentinel_kwargs=_sentinel_options(settings, url_options, tls),
            ssl=tls,
            **data,
            **options,
        )
        client: redis.Redis = sentinels.master_for(settings.sentinel_service)
        return cls(client, sentinels, cls.describe_settings(settings)).waiting_for(settings)

    def describe(self) -> str:
        return self._description

    def close(self) -> None:
        self.client.close()
        self.sentinels.close()


def _sentinel_options(
    settings: RedisSettings, url_options: dict[str, Any], tls: bool
) -> dict[str, Any]:
    """How to reach the sentinels: the same timeouts and transport (TLS and its options, from
    the URL) as the data nodes; their own password, if any."""
    options: dict[str, Any] = {
        "socket_timeout": settings.socket_timeout_seconds,
        "socket_connect_timeout": settings.connect_timeout_seconds,
        "password": settings.sentinel_password or None,
        # Asking the next sentinel is the retry; a connection to the primary that finds none
        # asks them all again as often as [redis] retries says.
        "retry": Retry(NoBackoff(), 0),
    }
    if tls:
        options["ssl"] = True
        options.update({k: v for k, v in url_options.items() if k.startswith("ssl_")})
    return options
