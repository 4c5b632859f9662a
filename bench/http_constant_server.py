"""HTTP servers for bench_http.py: the SDK's floor, and our gateway app for profiling.

`--app constant` is the floor: an `MCPServer` whose one tool, `constant`, is async and returns
42 (so it has an output schema and structured content, like our tools), served exactly the way
`pg-mcp-server --transport http` serves ours: `streamable_http_app(stateless_http=True,
json_response=True)` with the same transport security (DNS-rebinding protection, loopback
hosts and origins), under `uvicorn.run(..., log_config=None)` with uvicorn's defaults otherwise
(loop and http "auto": uvloop and httptools when installed, as for ours), with the same logging
set-up (`pg_mcp_server.logs.configure_logging`, level and format from MCP_LOG_LEVEL /
MCP_LOG_FORMAT), so both write the same per-request log lines.

`--app ours` is `pg_mcp_server.gateway.http_app(Settings.load())`: the app `pg-mcp-server
--transport http` runs, with its settings from the environment (PG_DSN, PG_POOL_SIZE,
MCP_MAX_CONCURRENT_REQUESTS, ...). Unlike the console script it skips the start-up privilege
audit, which does not touch the request path. bench_http.py uses it only for profiling (one
worker); every measured run of ours uses the real console script (`--workers 1` or `2`).

`--workers N` (N > 1) runs `uvicorn.run("http_constant_server:<factory>", factory=True,
workers=N)`, as the console script does with `--workers N`: each worker is a spawned process
that imports this module (bench/ is on the path it inherits) and builds its own app.

`--profile PATH` (one worker only): SIGUSR1 turns the profiler on, SIGUSR2 turns it off and
writes its result to PATH, so only the calls in between are profiled. `--profiler cprofile`
(the default) is cProfile (every Python call, wall-clock, with a per-call overhead that
inflates small functions); `--profiler sample` is CpuSampler below: a sample of the Python
stack every millisecond of the process's CPU time, cheap enough that the server runs at
nearly full speed, so its shares are those of the unprofiled server.

Run (normally spawned by bench_http.py):
    uv run python bench/http_constant_server.py --app constant --port 8931 [--workers 2]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import signal
import time
from types import FrameType
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp

from pg_mcp_server.config import ServerSettings, Settings
from pg_mcp_server.gateway import http_app, sdk_app
from pg_mcp_server.logs import configure_logging

HOST = "127.0.0.1"


async def constant() -> int:
    """Return 42; no I/O."""
    return 42


def constant_app() -> ASGIApp:
    """The floor: one constant tool, served as our server is (see the module docstring)."""
    srv = ServerSettings()
    server: MCPServer[Any] = MCPServer(name="http-floor", log_level=srv.log_level)
    server.add_tool(constant, name="constant", description="Return 42 (benchmark floor).")
    configure_logging(srv.log_level, srv.log_format)  # after MCPServer, which sets up its own
    return sdk_app(server, srv, HOST)


def ours_app() -> ASGIApp:
    """pg-mcp-server's HTTP app, settings from the environment (PG_DSN etc.)."""
    settings = Settings.load()
    app = http_app(settings)
    configure_logging(settings.server.log_level, settings.server.log_format)
    return app


FACTORIES = {"constant": constant_app, "ours": ours_app}


class CpuSampler:
    """A statistical CPU profiler: SIGPROF every `interval` seconds of this process's CPU time
    (ITIMER_PROF counts user + system time, so waiting costs nothing and time in a system call
    or a C function is charged to the Python line that made it). Each sample is the Python
    stack at that point; `stop` writes {"cpu_s": process CPU seconds between start and stop,
    "samples": [[count, [[file, line, function], ...leaf first]], ...]} as JSON. The kernel
    checks CPU timers on its scheduler tick, so a sample stands for one tick of CPU or more
    (4 ms at HZ=250), not `interval`: use cpu_s / samples."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.counts: dict[tuple[tuple[str, int, str], ...], int] = {}
        self.cpu_start = 0.0

    def _sample(self, signum: int, frame: FrameType | None) -> None:
        stack: list[tuple[str, int, str]] = []
        while frame is not None and len(stack) < 200:
            code = frame.f_code
            stack.append((code.co_filename, frame.f_lineno, code.co_name))
            frame = frame.f_back
        key = tuple(stack)
        self.counts[key] = self.counts.get(key, 0) + 1

    def start(self) -> None:
        signal.signal(signal.SIGPROF, self._sample)
        self.cpu_start = time.process_time()
        signal.setitimer(signal.ITIMER_PROF, self.interval, self.interval)

    def stop(self, path: str) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        body = {
            "cpu_s": time.process_time() - self.cpu_start,
            "samples": [[n, [list(f) for f in stack]] for stack, n in self.counts.items()],
        }
        with open(path + ".part", "w") as out:
            json.dump(body, out)
        os.replace(path + ".part", path)


SAMPLE_INTERVAL_S = 0.001


def install_profiler(path: str, how: str) -> None:
    """SIGUSR1 starts profiling, SIGUSR2 stops it and writes the result to `path` (atomically):
    cProfile stats (`how` = "cprofile") or CpuSampler JSON ("sample")."""
    if how == "sample":
        sampler = CpuSampler(SAMPLE_INTERVAL_S)
        signal.signal(signal.SIGUSR1, lambda signum, frame: sampler.start())
        signal.signal(signal.SIGUSR2, lambda signum, frame: sampler.stop(path))
        return
    profiler = cProfile.Profile()

    def start(signum: int, frame: FrameType | None) -> None:
        profiler.enable()

    def stop(signum: int, frame: FrameType | None) -> None:
        profiler.disable()
        profiler.dump_stats(path + ".part")
        os.replace(path + ".part", path)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)


def main() -> None:
    p = argparse.ArgumentParser(description="HTTP servers for bench_http.py")
    p.add_argument("--app", choices=sorted(FACTORIES), required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--profile", metavar="PATH", help="profile between SIGUSR1 and SIGUSR2")
    p.add_argument("--profiler", choices=["cprofile", "sample"], default="cprofile")
    args = p.parse_args()
    level = ServerSettings().log_level.lower()
    common: dict[str, Any] = {"host": HOST, "port": args.port, "log_level": level}
    if args.workers > 1:
        if args.profile:
            p.error("--profile needs one worker")
        target = f"{os.path.splitext(os.path.basename(__file__))[0]}:{args.app}_app"
        uvicorn.run(target, factory=True, workers=args.workers, log_config=None, **common)
        return
    if args.profile:
        install_profiler(args.profile, args.profiler)
    uvicorn.run(FACTORIES[args.app](), log_config=None, **common)


if __name__ == "__main__":
    main()
