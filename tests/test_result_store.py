"""The result store's contract (results/store.py), for every store, and the Redis store's own
behaviour: a store that is down, its start-up check, secrets kept out of what it says.

The contract tests run once per store in `OPENERS`: the in-process one on a clock the test
moves, the Redis one against a real redis-server (tests/redisbed.py), one database flushed
per test.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass

import pytest
import pytest_asyncio
import redis.asyncio
import redisbed
from eventually import eventually

from pg_mcp_server.errors import ResultExpiredError
from pg_mcp_server.results import Limits, MemoryResultStore, ResultStore, StoreUnavailable
from pg_mcp_server.results.redis import RESULT_PREFIX, RedisResultStore

ME = "owner-me"
OTHER = "owner-other"
ROOMY = Limits(max_bytes=1 << 20, max_results=100, idle_seconds=60)


@dataclass
class Opened:
    store: ResultStore
    # How a test lets the idle time pass: `gone(id)` says whether result `id` has expired
    # without reading it (a read renews it), for a store on a real clock; `advance(seconds)`
    # moves the clock of a store that takes one.
    gone: Callable[[str], Awaitable[bool]] | None = None
    advance: Callable[[float], None] | None = None


Opener = Callable[[str, Limits], Awaitable[Opened]]
MakeStore = Callable[[Limits], Awaitable[Opened]]


async def _open_redis(url: str, limits: Limits) -> Opened:
    raw = redis.asyncio.Redis.from_url(url)
    try:
        await raw.flushdb()
    finally:
        await raw.aclose()
    store = await RedisResultStore.open(url, limits)

    async def gone(result_id: str) -> bool:
        probe = redis.asyncio.Redis.from_url(url)
        try:
            return not await probe.exists(RESULT_PREFIX + result_id)
        finally:
            await probe.aclose()

    return Opened(store, gone=gone)


async def _open_memory(_: str, limits: Limits) -> Opened:
    now = [0.0]

    def advance(seconds: float) -> None:
        now[0] += seconds

    return Opened(MemoryResultStore(limits, clock=lambda: now[0]), advance=advance)


OPENERS: dict[str, Opener] = {"memory": _open_memory, "redis": _open_redis}


@pytest_asyncio.fixture(loop_scope="session", params=sorted(OPENERS))
async def make_store(request: pytest.FixtureRequest) -> AsyncIterator[MakeStore]:
    """Opens the store under test with the given limits; closes what it opened."""
    url = request.getfixturevalue("redis_url") if request.param == "redis" else ""
    opened: list[ResultStore] = []

    async def make(limits: Limits) -> Opened:
        got = await OPENERS[request.param](url, limits)
        opened.append(got.store)
        return got

    yield make
    for store in opened:
        await store.close()


async def held(store: ResultStore, result_id: str) -> bool:
    """Whether `result_id` is still held for ME (reading it: this renews it)."""
    try:
        await store.page(ME, result_id, 0)
    except ResultExpiredError:
        return False
    return True


async def expired_message(store: ResultStore, owner: str, result_id: str, index: int) -> str:
    with pytest.raises(ResultExpiredError) as caught:
        await store.page(owner, result_id, index)
    assert caught.value.code == "RESULT_EXPIRED"
    return caught.value.message


# --- the contract ------------------------------------------------------------------------------


async def test_pages_come_back_as_put_with_their_count(make_store: MakeStore) -> None:
    store = (await make_store(ROOMY)).store
    pages = [bytes(range(256)) * 4, b"", "café 🐘\n".encode(), b"\x00" * 10_000]
    result_id = await store.put(ME, pages)
    assert len(result_id) >= 22  # token_urlsafe(16) or more: 128 bits
    # Any order, any number of times: a page is a look-up, never consumed.
    for index in (3, 0, 2, 1, 0):
        assert await store.page(ME, result_id, index) == (pages[index], 4)


async def test_ids_differ_for_the_same_pages(make_store: MakeStore) -> None:
    store = (await make_store(ROOMY)).store
    ids = {await store.put(ME, [b"same"]) for _ in range(20)}
    assert len(ids) == 20


async def test_another_owner_gets_what_an_unknown_id_gets(make_store: MakeStore) -> None:
    store = (await make_store(ROOMY)).store
    result_id = await store.put(ME, [b"mine"])
    other = await expired_message(store, OTHER, result_id, 0)
    unknown = await expired_message(store, ME, secrets.token_urlsafe(24), 0)
    assert other == unknown  # nothing tells that the result exists
    assert await store.page(ME, result_id, 0) == (b"mine", 1)


async def test_a_page_past_the_end_is_expired(make_store: MakeStore) -> None:
    store = (await make_store(ROOMY)).store
    result_id = await store.put(ME, [b"a", b"b"])
    for index in (2, 3, -1):
        await expired_message(store, ME, result_id, index)
    assert await store.page(ME, result_id, 1) == (b"b", 2)


async def test_a_result_not_read_for_the_idle_time_expires(
    make_store: MakeStore,
) -> None:
    idle = 0.5
    opened = await make_store(Limits(max_bytes=1 << 20, max_results=10, idle_seconds=idle))
    store = opened.store
    result_id = await store.put(ME, [b"soon gone", b"second"])
    assert await store.page(ME, result_id, 1) == (b"second", 2)
    if opened.advance is not None:
        opened.advance(idle / 2)
        assert await store.page(ME, result_id, 0) == (b"soon gone", 2)  # renewed
        opened.advance(idle * 0.9)
        assert await held(store, result_id)  # idle/2 + 0.9 idle after the put: still held
        opened.advance(idle * 1.01)
    else:
        assert opened.gone is not None
        probe = opened.gone
        await eventually(lambda: probe(result_id), what="the result's expiry", seconds=10)
    await expired_message(store, ME, result_id, 0)
    # Expired results leave room: a full store takes new ones as before.
    assert await held(store, await store.put(ME, [b"next"]))


async def test_eviction_by_count_takes_the_least_recently_read(
    make_store: MakeStore,
) -> None:
    store = (await make_store(Limits(max_bytes=1 << 20, max_results=3, idle_seconds=60))).store
    a, b, c = [await store.put(ME, [name.encode()]) for name in "abc"]
    await store.page(ME, a, 0)  # oldest put, but read last: b is now least recently read
    d = await store.put(ME, [b"d"])
    assert [await held(store, x) for x in (b, c, a, d)] == [False, True, True, True]
    # The checks above read c, a, d in that order: c is least recently read now.
    e = await store.put(ME, [b"e"])
    assert [await held(store, x) for x in (c, a, d, e)] == [False, True, True, True]


async def test_eviction_by_bytes_takes_the_least_recently_read(
    make_store: MakeStore,
) -> None:
    store = (await make_store(Limits(max_bytes=1024, max_results=100, idle_seconds=60))).store
    a, b, c = [await store.put(ME, [name.encode() * 150] * 2) for name in "abc"]  # 300 each
    await store.page(ME, a, 1)
    d = await store.put(ME, [b"d" * 300])  # 1,200 > 1,024: b, least recently read, goes
    assert [await held(store, x) for x in (b, c, a, d)] == [False, True, True, True]
    # A result as big as the whole budget evicts everything else, and is held.
    whole = await store.put(ME, [b"w" * 1000, b"x" * 24])
    assert [await held(store, x) for x in (c, a, d)] == [False, False, False]
    assert await store.page(ME, whole, 1) == (b"x" * 24, 2)


async def holds(store: ResultStore, owner: str, result_id: str) -> bool:
    try:
        await store.page(owner, result_id, 0)
    except ResultExpiredError:
        return False
    return True


async def test_an_owner_filling_the_store_by_bytes_evicts_its_own(make_store: MakeStore) -> None:
    """attack4 F-G: another owner's result, least recently read of all, survives one owner's
    stream of big results; that owner's least recently read go instead."""
    store = (await make_store(Limits(max_bytes=1024, max_results=100, idle_seconds=60))).store
    theirs = await store.put(OTHER, [b"o" * 200])
    mine = [await store.put(ME, [bytes([65 + i]) * 300]) for i in range(10)]
    assert await holds(store, OTHER, theirs)
    assert [await holds(store, ME, x) for x in mine[-2:]] == [True, True]
    assert not await holds(store, ME, mine[0])


async def test_an_owner_filling_the_store_by_count_evicts_its_own(make_store: MakeStore) -> None:
    store = (await make_store(Limits(max_bytes=1 << 20, max_results=3, idle_seconds=60))).store
    theirs = await store.put(OTHER, [b"o"])
    mine = [await store.put(ME, [b"m%d" % i]) for i in range(6)]
    assert await holds(store, OTHER, theirs)
    assert [await holds(store, ME, x) for x in mine] == [False] * 4 + [True] * 2


async def test_the_owner_holding_the_most_gives_way_to_another(make_store: MakeStore) -> None:
    """A put evicts from the owner that holds the most, the new result counted as its
    owner's: an owner holding most of the store makes room for another's result, and by
    count too."""
    store = (await make_store(Limits(max_bytes=1024, max_results=4, idle_seconds=60))).store
    mine = [await store.put(ME, [b"m" * 300]) for _ in range(3)]  # 900 of 1,024
    theirs = await store.put(OTHER, [b"o" * 300])  # ME 900 > OTHER 300: ME's oldest goes
    assert await holds(store, OTHER, theirs)
    assert [await holds(store, ME, x) for x in mine] == [False, True, True]
    small = await store.put(ME, [b"s"])  # 4 results: the count is reached
    another = await store.put(OTHER, [b"p"])  # ME 3 results > OTHER 2: ME's oldest goes
    assert await holds(store, OTHER, another) and await holds(store, OTHER, theirs)
    assert [await holds(store, ME, x) for x in (mine[1], mine[2], small)] == [False, True, True]


async def test_a_result_over_the_byte_budget_is_a_bug(make_store: MakeStore) -> None:
    store = (await make_store(Limits(max_bytes=1024, max_results=10, idle_seconds=60))).store
    kept = await store.put(ME, [b"k" * 100])
    with pytest.raises(ValueError):
        await store.put(ME, [b"x" * 1000, b"y" * 25])
    assert await held(store, kept)  # nothing was evicted for it


# --- the Redis store -----------------------------------------------------------------------------


@pytest.fixture
def own_redis() -> Iterator[redisbed.RedisServer]:
    """A redis-server of this test's own, which it may stop; stopped afterwards in any case."""
    if not redisbed.available():
        pytest.skip(f"no redis-server ({redisbed.BINARY}): apt-get install redis-server")
    server = redisbed.start_redis(password="pw-" + secrets.token_hex(8))
    try:
        yield server
    finally:
        server.stop()


async def test_a_result_put_through_one_store_is_paged_through_another(redis_url: str) -> None:
    first = await RedisResultStore.open(redis_url, ROOMY)
    second = await RedisResultStore.open(redis_url, ROOMY)
    try:
        result_id = await first.put(ME, [b"p0", b"p1", b"p2"])
        assert [await second.page(ME, result_id, i) for i in range(3)] == [
            (b"p0", 3),
            (b"p1", 3),
            (b"p2", 3),
        ]
        with pytest.raises(ResultExpiredError):
            await second.page(OTHER, result_id, 0)
    finally:
        await first.close()
        await second.close()


async def test_puts_racing_from_two_replicas_keep_the_budget(redis_url: str) -> None:
    """Eviction runs inside Redis, atomically: 60 puts at once from two stores (replicas)
    for two owners leave exactly the budget's results, and the byte counts, all and each
    owner's, are what their keys hold."""
    limits = Limits(max_bytes=10_000, max_results=5, idle_seconds=60)
    first = (await _open_redis(redis_url, limits)).store
    second = await RedisResultStore.open(redis_url, limits)
    raw = redis.asyncio.Redis.from_url(redis_url)
    try:
        # Any 5 fit the bytes (at most 1,929 each): the count decides how many are kept,
        # while bytes still evict on the way (4 held and a fifth may pass 10,000).
        sizes = [100 + 31 * i for i in range(60)]
        owners = [(ME, OTHER)[i % 3 == 0] for i in range(60)]
        ids = await asyncio.gather(
            *((first, second)[i % 2].put(owners[i], [b"p" * n]) for i, n in enumerate(sizes))
        )
        kept = [i for i in ids if await raw.exists(RESULT_PREFIX + i)]
        assert len(kept) == 5
        assert await raw.zcard("pgmcp:results:lru") == 5  # the index lists them, only them
        held_bytes = 0
        use: dict[str, int] = {}
        count: dict[str, int] = {}
        for result_id in kept:
            assert await raw.zscore("pgmcp:results:lru", result_id) is not None
            size = int(await raw.hget(RESULT_PREFIX + result_id, "s") or 0)
            held_bytes += size
            owner = hashlib.sha256(owners[ids.index(result_id)].encode()).hexdigest()
            assert await raw.hget(RESULT_PREFIX + result_id, "o") == owner.encode()
            assert await raw.zscore(f"pgmcp:results:lru:{owner}", result_id) is not None
            use[owner] = use.get(owner, 0) + size
            count[owner] = count.get(owner, 0) + 1
        assert int(await raw.get("pgmcp:results:bytes") or 0) == held_bytes <= 10_000
        counted = await raw.hgetall("pgmcp:results:use")
        assert {k: int(v) for k, v in counted.items()} == {k.encode(): v for k, v in use.items()}
        for owner, n in count.items():
            assert await raw.zcard(f"pgmcp:results:lru:{owner}") == n
    finally:
        await raw.aclose()
        await first.close()
        await second.close()


async def test_a_read_renews_the_idle_time_and_another_owner_renews_nothing(
    redis_url: str,
) -> None:
    store = (await _open_redis(redis_url, Limits(1 << 20, 10, idle_seconds=30))).store
    raw = redis.asyncio.Redis.from_url(redis_url)
    try:
        result_id = await store.put(ME, [b"x"])
        key = RESULT_PREFIX + result_id
        await raw.pexpire(key, 5_000)  # as if it had not been read for 25 s
        with pytest.raises(ResultExpiredError):
            await store.page(OTHER, result_id, 0)
        assert 0 < await raw.pttl(key) <= 5_000
        await store.page(ME, result_id, 0)
        assert await raw.pttl(key) > 25_000
    finally:
        await raw.aclose()
        await store.close()


async def test_redis_down_pages_expire_puts_say_unavailable_and_it_recovers(
    own_redis: redisbed.RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    password = own_redis.password
    assert password
    store = await RedisResultStore.open(own_redis.url(), ROOMY)
    try:
        result_id = await store.put(ME, [b"held"])
        own_redis.stop()
        with caplog.at_level(logging.INFO, logger="pg_mcp_server.results.redis"):
            with pytest.raises(ResultExpiredError) as caught:
                await store.page(ME, result_id, 0)
            assert caught.value.suggestion is not None
            assert "cannot be reached" in caught.value.suggestion
            assert "Run the query again" in caught.value.suggestion
            with pytest.raises(StoreUnavailable, match="cannot be reached") as unavailable:
                await store.put(ME, [b"new"])
            # Back on the same port (empty: no persistence): paging works again.
            restarted = redisbed.restart(own_redis)
            again = await store.put(ME, [b"after"])
            assert await store.page(ME, again, 0) == (b"after", 1)
            restarted.stop()
        said = [
            caught.value.message,
            caught.value.suggestion,
            str(unavailable.value),
            *(r.getMessage() for r in caplog.records),
        ]
        assert not [text for text in said if password in text]
        failures = [r for r in caplog.records if "failed" in r.getMessage()]
        assert len(failures) == 1, "one line for the outage, not one per call"
        assert f"127.0.0.1:{own_redis.port}/0" in failures[0].getMessage()
        assert any("answers again" in r.getMessage() for r in caplog.records)
    finally:
        await store.close()


async def test_open_refuses_a_store_that_does_not_answer(
    own_redis: redisbed.RedisServer,
) -> None:
    password = own_redis.password
    assert password
    wrong = own_redis.url().replace(password, "not-" + password)
    with pytest.raises(StoreUnavailable) as refused:
        await RedisResultStore.open(wrong, ROOMY)
    assert "refused the server's login" in str(refused.value)
    assert password not in str(refused.value)
    own_redis.stop()
    with pytest.raises(StoreUnavailable) as down:
        await RedisResultStore.open(own_redis.url(), ROOMY)
    assert f"redis://127.0.0.1:{own_redis.port}/0" in str(down.value)
    assert "cannot be reached" in str(down.value)
    assert password not in str(down.value)


async def test_open_refuses_a_url_that_is_not_redis() -> None:
    with pytest.raises(ValueError, match="not a redis") as refused:
        await RedisResultStore.open("http://user:s3cret@example.com/0", ROOMY)
    assert "s3cret" not in str(refused.value)


def test_without_the_redis_package_the_start_says_which_extra() -> None:
    """The `redis` package is an optional extra: a server installed without it and pointed at
    Redis is told what to install (a child process in which `import redis` fails)."""
    script = (
        "import sys, asyncio\n"
        "sys.modules['redis'] = None\n"
        "from pg_mcp_server.config import ServerSettings\n"
        "from pg_mcp_server.results import StoreUnavailable, check_store\n"
        "try:\n"
        "    asyncio.run(check_store(ServerSettings(result_store='redis://:pw@127.0.0.1:1/0')))\n"
        "except StoreUnavailable as exc:\n"
        "    print(exc)\n"
    )
    said = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "needs the optional dependency 'redis'" in said
    assert "[redis]" in said
    assert "pw" not in said
