"""What a page read from the Redis result store costs, over loopback (results/redis.py).

Starts its own redis-server (Debian's package) on a free loopback port, without persistence,
and measures with 10 KB pages:
- page reads, one at a time (each waits for its answer: latency) and from 16 tasks at once
  (throughput), pages/s, against a plain GET of a 10 KB value (what the Lua script adds);
- a put of a 100-page result (1 MB), ms;
- Redis' memory per byte held (used_memory over the pages' bytes) with 50 such results, for
  sizing maxmemory.
Round trips are counted by the server (INFO commandstats: calls of evalsha / eval, and all
commands), not assumed.

Run: uv run python bench/bench_result_store.py   (~20 s)
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
from typing import Any

import redis.asyncio
from common import header, summary

from pg_mcp_server.results.redis import RedisResultStore
from pg_mcp_server.results.store import Limits

PAGE = os.urandom(10 * 1024)
PAGES = 100
READS = 5000
TASKS = 16


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def commands(raw: redis.asyncio.Redis) -> dict[str, int]:
    stats: dict[str, Any] = await raw.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


async def rate(read: Any, n: int, tasks: int) -> tuple[float, list[float]]:
    """Pages/s of `n` reads from `tasks` tasks, and each read's ms."""
    samples: list[float] = []

    async def worker(count: int) -> None:
        for _ in range(count):
            start = time.perf_counter_ns()
            await read()
            samples.append((time.perf_counter_ns() - start) / 1e6)

    start = time.perf_counter()
    await asyncio.gather(*(worker(n // tasks) for _ in range(tasks)))
    return len(samples) / (time.perf_counter() - start), samples


async def main() -> None:
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    raw = redis.asyncio.Redis.from_url(url)
    try:
        for _ in range(500):
            try:
                await raw.ping()
                break
            except redis.exceptions.ConnectionError:
                await asyncio.sleep(0.01)
        print(header())
        print(f"redis-server {(await raw.info('server'))['redis_version']}, loopback, 10 KB pages")
        store = await RedisResultStore.open(url, Limits(256 << 20, 1000, 600))
        result_id = await store.put("bench", [PAGE] * PAGES)
        await raw.set("plain", PAGE)

        before = await commands(raw)
        await store.page("bench", result_id, 7)
        after = await commands(raw)
        sent = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        inside = {k: v for k, v in sent.items() if v and k != "info"}
        print(f"one page read: {inside.pop('evalsha')} round trip (evalsha), inside: {inside}")
        before = await commands(raw)
        await store.put("bench", [PAGE] * PAGES)
        after = await commands(raw)
        sent = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        inside = {k: v for k, v in sent.items() if v and k != "info"}
        print(f"one put: {inside.pop('evalsha')} round trip (evalsha), inside: {inside}")

        index = 0

        async def page() -> None:
            nonlocal index
            index = (index + 1) % PAGES
            got, count = await store.page("bench", result_id, index)
            assert len(got) == len(PAGE) and count == PAGES

        async def get() -> None:
            assert len(await raw.get("plain") or b"") == len(PAGE)

        for label, read in (("page (script)", page), ("plain GET", get)):
            for tasks in (1, TASKS):
                await rate(read, 200, tasks)  # warm-up
                per_s, samples = await rate(read, READS, tasks)
                print(
                    f"{label:14} {tasks:2} task(s): {per_s:7.0f} pages/s, "
                    f"ms median / p95 {summary(samples)}"
                )

        puts: list[float] = []
        for _ in range(20):
            start = time.perf_counter_ns()
            await store.put("bench", [PAGE] * PAGES)
            puts.append((time.perf_counter_ns() - start) / 1e6)
        print(f"put of {PAGES} x 10 KB: ms median / p95 {summary(puts)}")

        await raw.flushdb()
        empty = int((await raw.info("memory"))["used_memory"])
        store50 = await RedisResultStore.open(url, Limits(256 << 20, 1000, 600))
        for _ in range(50):
            await store50.put("bench", [PAGE] * PAGES)
        used = int((await raw.info("memory"))["used_memory"]) - empty
        held = 50 * PAGES * len(PAGE)
        print(f"memory: {used / 2**20:.1f} MiB used for {held / 2**20:.1f} MiB of pages "
              f"({used / held:.3f} bytes per byte held)")  # fmt: skip
        await store50.close()
        await store.close()
    finally:
        await raw.aclose()
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    asyncio.run(main())
