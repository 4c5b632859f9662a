"""Paged results in Redis or Valkey (`MCP_RESULT_STORE=redis://...`), shared by replicas.

Several replicas behind a load balancer point at one Redis: a result put by one is paged by
any. The budgets are the memory store's, kept by Redis itself and by two Lua scripts that run
atomically there (public `register_script` API), one round trip each:

- a page read (`page`) checks the owner, returns the page and the page count, and renews the
  result's idle time (its key's TTL) and its place in the least-recently-read order;
- a put (`put`) first lets go of entries whose idle time has passed, then evicts until the
  new one fits both `max_results` and `max_bytes` (page bytes summed, what the memory store
  counts too), then holds it. Each eviction takes the least recently read result of the owner
  that holds the most (results when the count is over, else bytes; the new result counted as
  its owner's), as the memory store does: one caller cannot evict another's fair share.

Keys, in the database the URL names (`redis://host:6379/2` is database 2):
`pgmcp:result:<id>` (a hash: owner digest, page count, size, one field per page; TTL = idle
time), `pgmcp:results:lru` (ids by last read), `pgmcp:results:sizes` (id -> bytes),
`pgmcp:results:bytes` (their sum), `pgmcp:results:owners` (id -> owner digest),
`pgmcp:results:use` (owner digest -> bytes) and `pgmcp:results:lru:<owner digest>` (that
owner's ids by last read). The budgets hold per database: deployments sharing one
Redis take a database each, replicas of one deployment the same. Every key has a TTL renewed by
each use, so a deployment that stops leaves nothing behind once idle. Redis Cluster is not
supported (the scripts touch keys of several slots).

The owner is kept as a SHA-256 digest and compared in the script; a page of a result held for
another owner, unknown, expired or evicted is the same `ResultExpiredError`, and a read by
another owner renews nothing.

A store that cannot be reached: `check` (run once before serving, by results.check_store)
raises `StoreUnavailable` and the server does not start (exit code 2): a wrong host, password
or TLS setting does not heal by itself, and a replica that started without its store would
answer every big result without paging while looking healthy. After start, `put` raises
`StoreUnavailable` (the caller answers the first page without a cursor) and `page` raises
`ResultExpiredError` whose suggestion names the trouble; one log line when the store fails,
one when it answers again. The client reconnects at the next call, so paging comes back with
the store. Messages and logs name the store as `redis://host:port/db`, never its password.

Needs Redis 5 or newer (scripts replicated by their effects, so `TIME` may precede writes) or
Valkey; tested with Redis 7.0.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Sequence
from urllib.parse import parse_qs, unquote, urlsplit

from redis import exceptions as redis_errors
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from pg_mcp_server.errors import ResultExpiredError
from pg_mcp_server.results.memory import expired
from pg_mcp_server.results.store import Limits, StoreUnavailable

logger = logging.getLogger(__name__)

RESULT_PREFIX = "pgmcp:result:"
LRU_KEY = "pgmcp:results:lru"
SIZES_KEY = "pgmcp:results:sizes"
BYTES_KEY = "pgmcp:results:bytes"
OWNERS_KEY = "pgmcp:results:owners"
USE_KEY = "pgmcp:results:use"

# Bounds on a store that does not answer (the URL's socket_timeout / socket_connect_timeout
# win): a page read waits at most this long, never forever.
CONNECT_TIMEOUT_S = 2.0
TIMEOUT_S = 5.0

# Shared by both scripts. `now` is Redis' clock in microseconds, so replicas whose clocks
# differ agree on the order; a score is never below the newest one, so two uses within the
# same microsecond still keep their order. `forget` lets go of a result and its share of the
# budget, its owner's too. Numbers go to Redis through string.format('%d'): Lua's own
# conversion keeps 14 digits, fewer than a time in microseconds has.
_COMMON = """
local lru, sizes, total, owners, use = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local prefix = ARGV[1]
local function owned(digest) return lru .. ':' .. digest end
local function forget(victim)
  redis.call('ZREM', lru, victim)
  local held = redis.call('HGET', sizes, victim)
  if held then
    redis.call('HDEL', sizes, victim)
    redis.call('DECRBY', total, held)
  end
  local digest = redis.call('HGET', owners, victim)
  if digest then
    redis.call('HDEL', owners, victim)
    redis.call('ZREM', owned(digest), victim)
    if held and redis.call('HINCRBY', use, digest, -tonumber(held)) <= 0 then
      redis.call('HDEL', use, digest)
    end
  end
  redis.call('DEL', prefix .. victim)
end
local function next_score()
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local top = redis.call('ZRANGE', lru, -1, -1, 'WITHSCORES')
  if top[2] and tonumber(top[2]) >= now then now = tonumber(top[2]) + 1 end
  return now
end
local function renew(idle_ms, key, digest)
  for _, k in ipairs({key, lru, sizes, total, owners, use, owned(digest)}) do
    redis.call('PEXPIRE', k, idle_ms)
  end
end
"""

# KEYS: lru, sizes, total, owners, use; ARGV: prefix, id, owner digest, size, max bytes, max
# results, idle ms, pages... Returns how many results were evicted to make room.
_PUT = (
    _COMMON
    + """
local id, owner, size = ARGV[2], ARGV[3], tonumber(ARGV[4])
local max_bytes, max_results, idle_ms = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local score = next_score()
-- Results not read within the idle time are gone already (their TTL ran out): their entries
-- go too, before anything is evicted for room.
local cutoff = string.format('%d', score - idle_ms * 1000)
for _, victim in ipairs(redis.call('ZRANGEBYSCORE', lru, '-inf', cutoff)) do forget(victim) end
-- The least recently read result of the owner that uses the most (results, by_count, else
-- bytes; `adding` counted as this put's owner's); of owners that use as much, the one read
-- longest ago. Without owners (an index that lost them), the least recently read of all.
local function victim(adding, by_count)
  local best, most, age = nil, -1, 0
  local all = redis.call('HGETALL', use)
  for i = 1, #all, 2 do
    local oldest = redis.call('ZRANGE', owned(all[i]), 0, 0, 'WITHSCORES')
    if oldest[1] then
      local amount = tonumber(all[i + 1])
      if by_count then amount = redis.call('ZCARD', owned(all[i])) end
      if all[i] == owner then amount = amount + adding end
      if amount > most or (amount == most and tonumber(oldest[2]) < age) then
        best, most, age = oldest[1], amount, tonumber(oldest[2])
      end
    end
  end
  return best or redis.call('ZRANGE', lru, 0, 0)[1]
end
local evicted = 0
while true do
  local gone
  if redis.call('ZCARD', lru) >= max_results then
    gone = victim(1, true)
  elseif tonumber(redis.call('GET', total) or '0') + size > max_bytes then
    gone = victim(size, false)
  end
  if not gone then break end
  forget(gone)
  evicted = evicted + 1
end
-- The budget first, the key with its TTL next: a script cut short (Redis out of memory
-- mid-way keeps what it wrote) leaves at worst an entry that counts bytes no key holds, until
-- the idle time passes, never a key outside the budget or without a TTL.
redis.call('ZADD', lru, string.format('%d', score), id)
redis.call('HSET', sizes, id, size)
redis.call('INCRBY', total, size)
redis.call('HSET', owners, id, owner)
redis.call('HINCRBY', use, owner, size)
redis.call('ZADD', owned(owner), string.format('%d', score), id)
local key = prefix .. id
redis.call('HSET', key, 'o', owner, 'n', #ARGV - 7, 's', size)
renew(idle_ms, key, owner)
for i = 8, #ARGV do redis.call('HSET', key, tostring(i - 8), ARGV[i]) end
return evicted
"""
)

# KEYS: lru, sizes, total, owners, use; ARGV: prefix, id, owner digest, page index, idle ms.
# Returns {page, page count}, or nil when the page is not held for this owner.
_PAGE = (
    _COMMON
    + """
local id, owner, idle_ms = ARGV[2], ARGV[3], tonumber(ARGV[5])
local key = prefix .. id
local got = redis.call('HMGET', key, 'o', 'n', 's', ARGV[4])
if not got[1] then
  -- Expired, evicted (also by Redis' own maxmemory policy) or never held: its entry, if any,
  -- gives its bytes back to the budget.
  if redis.call('ZSCORE', lru, id) then forget(id) end
  return false
end
if got[1] ~= owner or not got[4] then return false end
-- An entry the index lost (evicted by Redis under memory pressure) is counted again.
local score = string.format('%d', next_score())
if redis.call('ZADD', lru, score, id) == 1 then
  redis.call('HSET', sizes, id, got[3])
  redis.call('INCRBY', total, got[3])
  redis.call('HSET', owners, id, owner)
  redis.call('HINCRBY', use, owner, got[3])
end
redis.call('ZADD', owned(owner), score, id)
renew(idle_ms, key, owner)
return {got[4], got[2]}
"""
)

_KEYS = [LRU_KEY, SIZES_KEY, BYTES_KEY, OWNERS_KEY, USE_KEY]


def describe(url: str) -> str:
    """`url` as messages and logs may show it: scheme, host, port and database; no user,
    password or query (redis-py takes a password from the query too)."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    try:
        port = str(parts.port or 6379)
    except ValueError:
        port = "?"
    database = (parse_qs(parts.query).get("db") or [parts.path.strip("/") or "0"])[0]
    return f"{parts.scheme}://{host}:{port}/{database}"


def trouble(exc: Exception) -> str:
    """What went wrong with the store, in words a client may see (no address, no secret)."""
    if isinstance(exc, redis_errors.AuthenticationError | redis_errors.NoPermissionError):
        return "it refused the server's login or command (check the URL's user and password)"
    if isinstance(exc, redis_errors.TimeoutError):
        return "it did not answer in time"
    if isinstance(exc, redis_errors.BusyLoadingError):
        return "it is loading its data after a restart"
    if isinstance(exc, redis_errors.ConnectionError):
        return "it cannot be reached"
    if isinstance(exc, redis_errors.OutOfMemoryError):
        return "it is out of memory (its maxmemory is reached)"
    if isinstance(exc, redis_errors.ReadOnlyError):
        return "it is a read-only replica"
    return f"it answered an error ({type(exc).__name__})"


def _digest(owner: str) -> str:
    return hashlib.sha256(owner.encode()).hexdigest()


class RedisResultStore:
    """`ResultStore` over Redis or Valkey. The constructor does no I/O (the client connects
    at its first command); `check` (or `open`, which does both) asks the store to answer."""

    def __init__(self, url: str, limits: Limits) -> None:
        """Raises ValueError for a URL that is not redis:// or rediss:// or that the client
        cannot read (the message shows the URL without its password)."""
        self.where = describe(url)
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            raise ValueError(f"not a redis:// or rediss:// URL: {self.where}")
        secret = parts.password
        self._secrets = [s for s in {secret, unquote(secret or "")} if s]
        try:
            self._client = Redis.from_url(
                url,
                socket_connect_timeout=CONNECT_TIMEOUT_S,
                socket_timeout=TIMEOUT_S,
                # One reconnection hides a connection the store closed while idle; more
                # would only make a page wait longer for a store that is down.
                retry=Retry(ExponentialBackoff(cap=0.2, base=0.05), 1),
            )
        except ValueError as exc:
            raise ValueError(f"{self.where}: {self._scrub(str(exc))}") from None
        self._limits = limits
        self._idle_ms = max(1, round(limits.idle_seconds * 1000))
        self._put = self._client.register_script(_PUT)
        self._page = self._client.register_script(_PAGE)
        self._failing = False

    @classmethod
    async def open(cls, url: str, limits: Limits) -> RedisResultStore:
        """A store at `url` that answered `check`."""
        store = cls(url, limits)
        try:
            await store.check()
        except StoreUnavailable:
            await store.close()
            raise
        return store

    async def check(self) -> None:
        """Ask the store to answer (PING) and to take the scripts, so that a wrong address,
        password or TLS setting shows at start. Raises `StoreUnavailable` naming the store
        (without its password) and the trouble."""
        try:
            await self._client.ping()
            for script in (_PUT, _PAGE):
                await self._client.script_load(script)
        except redis_errors.RedisError as exc:
            raise StoreUnavailable(
                f"cannot use the result store at {self.where}: {trouble(exc)} "
                f"({self._scrub(str(exc))})"
            ) from None
        logger.info("result store: %s", self.where)

    async def put(self, owner: str, pages: Sequence[bytes]) -> str:
        size = sum(len(page) for page in pages)
        if not pages:
            raise ValueError("a result has at least one page")
        if size > self._limits.max_bytes:
            raise ValueError(f"{size} bytes is over the store's {self._limits.max_bytes}")
        result_id = secrets.token_urlsafe(24)
        args: list[str | int | bytes] = [
            RESULT_PREFIX,
            result_id,
            _digest(owner),
            size,
            self._limits.max_bytes,
            self._limits.max_results,
            self._idle_ms,
            *pages,
        ]
        try:
            await self._put(keys=_KEYS, args=args)
        except redis_errors.RedisError as exc:
            self._failed(exc)
            raise StoreUnavailable(
                f"the shared result store could not hold the result: {trouble(exc)}"
            ) from None
        self._answered()
        return result_id

    async def page(self, owner: str, result_id: str, index: int) -> tuple[bytes, int]:
        args = [RESULT_PREFIX, result_id, _digest(owner), str(index), str(self._idle_ms)]
        try:
            got = await self._page(keys=_KEYS, args=args)
        except redis_errors.RedisError as exc:
            self._failed(exc)
            raise ResultExpiredError(
                "This result cannot be read now: the shared result store is unavailable.",
                suggestion=(
                    f"The result store (Redis) failed: {trouble(exc)}. Run the query again; "
                    "its answer says whether paging is available."
                ),
            ) from None
        self._answered()
        if got is None:
            raise expired()
        page, count = got
        return bytes(page), int(count)

    async def close(self) -> None:
        await self._client.aclose()

    def _scrub(self, text: str) -> str:
        """`text` (a driver's message) bounded, and without the password if it were in it."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text[:200]

    def _failed(self, exc: Exception) -> None:
        """Log the first failure of a run of them (one line, not one per call of an outage)."""
        if not self._failing:
            self._failing = True
            logger.warning(
                "result store %s failed: %s (%s: %s); paging is unavailable until it answers",
                self.where,
                trouble(exc),
                type(exc).__name__,
                self._scrub(str(exc)),
            )

    def _answered(self) -> None:
        if self._failing:
            self._failing = False
            logger.info("result store %s answers again; paging is available", self.where)
