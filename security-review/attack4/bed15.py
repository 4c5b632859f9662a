"""Start one embedded PostgreSQL for the attack scripts; write its admin DSN to attack/.dsn."""
import asyncio
import signal
from pathlib import Path

from pgbed import start_server  # run with PG_TEST_SERVER=pg15; writes security-review/attack4/.dsn15


async def main() -> None:
    srv = start_server()
    Path(__file__).with_name(".dsn15").write_text(srv.admin_dsn)
    print(srv.admin_dsn, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    await stop.wait()
    srv.close()

if __name__ == "__main__":
    asyncio.run(main())
