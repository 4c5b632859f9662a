"""A database where a low-privilege role has planted objects around a side-effect function,
for the guard tests (tests/test_guard_objects.py): the server's role is a superuser, so only
the guard stands between a read and the planted code.

The side effect, `planter.effect()`, is marked IMMUTABLE and does what a read-only transaction
still allows: it consumes a transaction ID and resets the database's statistics. A foreign table
reads a remote view whose function advances a sequence on the other side. `state()` reads all
of it, and `burnt_xids()` finds transaction IDs that a rolled-back transaction consumed.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import asyncpg
from eventually import eventually

# {role}: the planter's role name (roles are cluster-wide: unique per run).
PLANT = """
CREATE ROLE {role} NOLOGIN;
GRANT CREATE, USAGE ON SCHEMA public TO {role};  -- legacy public CREATE rights
CREATE SCHEMA planter AUTHORIZATION {role};
SET ROLE {role};

CREATE FUNCTION planter.effect() RETURNS boolean IMMUTABLE LANGUAGE sql AS $$
    SELECT pg_catalog.pg_current_xact_id() IS NOT NULL
       AND pg_catalog.pg_stat_reset()::text IS NOT NULL $$;

-- an operator, also reachable unqualified (public is on the search path)
CREATE FUNCTION planter.op_fn(int, int) RETURNS boolean IMMUTABLE LANGUAGE sql
    AS 'SELECT planter.effect() AND $1 = $2';
CREATE OPERATOR public.=== (LEFTARG = int, RIGHTARG = int, FUNCTION = planter.op_fn);

-- a sort order: the DBA installs it as the type's default operator class (below)
CREATE TYPE planter.level AS ENUM ('low', 'mid', 'high');
CREATE FUNCTION planter.level_cmp(planter.level, planter.level) RETURNS int IMMUTABLE
    LANGUAGE sql AS 'SELECT pg_catalog.enum_cmp($1, $2)';
CREATE FUNCTION planter.level_lt(planter.level, planter.level) RETURNS boolean IMMUTABLE
    LANGUAGE sql AS 'SELECT pg_catalog.enum_lt($1, $2)';
CREATE FUNCTION planter.level_le(planter.level, planter.level) RETURNS boolean IMMUTABLE
    LANGUAGE sql AS 'SELECT pg_catalog.enum_le($1, $2)';
CREATE FUNCTION planter.level_eq(planter.level, planter.level) RETURNS boolean IMMUTABLE
    LANGUAGE sql AS 'SELECT pg_catalog.enum_eq($1, $2)';
CREATE FUNCTION planter.level_ge(planter.level, planter.level) RETURNS boolean IMMUTABLE
    LANGUAGE sql AS 'SELECT pg_catalog.enum_ge($1, $2)';
CREATE FUNCTION planter.level_gt(planter.level, planter.level) RETURNS boolean IMMUTABLE
    LANGUAGE sql AS 'SELECT pg_catalog.enum_gt($1, $2)';
CREATE OPERATOR planter.<<< (LEFTARG = planter.level, RIGHTARG = planter.level,
                             FUNCTION = planter.level_lt);
CREATE OPERATOR planter.<<= (LEFTARG = planter.level, RIGHTARG = planter.level,
                             FUNCTION = planter.level_le);
CREATE OPERATOR planter.=~= (LEFTARG = planter.level, RIGHTARG = planter.level,
                             FUNCTION = planter.level_eq);
CREATE OPERATOR planter.>>= (LEFTARG = planter.level, RIGHTARG = planter.level,
                             FUNCTION = planter.level_ge);
CREATE OPERATOR planter.>>> (LEFTARG = planter.level, RIGHTARG = planter.level,
                             FUNCTION = planter.level_gt);
CREATE TABLE planter.levels (id int PRIMARY KEY, lvl planter.level NOT NULL);
INSERT INTO planter.levels VALUES (1, 'high'), (2, 'low'), (3, 'mid');

-- an explicit cast, and an implicit one
CREATE TYPE planter.boxed AS (v int);
CREATE FUNCTION planter.to_boxed(int) RETURNS planter.boxed IMMUTABLE LANGUAGE sql
    AS 'SELECT ROW($1)::planter.boxed WHERE planter.effect()';
CREATE CAST (int AS planter.boxed) WITH FUNCTION planter.to_boxed(int);
CREATE TYPE planter.grade AS ENUM ('low', 'high');
CREATE FUNCTION planter.to_grade(int) RETURNS planter.grade IMMUTABLE LANGUAGE sql
    AS $$SELECT CASE WHEN planter.effect() THEN 'low'::planter.grade END$$;
CREATE CAST (int AS planter.grade) WITH FUNCTION planter.to_grade(int) AS IMPLICIT;

-- a domain CHECK
CREATE FUNCTION planter.check_fn(int) RETURNS boolean IMMUTABLE LANGUAGE sql
    AS 'SELECT planter.effect() AND $1 > 0';
CREATE DOMAIN planter.pos AS int CHECK (planter.check_fn(VALUE));

-- a range type whose subtype_diff the planner calls to estimate selectivity
CREATE FUNCTION planter.diff(float8, float8) RETURNS float8 IMMUTABLE LANGUAGE sql
    AS 'SELECT CASE WHEN planter.effect() THEN $1 - $2 END';
CREATE TYPE planter.floatrange AS RANGE (subtype = float8, subtype_diff = planter.diff);

-- an operator that a built-in one of the same signature hides (PostgreSQL never picks it)
CREATE OPERATOR public.= (LEFTARG = int, RIGHTARG = int, FUNCTION = planter.op_fn);

-- an index expression: the planner folds it when it opens the table (the function is
-- harmless while the index is built, then replaced)
CREATE FUNCTION planter.index_fn() RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT 0';
CREATE TABLE planter.indexed (id int);
CREATE INDEX ON planter.indexed ((id + planter.index_fn()));
CREATE OR REPLACE FUNCTION planter.index_fn() RETURNS int IMMUTABLE LANGUAGE sql
    AS 'SELECT CASE WHEN planter.effect() THEN 0 END';

-- an effectful function marked STABLE, and one named like a built-in
CREATE FUNCTION planter.liar() RETURNS boolean STABLE LANGUAGE sql AS 'SELECT planter.effect()';
CREATE FUNCTION public.lower(int) RETURNS text IMMUTABLE LANGUAGE sql
    AS 'SELECT CASE WHEN planter.effect() THEN $1::text END';

-- the same kinds, built only from safe parts
CREATE OPERATOR planter.#+# (LEFTARG = int, RIGHTARG = int, FUNCTION = pg_catalog.int4pl);
CREATE DOMAIN planter.safe_pos AS int CHECK (VALUE > 0);
CREATE TYPE planter.safe_boxed AS (v int);
CREATE CAST (text AS planter.safe_boxed) WITH INOUT;
CREATE TYPE planter.safe_range AS RANGE (subtype = int4);
CREATE TABLE planter.safe_things (id int PRIMARY KEY, p planter.safe_pos, r planter.safe_range);
INSERT INTO planter.safe_things VALUES (1, 5, '[1,3)'), (2, 7, '[2,9)');
CREATE VIEW planter.safe_view AS
    SELECT t.id, t.p, t.r, t.id OPERATOR(planter.#+#) 1 AS next_id,
           planter.safe_range(t.id, t.id + 2) AS span
    FROM planter.safe_things t;
RESET ROLE;

-- A DBA installs the planter's sort order as its type's default, then the planter changes it.
CREATE OPERATOR CLASS planter.level_ops DEFAULT FOR TYPE planter.level USING btree AS
    OPERATOR 1 planter.<<<, OPERATOR 2 planter.<<=, OPERATOR 3 planter.=~=,
    OPERATOR 4 planter.>>=, OPERATOR 5 planter.>>>,
    FUNCTION 1 planter.level_cmp(planter.level, planter.level);
SET ROLE {role};
CREATE OR REPLACE FUNCTION planter.level_cmp(planter.level, planter.level) RETURNS int IMMUTABLE
    LANGUAGE sql AS 'SELECT CASE WHEN planter.effect() THEN pg_catalog.enum_cmp($1, $2) END';
CREATE OR REPLACE FUNCTION planter.level_gt(planter.level, planter.level) RETURNS boolean
    IMMUTABLE LANGUAGE sql AS 'SELECT planter.effect() AND pg_catalog.enum_gt($1, $2)';
RESET ROLE;

-- Objects the server's (superuser) side owns, that use planted ones.
-- Autovacuum would analyze it as its owner (a superuser) and run the planted subtype_diff at a
-- moment of its own choosing, inside some test's "nothing changed" window.
CREATE TABLE public.spans (id int PRIMARY KEY, r planter.floatrange)
    WITH (autovacuum_enabled = off);
CREATE FUNCTION public.grade_label(planter.grade) RETURNS text IMMUTABLE LANGUAGE sql
    AS 'SELECT $1::text';
CREATE FUNCTION public.trusted_equal(int, int) RETURNS boolean STABLE LANGUAGE sql
    AS 'SELECT $1 === $2';
CREATE FUNCTION public.trusted_atomic(int) RETURNS boolean STABLE LANGUAGE sql
    BEGIN ATOMIC SELECT $1 === 1; END;
CREATE FUNCTION public.trusted_liar() RETURNS text STABLE LANGUAGE sql
    AS 'SELECT pg_catalog.pg_stat_reset()::text';
CREATE FUNCTION public.xid_wrapper() RETURNS xid8 STABLE LANGUAGE sql
    AS 'SELECT pg_catalog.txid_current()::text::xid8';
CREATE FUNCTION public.my_xid() RETURNS xid8 STABLE LANGUAGE internal AS 'pg_current_xact_id';
CREATE FUNCTION public.trusted_double(int) RETURNS int IMMUTABLE LANGUAGE sql
    AS 'SELECT $1 * 2';
CREATE FUNCTION public.trusted_plpgsql(n int) RETURNS boolean STABLE LANGUAGE plpgsql AS $$
DECLARE ok boolean;
BEGIN
    ok := n > 0 AND planter.effect();
    RETURN ok;
END $$;
CREATE FUNCTION public.trusted_dynamic(q text) RETURNS bigint STABLE LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
    EXECUTE q INTO n;
    RETURN n;
END $$;
CREATE FUNCTION public.trusted_safe_plpgsql(n int) RETURNS int IMMUTABLE LANGUAGE plpgsql AS $$
BEGIN
    IF n > 0 THEN RETURN n * 3; END IF;
    RETURN 0;
END $$;

-- Views over each kind, planted.
SET ROLE {role};
CREATE VIEW planter.v_operator AS SELECT 1 === 2 AS x;
CREATE VIEW planter.v_cast AS SELECT (1::planter.boxed).v AS x;
CREATE VIEW planter.v_domain AS SELECT 1::planter.pos AS x;
CREATE VIEW planter.v_range AS SELECT planter.floatrange(1, 2) AS x;
CREATE VIEW planter.v_body AS SELECT public.trusted_equal(1, 2) AS x;
CREATE VIEW planter.v_xid AS SELECT pg_catalog.pg_current_xact_id() AS x;
CREATE VIEW planter.v_sorted AS SELECT id, lvl FROM planter.levels ORDER BY lvl;
CREATE VIEW planter.v_view AS SELECT x FROM planter.v_operator;
RESET ROLE;
"""

# Filled after PLANT: runs the range's subtype_diff while ANALYZE builds statistics.
SPANS = """
INSERT INTO public.spans SELECT g, planter.floatrange(g, g + 10) FROM generate_series(1, 500) g;
ANALYZE public.spans;
"""

# The remote side of a postgres_fdw loopback: a view whose function writes.
# A trusted extension the planter installs (it then owns it) and adds its own function to.
EXTENSION = """
DO $$ BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO {role}', current_database()); END $$;
SET ROLE {role};
CREATE EXTENSION pg_trgm SCHEMA public;
CREATE FUNCTION planter.member() RETURNS boolean IMMUTABLE LANGUAGE sql
    AS 'SELECT planter.effect()';
ALTER EXTENSION pg_trgm ADD FUNCTION planter.member();
RESET ROLE;
"""

# tablefunc's crosstab runs the SQL text it is given: checked when it is a constant.
TABLEFUNC = """
CREATE EXTENSION tablefunc SCHEMA public;
SET ROLE {role};
CREATE VIEW planter.v_crosstab AS
    SELECT * FROM public.crosstab('SELECT ''r''::text, ''c''::text, (1 === 2)::text')
    AS ct(r text, c text);
RESET ROLE;
"""

REMOTE = """
CREATE SEQUENCE public.remote_effects;
CREATE TABLE public.written (n bigint);
CREATE FUNCTION public.write_row() RETURNS bigint VOLATILE LANGUAGE sql
    AS $$INSERT INTO public.written VALUES (nextval('public.remote_effects')) RETURNING n$$;
CREATE VIEW public.trap AS SELECT public.write_row() AS n;
CREATE TABLE public.plain (id int PRIMARY KEY);
INSERT INTO public.plain VALUES (1), (2);
"""

FOREIGN_WRAPPER = """
CREATE EXTENSION postgres_fdw;
CREATE SERVER loopback FOREIGN DATA WRAPPER postgres_fdw OPTIONS ({server});
CREATE USER MAPPING FOR PUBLIC SERVER loopback OPTIONS ({mapping});
"""
# Where postgres_fdw is not installed (the pgserver wheel's PostgreSQL 16 ships none), a
# wrapper without a handler: the foreign tables exist in the catalog as the guard sees them,
# only reading them fails.
NO_HANDLER_WRAPPER = """
CREATE FOREIGN DATA WRAPPER loopback_fdw;
CREATE SERVER loopback FOREIGN DATA WRAPPER loopback_fdw;
"""
FOREIGN = """
GRANT USAGE ON FOREIGN SERVER loopback TO {role};
SET ROLE {role};
CREATE FOREIGN TABLE planter.remote_trap (n bigint)
    SERVER loopback OPTIONS (schema_name 'public', table_name 'trap');
CREATE FOREIGN TABLE planter.remote_plain (id int)
    SERVER loopback OPTIONS (schema_name 'public', table_name 'plain');
CREATE VIEW planter.v_remote AS SELECT n FROM planter.remote_trap;
CREATE TABLE planter.parted (n bigint) PARTITION BY RANGE (n);
CREATE FOREIGN TABLE planter.parted_remote PARTITION OF planter.parted
    FOR VALUES FROM (MINVALUE) TO (MAXVALUE)
    SERVER loopback OPTIONS (schema_name 'public', table_name 'trap');
RESET ROLE;
"""

# The planter's tables, views, types and operators, handed to the DBA (the bed's
# superuser): what a DBA builds from planted parts, so that the walk below them decides. A
# relation or type the planter still owns is refused as a whole (its owner can add code to it
# at any moment, see closure._Walk.check); OWNED makes one of each.
HANDOVER = """
DO $$
DECLARE r record;
BEGIN
  FOR r IN SELECT c.oid::pg_catalog.regclass AS name, c.relkind FROM pg_catalog.pg_class c
           WHERE c.relnamespace = 'planter'::pg_catalog.regnamespace
             AND c.relkind IN ('r', 'p', 'v', 'm', 'f') LOOP
    EXECUTE pg_catalog.format('ALTER %s %s OWNER TO CURRENT_USER',
      CASE r.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
                     WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END, r.name);
  END LOOP;
  FOR r IN SELECT o.oid::pg_catalog.regoperator AS name FROM pg_catalog.pg_operator o
           JOIN pg_catalog.pg_roles a ON a.oid = o.oprowner
           WHERE a.rolname = '{role}' LOOP
    EXECUTE pg_catalog.format('ALTER OPERATOR %s OWNER TO CURRENT_USER', r.name);
  END LOOP;
  -- (not arrays, nor tables' row types or multiranges: they follow their owners)
  FOR r IN SELECT t.oid::pg_catalog.regtype AS name, t.typtype FROM pg_catalog.pg_type t
           LEFT JOIN pg_catalog.pg_class c ON c.oid = t.typrelid
           WHERE t.typnamespace = 'planter'::pg_catalog.regnamespace
             AND t.typtype IN ('d', 'e', 'r', 'c') AND (c.relkind IS NULL OR c.relkind = 'c')
  LOOP
    EXECUTE pg_catalog.format('ALTER %s %s OWNER TO CURRENT_USER',
      CASE r.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END, r.name);
  END LOOP;
  -- A multirange follows its range from PostgreSQL 16 on (which then refuses to alter it
  -- alone); on 15 it keeps its first owner unless altered itself.
  FOR r IN SELECT t.oid::pg_catalog.regtype AS name FROM pg_catalog.pg_type t
           WHERE t.typnamespace = 'planter'::pg_catalog.regnamespace AND t.typtype = 'm'
             AND t.typowner <> (SELECT u.oid FROM pg_catalog.pg_roles u
                                WHERE u.rolname = CURRENT_USER) LOOP
    EXECUTE pg_catalog.format('ALTER TYPE %s OWNER TO CURRENT_USER', r.name);
  END LOOP;
END $$;
"""
OWNED = """
SET ROLE {role};
CREATE TABLE planter.own_table (id int PRIMARY KEY);
INSERT INTO planter.own_table VALUES (1);
CREATE VIEW planter.own_view AS SELECT 1 AS x;
CREATE DOMAIN planter.own_pos AS int CHECK (VALUE > 0);
CREATE TYPE planter.own_boxed AS (v int);
CREATE TYPE planter.own_mood AS ENUM ('calm', 'cross');
CREATE OPERATOR planter.#-# (LEFTARG = int, RIGHTARG = int, FUNCTION = pg_catalog.int4mi);
RESET ROLE;
"""

STATE = """
SELECT (SELECT stats_reset FROM pg_catalog.pg_stat_database
        WHERE datname = pg_catalog.current_database())::text AS stats_reset,
       (SELECT md5(string_agg(l::text, ',' ORDER BY id)) FROM planter.levels l) AS levels,
       (SELECT md5(string_agg(t::text, ',' ORDER BY id)) FROM planter.safe_things t) AS things
"""
REMOTE_STATE = """
SELECT (SELECT last_value::text || is_called::text FROM public.remote_effects) AS remote_sequence,
       (SELECT count(*) FROM public.written) AS remote_rows
"""
NEXT_XID = "SELECT pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::text::bigint"


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def fdw_options(dsn: str, remote_db: str) -> tuple[str, str]:
    """postgres_fdw server and user-mapping options reaching the server behind `dsn`."""
    parts = urlsplit(dsn)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    host = query.get("host") or parts.hostname or "localhost"
    port = query.get("port") or str(parts.port or 5432)
    server = f"host {_literal(host)}, port {_literal(port)}, dbname {_literal(remote_db)}"
    # password_required off (a superuser's option): the planter's view reaches the foreign
    # table as the planter, and PostgreSQL 15 asks a non-superuser's mapping for a password.
    mapping = f"user {_literal(unquote(parts.username or 'postgres'))}, password_required 'false'"
    if parts.password:
        mapping += f", password {_literal(unquote(parts.password))}"
    return server, mapping


@dataclass
class Bed:
    dsn: str
    remote_dsn: str
    role: str
    xml: bool  # the server was built with libxml (the *_to_xml functions work)
    version: int  # PostgreSQL major version
    extension: bool  # the planter could install pg_trgm (a trusted extension)
    tablefunc: bool  # the server has tablefunc
    fdw: bool = True  # postgres_fdw reaches the remote database (else foreign tables only exist)

    async def state(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for dsn, sql in ((self.dsn, STATE), (self.remote_dsn, REMOTE_STATE)):
            conn = await asyncpg.connect(dsn)
            try:
                row = await conn.fetchrow(sql)
            finally:
                await conn.close()
            assert row is not None
            out.update(dict(row))
        return out

    async def next_xid(self) -> int:
        """The next transaction ID once every session of the server under test is idle (its
        rolled-back transactions are over), so that all XIDs below it are decided."""
        return await next_xid_when_idle(self.dsn)

    async def burnt_xids(self, since: int) -> list[int]:
        return await burnt_xids(self.dsn, since)


async def burnt_xids(dsn: str, since: int) -> list[int]:
    """Transaction IDs from `since` on that were assigned and not committed, once the server
    under test is idle: only the server rolls back in the test beds (every other session
    there commits or assigns none)."""
    until = await next_xid_when_idle(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT x FROM generate_series($1::bigint, $2::bigint - 1) x "
            "WHERE pg_catalog.pg_xact_status(x::text::xid8) <> 'committed'",
            since,
            until,
        )
    finally:
        await conn.close()
    return [r["x"] for r in rows]


def planter_role() -> str:
    return f"guard_planter_{secrets.token_hex(4)}"


async def next_xid_when_idle(dsn: str) -> int:
    """The next transaction ID once every session of the server under test is idle (its
    rolled-back transactions are over), so that all XIDs below it are decided."""
    conn = await asyncpg.connect(dsn)
    try:

        async def idle() -> bool:
            busy = await conn.fetchval(
                "SELECT count(*) FROM pg_catalog.pg_stat_activity "
                "WHERE application_name = 'pg-mcp-server' AND state <> 'idle'"
            )
            return not busy

        await eventually(idle, what="the server's sessions idle", seconds=5, interval=0.01)
        value: int = await conn.fetchval(NEXT_XID)
        return value
    finally:
        await conn.close()
