"""Request slots (``reserve_slot.lua``, a GCRA in Redis) on injected Redis times: slots come
one interval apart whoever takes them, no sliding second ever holds more than the rate
allows (an idle spell lends nothing to a burst), a pause holds every scope, game scopes are
independent; and ``Permits`` takes a slot for every request, letting go of one it woke too
late for.  Real Redis; no timings."""

from __future__ import annotations

import itertools
import random
import threading
import time

import pytest
import redis

from collector.counters import Counter
from collector.metrics import Tally
from collector.store import KeySchema, ReserveSlot, Slot, Store
from reporter._delivery.batches import Batches
from reporter._pacing.limiter import Unlimited
from reporter._pacing.permits import Permits, make_limiter
from reporter._pacing.slots import SLOT_HORIZON_SECONDS, SharedSlots
from tests.support.entries import make_config, numbered
from tests.support.entries import store as push
from tests.support.scriptcalls import Scripts, store_of, store_on
from tests.support.windows import busiest
from tests.support.wiring import Sent, delivery_for

INTERVAL_US = 100_000  # 10 a second
BASE_US = 1_700_000_000_000_000
HORIZON_US = 5_000_000


@pytest.fixture
def store(r: redis.Redis) -> Store:
    return store_of(r, KeySchema("slots", 1))


def reserve(
    store: Store, at_us: int, scope: str = "", horizon_us: int = HORIZON_US, pause_ms: int = 0
) -> Slot:
    key = store.schema.limiter("nppa:app")
    return store.call(
        ReserveSlot(key, INTERVAL_US, scope, horizon_us, pause_ms, now_us=BASE_US + at_us)
    )


def test_takers_at_one_instant_get_slots_one_interval_apart(store: Store) -> None:
    slots = [reserve(store, 0) for _ in range(12)]
    assert all(s.reserved for s in slots)
    assert [s.wait_us for s in slots] == [i * INTERVAL_US for i in range(12)]
    assert [s.ahead for s in slots] == list(range(12))


def test_an_idle_scope_lends_nothing_to_a_burst(store: Store) -> None:
    assert reserve(store, 0).wait_us == 0
    # ten seconds of nothing, then a crowd: the first goes now, the rest one interval apart
    crowd = [reserve(store, 10_000_000) for _ in range(15)]
    starts = [10_000_000 + s.wait_us for s in crowd]
    assert starts == [10_000_000 + i * INTERVAL_US for i in range(15)]
    assert busiest(starts, 1_000_000) == 10


def test_no_sliding_second_holds_more_than_the_rate(store: Store) -> None:
    """Takers arriving at random (bursts, lulls) never get more than ten slots in a second,
    and with a queue, none is lost: the slots of one busy spell are back to back."""
    rng = random.Random(18)
    at, slots = 0, []
    for _ in range(400):
        at += rng.choice([0, 0, 0, 5_000, 40_000, 150_000, 900_000])
        slot = reserve(store, at)
        assert slot.reserved
        slots.append(at + slot.wait_us)
    assert busiest(slots, 1_000_000) == 10
    gaps = [b - a for a, b in itertools.pairwise(slots)]
    assert min(gaps) == INTERVAL_US


def test_a_slot_beyond_the_horizon_is_not_reserved(store: Store) -> None:
    for _ in range(51):  # 0 .. 5.0 s ahead
        assert reserve(store, 0).reserved
    refused = reserve(store, 0)
    assert not refused.reserved and refused.wait_us == 5_100_000
    assert reserve(store, 0, horizon_us=-1) == refused  # looking reserves nothing either
    assert reserve(store, 100_000).reserved  # a tenth of a second later it is within reach


def test_a_pause_holds_every_scope_until_it_ends(store: Store) -> None:
    assert reserve(store, 0, "biz-a").wait_us == 0
    paused = reserve(store, 0, "biz-a", horizon_us=-1, pause_ms=60_000)
    assert not paused.reserved and paused.wait_us == 60_000_000
    assert not reserve(store, 1_000_000, "biz-b").reserved  # another game's scope too
    late = reserve(store, 59_000_000, "biz-b", horizon_us=HORIZON_US)
    assert late.reserved and late.wait_us == 1_000_000


def test_game_scopes_have_slots_of_their_own(store: Store) -> None:
    a = [reserve(store, 0, "biz-a").wait_us for _ in range(3)]
    b = [reserve(store, 0, "biz-b").wait_us for _ in range(3)]
    assert a == b == [0, INTERVAL_US, 2 * INTERVAL_US]


def test_a_hash_of_another_type_is_set_aside(store: Store, r: redis.Redis) -> None:
    key = store.schema.limiter("nppa:app")
    r.set(key, "junk")
    slot = reserve(store, 0)
    assert slot.reserved and slot.wait_us == 0
    assert r.type(key) == b"hash"
    assert r.llen(key.replace(":bucket", ":quarantine")) == 1


def test_junk_fields_read_as_free(store: Store, r: redis.Redis) -> None:
    key = store.schema.limiter("nppa:app")
    r.hset(key, mapping={"t:": "nan", "paused_until": "soon"})
    assert reserve(store, 0).wait_us == 0
    assert reserve(store, 0).wait_us == INTERVAL_US


# -- Permits over slots ----------------------------------------------------------------------


def nppa_slots(store: Store, scope: str = "app") -> SharedSlots:
    config = make_config(
        "redis://127.0.0.1:1/0",
        sink={"kind": "nppa"},
        nppa={"app_id": "app-1", "secret_key": "0" * 32, "rate_limit_scope": scope},
        games={"g1": {"biz_id": "biz-1"}, "g2": {"biz_id": "biz-2"}},
    )
    limiter = make_limiter(config, store)
    assert isinstance(limiter, SharedSlots)
    return limiter


def next_free_us(store: Store, scope: str = "") -> int:
    """How far ahead the scope's next free slot is (on Redis TIME), looking only."""
    key = store.schema.limiter("nppa:app-1")
    return store.call(ReserveSlot(key, 1, scope, -1)).wait_us


def test_every_request_takes_a_slot_when_it_is_sent(store: Store) -> None:
    slots = nppa_slots(store)
    permits = Permits(slots, slots)
    stop = threading.Event()
    assert next_free_us(store) == 0
    claim = permits.take(8, stop, game="g1")  # a claim only looks
    assert claim.granted == 8 and next_free_us(store) == 0
    stop.set()  # so that no test sleeps: a slot reserved, and the sleep cut short
    assert not permits.at_send("g1", stop)
    assert not permits.one(stop, "g2")
    # two slots were reserved, one interval (1 / 9.6 s) apart
    assert 100_000 < next_free_us(store) <= 2 * 104_167


def test_no_claim_while_paused_and_no_slot_beyond_the_horizon(store: Store) -> None:
    slots = nppa_slots(store)
    permits = Permits(slots, slots)
    stop = threading.Event()
    permits.pause(60.0, "g1")
    assert permits.take(8, stop, game="g1").granted == 0
    assert not permits.at_send("g1", stop)  # the batch goes back unsent
    assert next_free_us(store) > SLOT_HORIZON_SECONDS * 1_000_000


def test_game_scope_keys_slots_by_biz_id(store: Store) -> None:
    slots = nppa_slots(store, "game")
    stop = threading.Event()
    stop.set()
    permits = Permits(slots, slots)
    permits.one(stop, "g1")
    assert next_free_us(store, "biz-1") > 0
    assert next_free_us(store, "biz-2") == 0 and next_free_us(store, "") == 0


def test_a_spare_claim_waits_while_others_queue_for_slots(store: Store) -> None:
    slots = nppa_slots(store)
    permits = Permits(slots, slots)
    stop = threading.Event()
    assert permits.take(1, stop, wait=False, game="g1").granted == 1  # nobody ahead
    stop.set()
    permits.one(stop, "g1")  # one slot, taken now: nobody waits yet
    assert permits.take(1, stop, wait=False, game="g1").granted == 1
    permits.one(stop, "g1")  # a second, an interval ahead: a queue
    assert permits.take(1, stop, wait=False, game="g1").granted == 0
    assert permits.take(1, stop, wait=True, game="g1").granted == 1  # a full batch goes
    assert permits.contended


def test_a_leased_batch_without_a_slot_goes_back_unsent(
    redis_url: str, client: redis.Redis
) -> None:
    """Claimed while its slot was near, then the endpoint said 1006 (a pause): the batches
    are handed back unsent, no attempt charged, nothing left leased."""
    config = make_config(redis_url, reporter={"linger_ms": 0, "max_batches_per_claim": 2})
    batches = Batches(store_on(client, config), config)
    slots = SharedSlots(batches.store, "nppa:app-1", 9.6)
    sent = Sent()
    delivery = delivery_for(batches, sent, config, time.time, slots)
    keys = push(Scripts(client), batches.store.schema, "g", numbered("g", 256))
    stop = threading.Event()
    lease = delivery.claimer.claim(keys, "g", stop)
    assert lease is not None and len(lease.batches) == 2
    slots.pause(60.0)
    assert delivery.deliverer.deliver(lease, stop) == []
    assert sent.batches == []
    assert delivery.counts.counted().get("batches_released") == 2
    assert client.zcard(keys.inflight) == 0


def test_a_thread_that_stalled_after_its_slot_takes_a_new_one(store: Store) -> None:
    slots = nppa_slots(store)
    tally = Tally()
    permits = Permits(slots, slots, metrics=tally)
    stop = threading.Event()
    assert permits.on_time("g1", stop)  # no slot taken by this thread: nothing to check
    assert permits.one(stop, "g1")  # the scope is idle: its slot is now, no sleep
    assert permits.on_time("g1", stop)  # just taken: on time
    late = tally.get(Counter.LATE_SLOTS)  # a loaded host may have made those late already
    permits._due.at = time.monotonic() - 1.0  # as if it stalled a second on the way
    before = next_free_us(store)
    stop.set()  # the new slot's sleep is cut short: no request
    assert not permits.on_time("g1", stop)
    assert tally.get(Counter.LATE_SLOTS) == late + 1
    assert next_free_us(store) > before  # a new slot was reserved


def test_a_batch_waiting_for_its_slot_when_sending_is_held_goes_back_unsent(
    redis_url: str, client: redis.Redis
) -> None:
    """Claimed, then waiting for a slot a few tenths of a second away, when another thread
    hears an identity answer (the hold starts): at its slot the request is kept back and the
    batch handed back, no attempt charged."""
    config = make_config(redis_url, reporter={"linger_ms": 0, "max_batches_per_claim": 1})
    batches = Batches(store_on(client, config), config)
    slots = SharedSlots(batches.store, "nppa:app-1", 9.6)
    held = threading.Event()
    sent = Sent()
    delivery = delivery_for(batches, sent, config, time.time, slots, held.is_set)
    keys = push(Scripts(client), batches.store.schema, "g", numbered("g", 128))
    stop = threading.Event()
    lease = delivery.claimer.claim(keys, "g", stop)
    assert lease is not None and len(lease.batches) == 1
    for _ in range(4):  # the next free slot is about 0.4 s away
        assert slots.reserve("g").reserved
    threading.Timer(0.1, held.set).start()
    assert delivery.deliverer.deliver(lease, stop) == []
    assert sent.batches == []
    assert delivery.counts.counted().get("batches_released") == 1
    assert client.zcard(keys.inflight) == 0


def test_without_slots_at_send_costs_nothing() -> None:
    permits = Permits(Unlimited())
    assert permits.at_send("g1", threading.Event())


def test_a_thread_woken_ahead_of_its_slot_sends_only_at_it(store: Store) -> None:
    """With a lead, the thread wakes before its slot (to get the request ready while it
    waits) and ``on_time`` sleeps the rest: the request is not sent before its slot."""
    slots = nppa_slots(store)
    permits = Permits(slots, slots, lead=1.0)
    stop = threading.Event()
    for _ in range(4):
        slots.reserve("g1")  # four slots queued: the next is about 0.4 s away
    assert permits.one(stop, "g1")  # within the lead: no sleep yet
    send_at = permits._due.send_at
    assert send_at > time.monotonic()  # ready ahead of the slot
    assert permits.on_time("g1", stop)  # sleeps the rest
    assert time.monotonic() >= send_at - 0.001


def test_a_thread_stopped_while_sleeping_off_its_lead_does_not_send(store: Store) -> None:
    slots = nppa_slots(store)
    tally = Tally()
    permits = Permits(slots, slots, lead=1.0, metrics=tally)
    stop = threading.Event()
    for _ in range(4):
        slots.reserve("g1")
    assert permits.one(stop, "g1")  # woken ahead of its slot
    stop.set()
    assert not permits.on_time("g1", stop)
    assert tally.get(Counter.LATE_SLOTS) == 0


# -- the throttle honoured everywhere --------------------------------------------------------


def limiter_key(store: Store) -> str:
    return store.schema.limiter("nppa:app-1")


@pytest.mark.parametrize("lead", [0.0, 0.05])
def test_a_slot_reserved_before_a_pause_is_given_up_when_its_time_comes(
    store: Store, lead: float
) -> None:
    """A thread reserved a slot about 0.3 s ahead; meanwhile another reporter (a process of
    its own: nothing shared but Redis) hears a 1006 and pauses everyone.  At its slot the
    thread does not send: without a lead ``one`` says so, with one ``on_time``."""
    mine, other = nppa_slots(store), nppa_slots(store)
    permits = Permits(mine, mine, lead=lead)
    for _ in range(3):
        assert other.reserve("g1").reserved
    threading.Timer(0.1, other.pause, args=(60.0, "g1")).start()
    stop = threading.Event()
    if lead:
        assert permits.one(stop, "g1")  # woken ahead of its slot, the request made ready
        assert not permits.on_time("g1", stop)
    else:
        assert not permits.one(stop, "g1")
    assert not mine.reserve("g1").reserved  # and it waits the pause out


def test_a_lost_state_pauses_every_scope_for_the_slot_horizon(store: Store, r: redis.Redis) -> None:
    """The next second's slots were reserved when Redis lost the rate's state (a restart
    without persistence, a failover): no slot is handed out until every one reserved
    before has passed, whichever scope asks, whichever reporter, one starting now too."""
    slots = nppa_slots(store, "game")
    first = slots.reserve("g1")
    assert first.reserved and first.wait_us == 0 and not first.lost  # a first start: no wait
    for _ in range(9):
        assert slots.reserve("g1").reserved  # up to 0.94 s ahead
    r.delete(limiter_key(store))
    lost = slots.reserve("g1")
    horizon_us = SLOT_HORIZON_SECONDS * 1_000_000
    assert not lost.reserved and lost.lost
    assert horizon_us < lost.paused_us <= horizon_us + 104_167
    starting = nppa_slots(store, "game")  # knows nothing of the state before
    other_scope = starting.reserve("g2")
    assert not other_scope.reserved and other_scope.paused_us > horizon_us - 100_000
    assert not slots.reserve("g2").reserved  # this process waits it out without asking


def test_a_lost_pause_is_put_back_by_a_reporter_that_knew_it(store: Store, r: redis.Redis) -> None:
    heard, saw, starting = nppa_slots(store), nppa_slots(store), nppa_slots(store)
    heard.pause(60.0, "g1")  # a 1006, a minute
    assert saw.acquire(1, game="g1").granted == 0  # another reporter looks: paused
    r.delete(limiter_key(store))
    assert saw.acquire(1, game="g1").granted == 0  # finds the state lost: puts the pause back
    slot = starting.reserve("g1")  # a reporter that never saw either
    assert not slot.reserved and slot.paused_us > 55_000_000
