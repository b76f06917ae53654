"""Two processes with one writer id, on real servers: a child forked in C code (no Python fork
hook runs), a cloned machine (same id, same numbers), and a write whose outcome is unknown
that the shard then refuses for good.  Nothing is lost and nothing stored twice: a "repeat"
with other content is refused and counted, and the refused writer takes a new id."""

from __future__ import annotations

import ctypes
import os

import redis

from collector import Collector
from collector.store import KeySchema
from tests.support.fixtures import MakeCollector
from tests.support.polling import wait_until
from tests.support.relay import relay_to
from tests.support.servers import Server
from tests.support.stored import balanced, queue_events

PREFIX = "ids"
SCHEMA = KeySchema(PREFIX, 1)


def test_a_child_forked_in_c_code_takes_its_own_writer_id(
    own_server: Server, make_collector: MakeCollector
) -> None:
    """libc's fork() skips os.register_at_fork: the child has the parent's collector, writer
    id and numbers.  The writer sees the new process id and takes a new id, so the two never
    claim one number (each would be refused, counted and sent again under a new id)."""
    c = make_collector(url=own_server.url, key_prefix=PREFIX, shards=1, mode="sync")
    c.collect("g", {"who": "parent", "n": 0})
    fork = ctypes.PyDLL(None).fork  # holds the GIL across the call: the child goes on with it
    pid = fork()
    if pid == 0:  # the child: its collect()s, then out without running anything else
        code = 2
        try:
            for n in range(10):
                c.collect("g", {"who": "child", "n": n})
            code = 0 if c.stats()["refused_repeats"] == 0 else 3
        finally:
            os._exit(code)
    for n in range(1, 11):
        c.collect("g", {"who": "parent", "n": n})
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0  # 3: the child's writes were refused
    assert c.stats()["refused_repeats"] == 0
    events = queue_events(own_server.client(), SCHEMA, "g")
    assert sorted((e["who"], e["n"]) for e in events) == sorted(
        [("parent", n) for n in range(11)] + [("child", n) for n in range(10)]
    )


def clone(of: Collector, into: Collector) -> None:
    """Give ``into`` the writer id and sequence numbers of ``of``, as a copy of a machine (or
    a container's snapshot) started twice has: both processes go on from the same state."""
    source, target = of._get_writer(), into._get_writer()
    target.writer_id = source.writer_id
    target._next = dict(source._next)


def test_two_processes_with_one_writer_id_lose_nothing(
    redis_url: str, make_collector: MakeCollector
) -> None:
    """Before: 10 of 20 stored, both counting 10 stored (the second one's writes answered
    as repeats of the first one's)."""
    settings = {"url": redis_url, "key_prefix": PREFIX, "shards": 1}
    first, second = make_collector(**settings), make_collector(**settings)
    first.collect("g", {"who": "first", "n": -1})
    assert first.flush(timeout=10)
    clone(first, second)
    for n in range(10):
        first.collect("g", {"who": "first", "n": n})
        second.collect("g", {"who": "second", "n": n})
        assert first.flush(timeout=10) and second.flush(timeout=10)
    events = queue_events(redis.Redis.from_url(redis_url), SCHEMA, "g")
    assert len(events) == 21
    assert sorted((e["who"], e["n"]) for e in events) == sorted(
        [("first", n) for n in range(-1, 10)] + [("second", n) for n in range(10)]
    )
    one, two = first.stats(), second.stats()
    assert (one["stored"], two["stored"]) == (11, 10) and balanced(one) and balanced(two)
    # The second one's first write met the first one's: refused, counted, sent again under a
    # new id; from then on the two never meet again.
    assert (one["refused_repeats"], two["refused_repeats"]) == (0, 1)
    assert first._get_writer().writer_id != second._get_writer().writer_id


def test_a_write_without_an_answer_that_the_shard_refuses_for_good_is_sent_no_more(
    own_server: Server, make_collector: MakeCollector
) -> None:
    """Cut off, a write's outcome is unknown: it is kept and sent again.  Meanwhile a clone
    of the process takes the same number with its own event.  Once the link is back, the
    shard refuses the kept write for good (a repeat with other content): its unconfirmed
    state ends there, and its event goes again as a new write under a new id, behind which
    the game's new events were waiting."""
    with relay_to(("127.0.0.1", own_server.port)) as front:
        c = make_collector(
            url=front.url,
            key_prefix=PREFIX,
            shards=1,
            flush_interval_ms=5,
            retry_max_delay_ms=50,
            socket_timeout_seconds=0.3,
            connect_timeout_seconds=0.3,
        )
        c.collect("g", {"n": 0})
        assert c.flush(timeout=10)
        front.cut()  # nothing reaches Redis, and nothing comes back
        c.collect("g", {"n": 1})
        wait_until(lambda: c.stats()["unconfirmed_writes"] == 1, what="the write unconfirmed")
        twin = make_collector(url=own_server.url, key_prefix=PREFIX, shards=1, mode="sync")
        clone(c, twin)
        twin._get_writer()._next = {0: c._get_writer()._next[0] - 1}  # the kept write's number
        twin.collect("g", {"n": "twin"})
        c.collect("g", {"n": 2})  # waits behind the unconfirmed write
        front.cut(False)
        assert c.flush(timeout=10), c.stats()
    stats = c.stats()
    assert (stats["refused_writes"], stats["refused_repeats"], stats["unconfirmed_writes"]) == (
        1,
        1,
        0,
    )
    assert stats["stored"] == 3 and balanced(stats)
    assert [e["n"] for e in queue_events(own_server.client(), SCHEMA, "g")] == [0, "twin", 1, 2]


def test_a_write_without_an_answer_whose_arguments_the_shard_refuses_is_sent_no_more(
    own_server: Server, make_collector: MakeCollector
) -> None:
    """Cut off, a write's outcome is unknown: it is kept and sent again.  Once the link is
    back, its script refuses it for good for one of its arguments (here a queue cap beyond
    what the script takes, as a producer and a script that disagree would send): every copy
    of it was refused, so its unconfirmed state ends there (counted in ``refused_writes``)
    and its event goes back to the buffer as a new write, instead of being sent again as it
    is, refused every round, in front of the shard's new events."""
    with relay_to(("127.0.0.1", own_server.port)) as front:
        c = make_collector(
            url=front.url,
            key_prefix=PREFIX,
            shards=1,
            flush_interval_ms=5,
            retry_max_delay_ms=50,
            socket_timeout_seconds=0.3,
            connect_timeout_seconds=0.3,
        )
        c.collect("g", {"n": 0})
        assert c.flush(timeout=10)
        writer = c._get_writer()
        cap_for = writer._cap_for
        writer._cap_for = lambda game: 10**15  # the script takes caps below 10^14
        front.cut()  # nothing reaches Redis, and nothing comes back
        c.collect("g", {"n": 1})
        wait_until(lambda: c.stats()["unconfirmed_writes"] == 1, what="the write unconfirmed")
        front.cut(False)
        wait_until(
            lambda: c.stats()["unconfirmed_writes"] == 0,
            timeout=10,
            what="the refusal to end the write's unconfirmed state",
        )
        assert c.stats()["refused_writes"] >= 1
        writer._cap_for = cap_for
        c.collect("g", {"n": 2})
        assert c.flush(timeout=10), c.stats()
    stats = c.stats()
    assert (stats["refused_repeats"], stats["unconfirmed_writes"]) == (0, 0)
    assert stats["stored"] == 3 and balanced(stats)
    assert [e["n"] for e in queue_events(own_server.client(), SCHEMA, "g")] == [0, 1, 2]
