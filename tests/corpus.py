"""The query corpus: attacks that must be refused (or stay harmless) and legitimate reads that
a naive keyword filter gets wrong, for execute_query, explain_query and get_sample_rows.

`SETUP` builds the database the cases run against (tests/test_query_corpus.py creates it once
per module). Names the cases rely on:

- ``canary`` (50 rows, serial ``canary_id_seq``) and the sequence ``corpus_seq``: nothing may
  change them;
- the session ``VICTIM`` (an idle connection the test module keeps open): nothing may
  terminate it;
- ``PWNED``: a server-side path nothing may write to (COPY ... TO, lo_export);
- ``ledger``: columns named like SQL keywords, an enum, jsonb, arrays, tsvector, a tree;
- functions, a view, an aggregate, an operator and a domain whose *definitions* hide side
  effects (the ``owner_objects`` family): the caller names only harmless-looking objects.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

VICTIM = "pgmcp-corpus-victim"
PWNED = f"/tmp/pgmcp-corpus-{secrets.token_hex(4)}"
LARGE_OBJECT = 424242  # a large object that exists, so lo_export has something to write

# One statement that terminates the victim session: the probe of every "kill" attack.
KILL = (
    "SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity "
    f"WHERE application_name = '{VICTIM}'"
)
_KILL_BODY = KILL.removesuffix(" AS n").replace(" AS n FROM", " FROM")

SETUP = f"""
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE SEQUENCE corpus_seq START 100;
SELECT nextval('corpus_seq');

CREATE TABLE canary (
    id serial PRIMARY KEY,
    secret_note text NOT NULL,
    body text NOT NULL,
    last_update timestamptz NOT NULL
);
INSERT INTO canary (secret_note, body, last_update)
SELECT 'n' || g, 'row ' || g, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 hour'
FROM generate_series(1, 50) g;

CREATE TABLE ledger (
    id int PRIMARY KEY,
    parent_id int REFERENCES ledger (id),
    "update" text NOT NULL,
    "delete" boolean NOT NULL,
    "drop" int NOT NULL,
    "Select" text NOT NULL,
    "grant" text,
    insert_mode text NOT NULL,
    copy_of int,
    reset_count int NOT NULL,
    updated_by text NOT NULL,
    created_at date NOT NULL,
    last_update timestamptz NOT NULL,
    settings jsonb NOT NULL,
    tags text[] NOT NULL,
    amount numeric(10, 2) NOT NULL,
    mood mood NOT NULL,
    doc tsvector NOT NULL
);
INSERT INTO ledger
SELECT g,
       CASE WHEN g <= 3 THEN NULL ELSE (g - 1) / 3 END,
       'UPDATE ' || g,
       g % 2 = 0,
       g * 10,
       'SELECT ' || g,
       CASE WHEN g % 3 = 0 THEN NULL ELSE 'GRANT ' || g END,
       (ARRAY['append', 'replace', 'merge'])[g % 3 + 1],
       NULLIF(g - 1, 0),
       g % 4,
       (ARRAY['alice', 'bob'])[g % 2 + 1],
       date '2024-01-01' + g,
       timestamptz '2024-01-01 00:00:00+00' + g * interval '1 day',
       jsonb_build_object('mode', CASE WHEN g % 2 = 0 THEN 'set' ELSE 'reset' END, 'level', g),
       ARRAY['t' || g % 3, 'drop', 'table'],
       g * 1.25,
       (enum_range(NULL::mood))[g % 3 + 1],
       to_tsvector('english', 'update row ' || g || CASE WHEN g % 2 = 0 THEN ' deleted'
                                                          ELSE ' inserted' END)
FROM generate_series(1, 12) g;

CREATE VIEW ledger_summary AS
    SELECT mood::text AS mood, count(*) AS n, sum(amount) AS total FROM ledger GROUP BY mood;
CREATE MATERIALIZED VIEW corpus_mv AS SELECT count(*) AS n FROM canary;
CREATE FUNCTION corpus_double(int) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT $1 * 2';
CREATE PROCEDURE corpus_proc() LANGUAGE sql AS 'DELETE FROM canary';
SELECT lo_from_bytea({LARGE_OBJECT}, 'pwned');

-- A volatile function over the canary row type: refused by name in any notation.
CREATE FUNCTION canary_touch(canary) RETURNS bigint VOLATILE LANGUAGE sql
    AS $${_KILL_BODY}$$;

-- Objects whose definitions hide side effects (owner_objects family).
CREATE FUNCTION corpus_liar() RETURNS bigint STABLE LANGUAGE sql AS $${_KILL_BODY}$$;
CREATE VIEW corpus_trap AS {KILL};
CREATE FUNCTION corpus_kill_step(bigint, int) RETURNS bigint VOLATILE LANGUAGE sql
    AS $$SELECT $1 + ({_KILL_BODY})$$;
CREATE AGGREGATE corpus_total(int) (SFUNC = corpus_kill_step, STYPE = bigint, INITCOND = '0');
CREATE FUNCTION corpus_kill_op(int, int) RETURNS int VOLATILE LANGUAGE sql
    AS $$SELECT $1 + $2 + ({_KILL_BODY})::int$$;
CREATE OPERATOR ===> (LEFTARG = int, RIGHTARG = int, FUNCTION = corpus_kill_op);
CREATE FUNCTION corpus_kill_check(int) RETURNS boolean VOLATILE LANGUAGE sql
    AS $$SELECT $1 >= 0 AND ({_KILL_BODY}) >= 0$$;
CREATE DOMAIN corpus_checked AS int CHECK (corpus_kill_check(VALUE));
CREATE FUNCTION corpus_defaulted(written int DEFAULT lo_export({LARGE_OBJECT}, '{PWNED}'))
    RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT $1';
ANALYZE;
"""

# tablefunc (AdventureWorks installs it) when the server has it, else a stand-in with the same
# volatility doing the same thing: a STABLE function that runs the SQL text it is given.
TABLEFUNC = "CREATE EXTENSION tablefunc"
TABLEFUNC_STANDIN = """
CREATE FUNCTION crosstab(text) RETURNS SETOF record STABLE LANGUAGE plpgsql
    AS $$BEGIN RETURN QUERY EXECUTE $1; END$$;
CREATE FUNCTION connectby(text, text, text, text, int) RETURNS SETOF record STABLE
    LANGUAGE plpgsql AS $$BEGIN RETURN QUERY EXECUTE
    format('SELECT %s, %s, 0 FROM %s WHERE %s = %L', $2, $3, $1, $3, $4); END$$;
"""
# crosstab's source query: row name, category, value; the value kills the victim.
CROSSTAB_KILL = (
    f"crosstab($q$SELECT 'r'::text, 'c'::text, ({_KILL_BODY})::text$q$) AS ct(r text, c text)"
)
CONNECTBY_KILL = (
    "connectby('canary', 'id + ("
    + _KILL_BODY.replace("'", "''")
    + ")::int', 'id', '1', 0) AS t(id int, p int, level int)"
)

# dblink when the server has it, else a stand-in with the same name and volatility, so the
# dblink cases test the same thing everywhere.
DBLINK = "CREATE EXTENSION dblink"
DBLINK_STANDIN = """
CREATE FUNCTION dblink_exec(text, text) RETURNS text VOLATILE LANGUAGE sql AS $$SELECT 'x'$$;
CREATE FUNCTION dblink(text, text) RETURNS SETOF record VOLATILE LANGUAGE sql
    AS $$SELECT 1$$;
"""

DENIED = frozenset({"WRITE_OPERATION_DENIED"})
INVALID = frozenset({"INVALID_SQL"})
DENIED_OR_INVALID = DENIED | INVALID
PARAMETER = frozenset({"PARAMETER_ERROR"})
TIMEOUT = frozenset({"QUERY_TIMEOUT"})


@dataclass(frozen=True)
class Attack:
    """One hostile call. `codes`: the error codes that count as a refusal, or None for a call
    that must succeed (a hostile *value* stays a value) and, with `rows`, return those rows.
    `may_run`: the call may also succeed (objects whose definitions hide the side effect);
    either way, nothing may change."""

    family: str
    name: str
    tool: str
    arguments: dict[str, Any]
    codes: frozenset[str] | None = DENIED  # None: the call must succeed
    rows: list[dict[str, Any]] | None = None
    may_run: bool = False
    mentions: str | None = None  # text the error's message or context must contain

    @property
    def id(self) -> str:
        return f"{self.family}-{self.name}"


def q(family: str, name: str, sql: Any, codes: frozenset[str] | None = DENIED, **kw: Any) -> Attack:
    """An execute_query attack; keyword arguments other than Attack fields are tool args."""
    own = {k: kw.pop(k) for k in ("rows", "may_run", "mentions") if k in kw}
    return Attack(family, name, "execute_query", {"sql": sql, **kw}, codes, **own)


def ex(
    family: str, name: str, sql: str, codes: frozenset[str] | None = DENIED, **kw: Any
) -> Attack:
    """An explain_query attack."""
    own = {k: kw.pop(k) for k in ("may_run", "mentions") if k in kw}
    return Attack(family, name, "explain_query", {"sql": sql, **kw}, codes, **own)


def wc(name: str, clause: str, codes: frozenset[str] = DENIED) -> Attack:
    """A get_sample_rows.where_clause injection."""
    return Attack(
        "where_clause",
        name,
        "get_sample_rows",
        {"table_name": "canary", "where_clause": clause, "limit": 5},
        codes,
    )


ATTACKS: list[Attack] = [
    # --- statement stacking -------------------------------------------------------------
    q("stacking", "drop_table", "SELECT 1; DROP TABLE canary"),
    q("stacking", "delete", "SELECT 1; DELETE FROM canary"),
    q("stacking", "commit_drop_schema", "COMMIT; DROP SCHEMA public CASCADE"),
    q("stacking", "update_after_newline", "SELECT * FROM canary;\nUPDATE canary SET body = 'x'"),
    q("stacking", "two_selects", "SELECT 1; SELECT 2", INVALID),
    q("stacking", "truncate", "SELECT 1; TRUNCATE canary"),
    q("stacking", "only_semicolons_around_delete", ";;DELETE FROM canary;;"),
    q("stacking", "rollback_then_delete", "SELECT 1; ROLLBACK; DELETE FROM canary; COMMIT"),
    q("stacking", "insert", "SELECT 1; INSERT INTO canary (secret_note, body) VALUES ('a', 'b')"),
    q("stacking", "blank_statements_rename", "SELECT 1;\n\n\t; ALTER TABLE canary RENAME TO x"),
    q("stacking", "psql_backslash_semicolon", "SELECT 1 \\; DELETE FROM canary", DENIED_OR_INVALID),
    q(
        "stacking",
        "second_select_locks",
        "SELECT 1; SELECT pg_advisory_lock(42)",
        DENIED_OR_INVALID,
    ),
    q("stacking", "vacuum", "SELECT 1; VACUUM canary"),
    # --- transaction control ------------------------------------------------------------
    q("transaction", "commit", "COMMIT"),
    q("transaction", "rollback", "ROLLBACK"),
    q("transaction", "begin", "BEGIN"),
    q("transaction", "begin_read_write", "BEGIN READ WRITE"),
    q("transaction", "start_read_write", "START TRANSACTION READ WRITE"),
    q("transaction", "set_transaction_read_write", "SET TRANSACTION READ WRITE"),
    q(
        "transaction",
        "session_characteristics",
        "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE",
    ),
    q("transaction", "savepoint", "SAVEPOINT s1"),
    q("transaction", "release_savepoint", "RELEASE SAVEPOINT s1"),
    q("transaction", "rollback_to_savepoint", "ROLLBACK TO SAVEPOINT s1"),
    q("transaction", "end", "END"),
    q("transaction", "abort", "ABORT"),
    q("transaction", "commit_and_chain", "COMMIT AND CHAIN"),
    q("transaction", "prepare_transaction", "PREPARE TRANSACTION 'corpus'"),
    q("transaction", "commit_prepared", "COMMIT PREPARED 'corpus'"),
    q("transaction", "escape_and_write", "COMMIT; BEGIN READ WRITE; DELETE FROM canary"),
    # --- DO blocks, routines ------------------------------------------------------------
    q(
        "do_block",
        "commit_inside",
        "DO $$ BEGIN COMMIT; SET TRANSACTION READ WRITE; DELETE FROM canary; END $$",
    ),
    q("do_block", "advisory_lock", "DO $$BEGIN PERFORM pg_advisory_lock(42); END$$"),
    q(
        "do_block",
        "dynamic_sql",
        "DO LANGUAGE plpgsql $x$ BEGIN EXECUTE 'DROP TABLE canary'; END $x$",
    ),
    q("do_block", "quoted_body", "DO 'BEGIN DELETE FROM canary; END'"),
    q("do_block", "stacked", "SELECT 1; DO $$ BEGIN DELETE FROM canary; END $$"),
    q(
        "do_block",
        "dblink",
        "DO $$ BEGIN PERFORM dblink_exec('dbname=' || current_database(), "
        "'DELETE FROM canary'); END $$",
    ),
    q("do_block", "create_function", "CREATE FUNCTION pwn() RETURNS void LANGUAGE sql AS 'SELECT'"),
    q(
        "do_block",
        "replace_function",
        "CREATE OR REPLACE FUNCTION corpus_double(int) RETURNS int LANGUAGE sql AS 'SELECT 0'",
    ),
    q("do_block", "call_procedure", "CALL corpus_proc()"),
    q("do_block", "create_procedure", "CREATE PROCEDURE pwn() LANGUAGE sql AS 'SELECT 1'"),
    # --- data-modifying CTEs ------------------------------------------------------------
    q("writable_cte", "delete", "WITH d AS (DELETE FROM canary RETURNING *) SELECT * FROM d"),
    q(
        "writable_cte",
        "update",
        "WITH u AS (UPDATE canary SET body = 'x' RETURNING id) SELECT count(*) FROM u",
    ),
    q(
        "writable_cte",
        "insert",
        "WITH i AS (INSERT INTO canary (secret_note, body) VALUES ('a', 'b') RETURNING id) "
        "SELECT * FROM i",
    ),
    q(
        "writable_cte",
        "second_of_two",
        "WITH a AS (SELECT 1), b AS (DELETE FROM canary WHERE id = 1 RETURNING id) SELECT * FROM a",
    ),
    q(
        "writable_cte",
        "in_derived_table",
        "SELECT * FROM (WITH d AS (DELETE FROM canary RETURNING id) SELECT id FROM d) s",
    ),
    q(
        "writable_cte",
        "in_exists",
        "SELECT EXISTS (WITH d AS (DELETE FROM canary RETURNING 1) SELECT 1 FROM d)",
    ),
    q(
        "writable_cte",
        "merge_returning",
        "WITH m AS (MERGE INTO canary c USING (SELECT 1 AS id) s ON c.id = s.id "
        "WHEN MATCHED THEN DELETE RETURNING c.id) SELECT * FROM m",
    ),
    q(
        "writable_cte",
        "beside_recursive",
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3), "
        "d AS (DELETE FROM canary RETURNING id) SELECT * FROM r",
    ),
    q(
        "writable_cte",
        "upsert",
        "WITH i AS (INSERT INTO canary (id, secret_note, body) VALUES (1, 'a', 'b') "
        "ON CONFLICT (id) DO UPDATE SET body = 'x' RETURNING id) SELECT 1",
    ),
    # --- SELECT INTO, CREATE ... AS -----------------------------------------------------
    q("select_into", "plain", "SELECT * INTO stolen FROM canary"),
    q("select_into", "temp", "SELECT * INTO TEMP stolen FROM canary"),
    q("select_into", "unlogged", "SELECT * INTO UNLOGGED TABLE stolen FROM canary"),
    q("select_into", "after_cte", "WITH x AS (SELECT 1 AS a) SELECT a INTO stolen FROM x"),
    q("select_into", "in_union", "SELECT 1 AS a INTO TEMPORARY stolen UNION SELECT 2"),
    q("select_into", "create_table_as", "CREATE TABLE stolen AS SELECT * FROM canary"),
    q("select_into", "create_temp_table_as", "CREATE TEMP TABLE stolen AS SELECT 1"),
    q("select_into", "create_table_as_table", "CREATE TABLE stolen AS TABLE canary WITH NO DATA"),
    q("select_into", "materialized_view", "CREATE MATERIALIZED VIEW stolen AS SELECT 1"),
    q("select_into", "create_temp_table", "CREATE TEMP TABLE scratch (id int)"),
    # --- row and table locks --------------------------------------------------------------
    q("locking", "for_update", "SELECT * FROM canary FOR UPDATE"),
    q("locking", "for_no_key_update", "SELECT id FROM canary FOR NO KEY UPDATE"),
    q("locking", "for_share", "SELECT id FROM canary FOR SHARE"),
    q("locking", "for_key_share", "SELECT id FROM canary FOR KEY SHARE"),
    q("locking", "nowait", "SELECT id FROM canary WHERE id = 1 FOR UPDATE NOWAIT"),
    q("locking", "skip_locked", "SELECT id FROM canary FOR UPDATE SKIP LOCKED LIMIT 1"),
    q("locking", "of_alias", "SELECT c.id FROM canary c FOR UPDATE OF c"),
    q("locking", "in_subquery", "SELECT * FROM (SELECT id FROM canary FOR UPDATE) s"),
    q("locking", "in_in_list", "SELECT 1 WHERE 1 IN (SELECT id FROM canary FOR SHARE)"),
    q("locking", "in_cte", "WITH l AS (SELECT id FROM canary FOR UPDATE) SELECT count(*) FROM l"),
    q("locking", "lock_table", "LOCK TABLE canary IN ACCESS EXCLUSIVE MODE"),
    q("locking", "lock_short", "LOCK canary"),
    q("locking", "advisory_lock", "SELECT pg_advisory_lock(42)"),
    q("locking", "advisory_lock_shared", "SELECT pg_advisory_lock_shared(42)"),
    q("locking", "try_advisory_lock", "SELECT pg_try_advisory_lock(42)"),
    q("locking", "advisory_xact_lock", "SELECT pg_advisory_xact_lock(42)"),
    q("locking", "try_advisory_lock_pair", "SELECT pg_try_advisory_lock(1, 2)"),
    # --- COPY ---------------------------------------------------------------------------
    q("copy", "to_program", f"COPY canary TO PROGRAM 'touch {PWNED}'"),
    q("copy", "query_to_file", f"COPY (SELECT 1) TO '{PWNED}'"),
    q("copy", "from_file", "COPY canary FROM '/etc/passwd'"),
    q("copy", "from_program", "COPY canary FROM PROGRAM 'id'"),
    q("copy", "to_stdout", "COPY canary TO STDOUT"),
    q("copy", "query_to_stdout_csv", "COPY (SELECT * FROM canary) TO STDOUT WITH (FORMAT csv)"),
    q("copy", "lowercase_to_program", f"copy canary to program 'touch {PWNED}'"),
    q("copy", "stacked_to_program", f"SELECT 1; COPY canary TO PROGRAM 'touch {PWNED}'"),
    q("copy", "from_stdin", "COPY canary (body) FROM STDIN"),
    # --- side-effect functions (which ones) ---------------------------------------------
    q("side_effect_function", "pg_read_file", "SELECT pg_read_file('/etc/passwd')"),
    q("side_effect_function", "pg_read_binary_file", "SELECT pg_read_binary_file('/etc/passwd')"),
    q("side_effect_function", "pg_ls_dir", "SELECT pg_ls_dir('.')"),
    q("side_effect_function", "pg_stat_file", "SELECT pg_stat_file('/etc/passwd')"),
    q("side_effect_function", "lo_import", "SELECT lo_import('/etc/passwd')"),
    q("side_effect_function", "lo_export", f"SELECT lo_export({LARGE_OBJECT}, '{PWNED}')"),
    q(
        "side_effect_function",
        "set_config_search_path",
        "SELECT set_config('search_path', 'pwned', false)",
    ),
    q(
        "side_effect_function",
        "set_config_timeout",
        "SELECT set_config('statement_timeout', '0', false)",
    ),
    q("side_effect_function", "nextval", "SELECT nextval('corpus_seq')"),
    q("side_effect_function", "setval", "SELECT setval('corpus_seq', 1)"),
    q("side_effect_function", "pg_notify", "SELECT pg_notify('corpus', 'pwned')"),
    q("side_effect_function", "pg_terminate_backend", KILL),
    q(
        "side_effect_function",
        "pg_cancel_backend",
        KILL.replace("pg_terminate_backend", "pg_cancel_backend"),
    ),
    q(
        "side_effect_function",
        "terminate_own_backend",
        "SELECT pg_terminate_backend(pg_backend_pid())",
    ),
    q(
        "side_effect_function",
        "query_to_xml",
        "SELECT query_to_xml('SELECT pg_advisory_lock(42)', true, true, '')",
    ),
    q(
        "side_effect_function",
        "dblink_exec",
        "SELECT dblink_exec('dbname=' || current_database(), 'DELETE FROM canary')",
    ),
    q(
        "side_effect_function",
        "dblink",
        "SELECT * FROM dblink('dbname=' || current_database(), "
        "'DELETE FROM canary RETURNING id') AS t(id int)",
    ),
    q("side_effect_function", "pg_reload_conf", "SELECT pg_reload_conf()"),
    q("side_effect_function", "pg_stat_reset", "SELECT pg_stat_reset()"),
    q(
        "side_effect_function",
        "replication_slot",
        "SELECT pg_create_physical_replication_slot('corpus_slot')",
    ),
    q(
        "side_effect_function",
        "logical_message",
        "SELECT pg_logical_emit_message(false, 'corpus', 'pwned')",
    ),
    q("side_effect_function", "ts_stat", "SELECT * FROM ts_stat('SELECT doc FROM ledger')"),
    q("side_effect_function", "pg_switch_wal", "SELECT pg_switch_wal()"),
    q("side_effect_function", "setseed", "SELECT setseed(0.5)"),
    q("side_effect_function", "stable_crosstab_runs_sql_text", f"SELECT * FROM {CROSSTAB_KILL}"),
    q("side_effect_function", "stable_connectby_builds_sql", f"SELECT * FROM {CONNECTBY_KILL}"),
    q("side_effect_function", "user_volatile", "SELECT canary_touch(c) FROM canary c"),
    q(
        "side_effect_function",
        "schema_qualified",
        "SELECT pg_catalog.set_config('search_path', 'pwned', false)",
    ),
    # --- side-effect functions in every position ----------------------------------------
    q("function_position", "from", "SELECT * FROM pg_read_file('/etc/passwd')"),
    q(
        "function_position",
        "rows_from",
        "SELECT * FROM ROWS FROM (pg_ls_dir('.'), generate_series(1, 2))",
    ),
    q("function_position", "where", "SELECT id FROM canary WHERE pg_try_advisory_lock(id)"),
    q("function_position", "scalar_subquery", "SELECT (SELECT pg_read_file('/etc/passwd'))"),
    q(
        "function_position",
        "cte",
        "WITH s AS (SELECT set_config('search_path', 'pwned', false) AS v) SELECT v FROM s",
    ),
    q(
        "function_position",
        "recursive_cte",
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r "
        "WHERE n < nextval('corpus_seq')) SELECT count(*) FROM r",
    ),
    q("function_position", "order_by", "SELECT id FROM canary ORDER BY pg_try_advisory_lock(id)"),
    q(
        "function_position",
        "group_by",
        "SELECT count(*) FROM canary GROUP BY pg_try_advisory_lock(id)",
    ),
    q("function_position", "having", "SELECT count(*) FROM canary HAVING pg_try_advisory_lock(7)"),
    q(
        "function_position",
        "lateral",
        "SELECT c.id, f.f FROM canary c CROSS JOIN LATERAL pg_ls_dir('.') AS f(f)",
    ),
    q(
        "function_position",
        "join_on",
        "SELECT a.id FROM canary a JOIN canary b ON pg_try_advisory_lock(a.id, b.id)",
    ),
    q("function_position", "named_argument", "SELECT * FROM pg_ls_dir(dirname => '.')"),
    q("function_position", "nested_argument", "SELECT length(pg_read_file('/etc/passwd'))"),
    q(
        "function_position",
        "case",
        "SELECT CASE WHEN id > 0 THEN pg_read_file('/etc/passwd') END FROM canary",
    ),
    q(
        "function_position",
        "coalesce",
        "SELECT coalesce(NULL, set_config('statement_timeout', '0', false))",
    ),
    q(
        "function_position",
        "aggregate_filter",
        "SELECT count(*) FILTER (WHERE pg_try_advisory_lock(id)) FROM canary",
    ),
    q(
        "function_position",
        "window_partition",
        "SELECT row_number() OVER (PARTITION BY pg_try_advisory_lock(id)) FROM canary",
    ),
    q(
        "function_position",
        "limit",
        "SELECT id FROM canary LIMIT length(pg_read_file('/etc/passwd'))",
    ),
    q(
        "function_position",
        "offset",
        "SELECT id FROM canary OFFSET (SELECT count(*) FROM pg_ls_dir('.'))",
    ),
    q("function_position", "values", "VALUES (pg_read_file('/etc/passwd'))"),
    q(
        "function_position",
        "union_arm",
        "SELECT 'a' UNION ALL SELECT pg_read_file('/etc/passwd')",
    ),
    q("function_position", "exists", f"SELECT EXISTS ({KILL})"),
    q("function_position", "in_subquery", "SELECT 1 WHERE 1 IN (SELECT nextval('corpus_seq'))"),
    q(
        "function_position",
        "distinct_on",
        "SELECT DISTINCT ON (pg_try_advisory_lock(id)) id FROM canary",
    ),
    q(
        "function_position",
        "within_group",
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY nextval('corpus_seq')) FROM canary",
    ),
    q(
        "function_position",
        "aggregate_order_by",
        "SELECT string_agg(body, ',' ORDER BY pg_try_advisory_lock(id)) FROM canary",
    ),
    q(
        "function_position",
        "tablesample_repeatable",
        "SELECT id FROM canary TABLESAMPLE BERNOULLI (100) REPEATABLE (nextval('corpus_seq'))",
    ),
    q("function_position", "cast", "SELECT pg_read_file('/etc/passwd')::text"),
    q("function_position", "array", "SELECT ARRAY[pg_read_file('/etc/passwd')]"),
    q(
        "function_position",
        "srf_argument",
        "SELECT * FROM generate_series(1, nextval('corpus_seq'))",
    ),
    q("function_position", "attribute_dot", "SELECT c.canary_touch FROM canary c"),
    q("function_position", "attribute_parenthesised", "SELECT (c).canary_touch FROM canary c"),
    q("function_position", "attribute_star", "SELECT (c.*).canary_touch FROM canary c"),
    q(
        "function_position",
        "attribute_of_subquery",
        "SELECT (SELECT c FROM canary c ORDER BY id LIMIT 1).canary_touch",
    ),
    # --- session and role changes -------------------------------------------------------
    q("session_role", "set_role", "SET ROLE pg_monitor"),
    q("session_role", "set_role_none", "SET ROLE NONE"),
    q("session_role", "reset_role", "RESET ROLE"),
    q("session_role", "session_authorization", "SET SESSION AUTHORIZATION DEFAULT"),
    q("session_role", "set_search_path", "SET search_path = pwned"),
    q("session_role", "set_statement_timeout", "SET statement_timeout = 0"),
    q("session_role", "set_local", "SET LOCAL statement_timeout = 0"),
    q("session_role", "set_read_write_default", "SET SESSION default_transaction_read_only = off"),
    q("session_role", "reset_all", "RESET ALL"),
    q("session_role", "reset_one", "RESET statement_timeout"),
    q("session_role", "discard_all", "DISCARD ALL"),
    q("session_role", "discard_plans", "DISCARD PLANS"),
    q("session_role", "prepare", "PREPARE corpus_p AS DELETE FROM canary"),
    q("session_role", "execute", "EXECUTE corpus_p"),
    q("session_role", "deallocate", "DEALLOCATE ALL"),
    q("session_role", "listen", "LISTEN corpus"),
    q("session_role", "unlisten", "UNLISTEN *"),
    q("session_role", "notify", "NOTIFY corpus, 'pwned'"),
    q("session_role", "set_config_role", "SELECT set_config('role', 'pg_monitor', false)"),
    q(
        "session_role",
        "set_config_read_write",
        "SELECT set_config('default_transaction_read_only', 'off', false)",
    ),
    q("session_role", "set_config_local", "SELECT set_config('search_path', 'pwned', true)"),
    q("session_role", "alter_role_set", "ALTER ROLE CURRENT_USER SET statement_timeout = 0"),
    q("session_role", "alter_system", "ALTER SYSTEM SET statement_timeout = 0"),
    q("session_role", "alter_database_set", "ALTER DATABASE postgres SET search_path = pwned"),
    q("session_role", "create_role", "CREATE ROLE corpus_evil SUPERUSER LOGIN"),
    q("session_role", "grant", "GRANT ALL ON canary TO PUBLIC"),
    q("session_role", "revoke", "REVOKE ALL ON canary FROM PUBLIC"),
    q("session_role", "cursor_with_hold", "DECLARE corpus_c CURSOR WITH HOLD FOR SELECT 1"),
    q("session_role", "load", "LOAD 'auto_explain'"),
    q("session_role", "checkpoint", "CHECKPOINT"),
    # --- writes, DDL and maintenance ----------------------------------------------------
    q("write_statement", "delete", "DELETE FROM canary"),
    q("write_statement", "update", "UPDATE canary SET body = 'x'"),
    q("write_statement", "insert", "INSERT INTO canary (secret_note, body) VALUES ('a', 'b')"),
    q(
        "write_statement",
        "insert_on_conflict",
        "INSERT INTO canary (id, secret_note, body) VALUES (1, 'a', 'b') "
        "ON CONFLICT (id) DO UPDATE SET body = 'x'",
    ),
    q(
        "write_statement",
        "merge",
        "MERGE INTO canary c USING (SELECT 1 AS id) s ON c.id = s.id WHEN MATCHED THEN DELETE",
    ),
    q("write_statement", "truncate", "TRUNCATE canary"),
    q("write_statement", "drop_table", "DROP TABLE canary"),
    q("write_statement", "alter_table", "ALTER TABLE canary ADD COLUMN x int"),
    q("write_statement", "vacuum", "VACUUM canary"),
    q("write_statement", "vacuum_full", "VACUUM FULL"),
    q("write_statement", "analyze_table", "ANALYZE canary"),
    q("write_statement", "analyze_all", "ANALYZE"),
    q("write_statement", "refresh_matview", "REFRESH MATERIALIZED VIEW corpus_mv"),
    q("write_statement", "cluster", "CLUSTER canary USING canary_pkey"),
    q("write_statement", "reindex", "REINDEX TABLE canary"),
    q("write_statement", "create_index", "CREATE INDEX ON canary (body)"),
    q("write_statement", "comment_on", "COMMENT ON TABLE canary IS 'x'"),
    q("write_statement", "create_extension", "CREATE EXTENSION IF NOT EXISTS pg_buffercache"),
    q("write_statement", "create_schema", "CREATE SCHEMA pwned"),
    q("write_statement", "drop_schema", "DROP SCHEMA public CASCADE"),
    # --- comment and quoting tricks -----------------------------------------------------
    q("comment_quoting", "keyword_in_block_comment", "SELECT 1 /* DROP TABLE canary */"),
    q("comment_quoting", "keyword_in_line_comment", "SELECT 1 -- DELETE FROM canary"),
    q("comment_quoting", "mixed_case_keyword_in_comment", "SELECT 1 /* dRoP */"),
    q("comment_quoting", "empty_comment_then_newline", "SELECT 1;--\nDROP TABLE canary"),
    q("comment_quoting", "comment_hides_semicolon_line", "SELECT 1 --\n; DROP TABLE canary"),
    q("comment_quoting", "nested_comment_keyword", "/* /* nested */ DROP TABLE canary */ SELECT 1"),
    q(
        "comment_quoting",
        "nested_comment_then_stack",
        "/* /* nested */ */ SELECT 1; DROP TABLE canary",
    ),
    q("comment_quoting", "comment_before_delete", "/* */ DELETE FROM canary"),
    q(
        "comment_quoting",
        "slash_star_slash_opens_twice",
        "SELECT 1 /*/ DROP TABLE canary /*/",
        DENIED_OR_INVALID,
    ),
    q("comment_quoting", "slash_star_slash_closed", "SELECT 1 /*/ DROP TABLE canary */"),
    q(
        "comment_quoting",
        "unterminated_comment",
        "SELECT 1 /* unterminated DROP TABLE canary",
        DENIED_OR_INVALID,
    ),
    q("comment_quoting", "comments_as_spaces", "SELECT/**/1;/**/DELETE/**/FROM/**/canary"),
    q("comment_quoting", "dollar_quote_closed_early", "SELECT $$ $$; DROP TABLE canary; --$$"),
    q("comment_quoting", "tagged_dollar_quote", "SELECT $a$ $$ $a$; DELETE FROM canary"),
    q("comment_quoting", "doubled_quote", "SELECT 'x'';'; DELETE FROM canary"),
    q("comment_quoting", "escape_string_quote", "SELECT E'\\''; DELETE FROM canary; --'"),
    q("comment_quoting", "backslash_is_literal", "SELECT 'a\\'; DELETE FROM canary; --'"),
    q("comment_quoting", "unicode_escape_string", "SELECT U&'\\0027'; DELETE FROM canary"),
    q(
        "comment_quoting",
        "unicode_escape_identifier",
        "SELECT U&\"\\0070g_read_file\"('/etc/passwd')",
    ),
    q("comment_quoting", "uppercase_function", "SELECT PG_READ_FILE('/etc/passwd')"),
    q("comment_quoting", "quoted_function", "SELECT \"pg_read_file\"('/etc/passwd')"),
    q(
        "comment_quoting",
        "quoted_qualified_function",
        "SELECT pg_catalog.\"set_config\"('search_path', 'pwned', false)",
    ),
    q("comment_quoting", "mixed_case_statements", "SeLeCt 1;\tdElEtE fRoM canary"),
    q("comment_quoting", "form_feed_separator", "SELECT 1;\x0cDELETE FROM canary"),
    q("comment_quoting", "long_padding", "SELECT 1" + " " * 50_000 + "; DROP TABLE canary"),
    q("comment_quoting", "nul_byte", "SELECT 1\x00; DROP TABLE canary", DENIED_OR_INVALID),
    q("comment_quoting", "quoted_alias_then_stack", 'SELECT 1 AS "a"; DROP TABLE canary --"'),
    # --- EXPLAIN ANALYZE of writes ------------------------------------------------------
    ex("explain_analyze", "delete", "DELETE FROM canary", analyze=True),
    ex("explain_analyze", "update", "UPDATE canary SET body = 'x'", analyze=True),
    ex(
        "explain_analyze",
        "insert",
        "INSERT INTO canary (secret_note, body) VALUES ('a', 'b')",
        analyze=True,
    ),
    ex(
        "explain_analyze",
        "merge",
        "MERGE INTO canary c USING (SELECT 1 AS id) s ON c.id = s.id WHEN MATCHED THEN DELETE",
        analyze=True,
    ),
    ex(
        "explain_analyze",
        "writable_cte",
        "WITH d AS (DELETE FROM canary RETURNING id) SELECT * FROM d",
        analyze=True,
    ),
    ex(
        "explain_analyze",
        "create_table_as",
        "CREATE TABLE stolen AS SELECT * FROM canary",
        analyze=True,
    ),
    ex("explain_analyze", "select_into", "SELECT * INTO stolen FROM canary", analyze=True),
    ex("explain_analyze", "advisory_lock", "SELECT pg_try_advisory_lock(42)", analyze=True),
    ex("explain_analyze", "terminate_backend", KILL, analyze=True),
    ex("explain_analyze", "crosstab_runs_sql_text", f"SELECT * FROM {CROSSTAB_KILL}", analyze=True),
    ex("explain_analyze", "nextval", "SELECT nextval('corpus_seq')", analyze=True),
    ex(
        "explain_analyze", "lo_export", f"SELECT lo_export({LARGE_OBJECT}, '{PWNED}')", analyze=True
    ),
    ex("explain_analyze", "for_update", "SELECT * FROM canary FOR UPDATE", analyze=True),
    ex("explain_analyze", "stacked", "SELECT 1; DELETE FROM canary", analyze=True),
    ex("explain_analyze", "explain_inside", "EXPLAIN ANALYZE DELETE FROM canary"),
    ex("explain_analyze", "with_buffers", "DELETE FROM canary", analyze=True, buffers=True),
    ex(
        "explain_analyze",
        "format_injection",
        "SELECT 1",
        PARAMETER,
        format="json, ANALYZE) DELETE FROM canary --",
        mentions="format",
    ),
    ex("explain_analyze", "buffers_without_analyze", "SELECT 1", PARAMETER, buffers=True),
    q("explain_analyze", "execute_query_explain_delete", "EXPLAIN ANALYZE DELETE FROM canary"),
    q(
        "explain_analyze",
        "execute_query_explain_json_update",
        "EXPLAIN (ANALYZE, FORMAT JSON) UPDATE canary SET body = 'x'",
    ),
    q(
        "explain_analyze",
        "execute_query_explain_lock",
        "EXPLAIN ANALYZE SELECT pg_try_advisory_lock(42)",
    ),
    q(
        "explain_analyze",
        "execute_query_explain_create",
        "EXPLAIN ANALYZE CREATE TABLE stolen AS SELECT 1",
    ),
    # --- parameter abuse ----------------------------------------------------------------
    q(
        "parameter_abuse",
        "sql_in_value",
        "SELECT $1::text AS v",
        None,
        params=["1; DROP TABLE canary"],
        rows=[{"v": "1; DROP TABLE canary"}],
    ),
    q(
        "parameter_abuse",
        "quote_breakout_in_value",
        "SELECT $1::text AS v",
        None,
        params=["'); DELETE FROM canary; --"],
        rows=[{"v": "'); DELETE FROM canary; --"}],
    ),
    q(
        "parameter_abuse",
        "dollar_quote_in_value",
        "SELECT $1::text AS v",
        None,
        params=["$$; DELETE FROM canary; $$"],
        rows=[{"v": "$$; DELETE FROM canary; $$"}],
    ),
    q(
        "parameter_abuse",
        "tautology_in_value",
        "SELECT count(*) AS n FROM canary WHERE body = $1",
        None,
        params=["x' OR '1'='1"],
        rows=[{"n": 0}],
    ),
    q(
        "parameter_abuse",
        "function_call_in_value",
        "SELECT $1 AS v",
        None,
        params=["SELECT pg_advisory_lock(42)"],
        rows=[{"v": "SELECT pg_advisory_lock(42)"}],
    ),
    q(
        "parameter_abuse",
        "sql_inside_jsonb_value",
        "SELECT $1::jsonb ->> 'a' AS v",
        None,
        params=[{"a": "1; DROP TABLE canary"}],
        rows=[{"v": "1; DROP TABLE canary"}],
    ),
    q("parameter_abuse", "too_few", "SELECT $1::int AS v", PARAMETER, params=[], mentions="$1"),
    q("parameter_abuse", "missing", "SELECT $1::int AS v", PARAMETER, mentions="$1"),
    q("parameter_abuse", "too_many", "SELECT $1::int AS v", PARAMETER, params=[1, 2]),
    q("parameter_abuse", "none_expected", "SELECT 1 AS v", PARAMETER, params=[1]),
    q(
        "parameter_abuse",
        "gap_in_numbering",
        "SELECT $2::int AS v",
        PARAMETER,
        params=[1, 2],
        mentions="$1",
    ),
    q(
        "parameter_abuse",
        "text_for_int",
        "SELECT $1::int AS v",
        PARAMETER,
        params=["abc"],
        mentions="$1",
    ),
    q(
        "parameter_abuse",
        "object_for_int",
        "SELECT $1::int AS v",
        PARAMETER,
        params=[{"a": 1}],
        mentions="$1",
    ),
    q(
        "parameter_abuse",
        "list_for_int",
        "SELECT $1::int AS v",
        PARAMETER,
        params=[[1, 2]],
        mentions="$1",
    ),
    q(
        "parameter_abuse",
        "bad_date",
        "SELECT $1::date AS v",
        PARAMETER,
        params=["not a date"],
        mentions="$1",
    ),
    q(
        "parameter_abuse",
        "sql_for_uuid",
        "SELECT $1::uuid AS v",
        PARAMETER,
        params=["'; DROP TABLE canary; --"],
        mentions="$1",
    ),
    q(
        "parameter_abuse",
        "second_parameter_wrong",
        "SELECT $1::int + $2::int AS v",
        PARAMETER,
        params=[1, "two"],
        mentions="$2",
    ),
    q("parameter_abuse", "string_for_array", "SELECT $1::int[] AS v", PARAMETER, params=["{1,2}"]),
    q("parameter_abuse", "int_overflow", "SELECT $1::int AS v", PARAMETER, params=[2**40]),
    q("parameter_abuse", "parameter_as_table", "SELECT * FROM $1", INVALID, params=["canary"]),
    q(
        "parameter_abuse",
        "parameters_into_set_config",
        "SELECT set_config($1, $2, false)",
        params=["search_path", "pwned"],
    ),
    q(
        "parameter_abuse",
        "sql_for_regclass",
        "SELECT $1::regclass::text AS v",
        PARAMETER | INVALID,
        params=["canary; DROP TABLE canary"],
    ),
    q(
        "parameter_abuse",
        "nul_in_text",
        "SELECT $1::text AS v",
        PARAMETER | INVALID,
        params=["a\x00b"],
    ),
    q(
        "parameter_abuse",
        "params_not_a_list",
        "SELECT $1::text AS v",
        PARAMETER,
        params="1; DROP TABLE canary",
        mentions="params",
    ),
    q(
        "parameter_abuse",
        "params_an_object",
        "SELECT $1::text AS v",
        PARAMETER,
        params={"$1": "x"},
        mentions="params",
    ),
    q("parameter_abuse", "limit_zero", "SELECT 1 AS v", PARAMETER, limit=0, mentions="limit"),
    q(
        "parameter_abuse",
        "limit_too_big",
        "SELECT 1 AS v",
        PARAMETER,
        limit=1_000_001,
        mentions="limit",
    ),
    q("parameter_abuse", "limit_negative", "SELECT 1 AS v", PARAMETER, limit=-1, mentions="limit"),
    q(
        "parameter_abuse",
        "limit_sql",
        "SELECT 1 AS v",
        PARAMETER,
        limit="1; DROP TABLE canary",
        mentions="limit",
    ),
    q(
        "parameter_abuse",
        "timeout_sql",
        "SELECT 1 AS v",
        PARAMETER,
        timeout_ms="0; SET statement_timeout = 0",
        mentions="timeout_ms",
    ),
    q(
        "parameter_abuse",
        "timeout_zero",
        "SELECT 1 AS v",
        PARAMETER,
        timeout_ms=0,
        mentions="timeout_ms",
    ),
    q("parameter_abuse", "sql_as_list", ["SELECT 1", "DELETE FROM canary"], PARAMETER),
    q("parameter_abuse", "sleep_past_timeout", "SELECT pg_sleep(5)", TIMEOUT, timeout_ms=150),
    q(
        "parameter_abuse",
        "long_scan_past_timeout",
        "SELECT count(*) FROM generate_series(1, 1000000000)",
        TIMEOUT,
        timeout_ms=150,
    ),
    ex(
        "parameter_abuse",
        "explain_bad_parameter",
        "SELECT $1::int",
        PARAMETER,
        params=["1; DROP TABLE canary"],
        mentions="$1",
    ),
    ex(
        "parameter_abuse",
        "explain_sql_in_value",
        "SELECT count(*) FROM canary WHERE body = $1::text",
        None,
        params=["x'; DELETE FROM canary; --"],
        analyze=True,
    ),
    ex(
        "parameter_abuse",
        "explain_missing_parameter",
        "SELECT * FROM canary WHERE id = $1",
        PARAMETER,
    ),
    # --- get_sample_rows.where_clause injection -----------------------------------------
    wc("stacked_delete", "1=1; DELETE FROM canary", DENIED_OR_INVALID),
    wc("close_and_stack", "true); DELETE FROM canary; SELECT (true", DENIED_OR_INVALID),
    wc("union_comment", "true) UNION SELECT * FROM canary --", DENIED_OR_INVALID),
    wc("order_by", "true) ORDER BY (1"),
    wc("for_update", "true) FOR UPDATE --", DENIED_OR_INVALID),
    wc("locking_subquery", "id IN (SELECT id FROM canary FOR UPDATE)"),
    wc("writable_cte", "EXISTS (WITH d AS (DELETE FROM canary RETURNING 1) SELECT 1 FROM d)"),
    wc("nextval", "nextval('corpus_seq') > 0"),
    wc("set_config", "set_config('statement_timeout', '1', false) IS NOT NULL"),
    wc("advisory_lock", "pg_try_advisory_lock(42)"),
    wc("lo_import", "lo_import('/etc/passwd') > 0"),
    wc("lo_export", f"lo_export({LARGE_OBJECT}, '{PWNED}') > 0"),
    wc("pg_read_file", "length(pg_read_file('/etc/passwd')) > 0"),
    wc("pg_ls_dir_subquery", "(SELECT count(*) FROM pg_ls_dir('.')) > 0"),
    wc("terminate_backend", f"({KILL}) >= 0"),
    wc("pg_notify", "pg_notify('corpus', 'x') IS NULL"),
    wc("query_to_xml", "query_to_xml('SELECT 1', true, true, '') IS NOT NULL"),
    wc("dblink_exec", "dblink_exec('dbname=' || current_database(), 'DELETE FROM canary') = 'x'"),
    wc("crosstab_runs_sql_text", f"EXISTS (SELECT 1 FROM {CROSSTAB_KILL})"),
    wc("attribute_dot", "canary.canary_touch > 0"),
    wc("attribute_parenthesised", "(canary).canary_touch > 0"),
    wc("keyword_in_comment", "true /* DROP TABLE canary */"),
    wc("line_comment_stack", "true -- ; DELETE FROM canary"),
    # --- objects whose definitions hide side effects ------------------------------------
    q("owner_objects", "view", "SELECT * FROM corpus_trap", may_run=True),
    q("owner_objects", "stable_liar_function", "SELECT corpus_liar()", may_run=True),
    q("owner_objects", "aggregate", "SELECT corpus_total(id) FROM canary", may_run=True),
    q("owner_objects", "operator", "SELECT 1 ===> 2 AS v", may_run=True),
    q("owner_objects", "domain_check", "SELECT 1::corpus_checked AS v", may_run=True),
    q("owner_objects", "default_argument", "SELECT corpus_defaulted() AS v", may_run=True),
]


@dataclass(frozen=True)
class Legit:
    """A read that must be accepted. Unless `rows` is given, the result must match a direct
    asyncpg run of the same SQL (exactly, or only in shape when `exact` is False)."""

    family: str
    name: str
    sql: str
    params: list[Any] | None = None
    rows: list[dict[str, Any]] | None = None
    exact: bool = True
    db: str = "corpus"  # or "pagila"
    # The server_version_num the SQL needs: an older server's own parser refuses it, and the
    # caller must get that as INVALID_SQL (what that major does) rather than rows.
    since: int = 0

    @property
    def id(self) -> str:
        return f"{self.family}-{self.name}"


L = Legit

LEGIT: list[Legit] = [
    # keywords inside strings
    L(
        "keyword_in_string",
        "delete_in_literal",
        "SELECT 'DELETE FROM canary; DROP TABLE canary' AS s",
    ),
    L("keyword_in_string", "dollar_quoted", "SELECT $$DROP TABLE canary$$ AS s"),
    L("keyword_in_string", "tagged_dollar_quoted", "SELECT $tag$; COMMIT; $tag$ AS s"),
    L("keyword_in_string", "escape_string", "SELECT E'it\\'s; TRUNCATE canary' AS s"),
    L("keyword_in_string", "unicode_escape", "SELECT U&'\\0044ROP' AS s"),
    L("keyword_in_string", "comment_marks_in_string", "SELECT 'x /* DROP */ y -- DELETE' AS s"),
    L("keyword_in_string", "semicolon_in_string", "SELECT 'a; b' AS s, ';' AS t"),
    L("keyword_in_string", "for_update_in_string", "SELECT 'FOR UPDATE' AS s"),
    L(
        "keyword_in_string",
        "like_pattern",
        "SELECT id FROM ledger WHERE \"update\" LIKE 'UPDATE 1%' ORDER BY id",
    ),
    L(
        "keyword_in_string",
        "privilege_name",
        "SELECT has_table_privilege('canary', 'DELETE') AS can_delete",
    ),
    L(
        "keyword_in_string",
        "regexp_replace",
        "SELECT regexp_replace('DROP TABLE x', 'DROP', 'KEEP') AS s",
    ),
    L(
        "keyword_in_string",
        "jsonb_key",
        "SELECT settings ->> 'mode' AS mode FROM ledger ORDER BY id",
    ),
    # keywords as identifiers
    L(
        "keyword_identifier",
        "quoted_columns",
        'SELECT "update", "delete", "drop" FROM ledger ORDER BY id',
    ),
    L("keyword_identifier", "quoted_mixed_case", 'SELECT "Select" AS "insert into x" FROM ledger'),
    L("keyword_identifier", "statement_alias", 'SELECT 1 AS "COMMIT; DROP TABLE canary"'),
    L("keyword_identifier", "grant_column", 'SELECT "grant" FROM ledger WHERE "grant" IS NOT NULL'),
    L(
        "keyword_identifier",
        "last_update",
        "SELECT id, last_update FROM canary WHERE last_update < now() ORDER BY id",
    ),
    L(
        "keyword_identifier",
        "keyword_prefixed_columns",
        "SELECT created_at, updated_by, reset_count, insert_mode, copy_of FROM ledger",
    ),
    L(
        "keyword_identifier",
        "unquoted_keyword_attribute",
        'SELECT x.update FROM (SELECT "update" FROM ledger) x',
    ),
    L("keyword_identifier", "set_alias", 'SELECT count(*) AS "set", count(*) AS reset FROM canary'),
    L("keyword_identifier", "bare_keyword_label", "SELECT 1 delete FROM canary WHERE id < 3"),
    L(
        "keyword_identifier",
        "column_named_like_function",
        "SELECT s.nextval, s.setseed FROM (SELECT 1 AS nextval, 2 AS setseed) s",
    ),
    L(
        "keyword_identifier",
        "deleted_flag",
        'SELECT count(*) FILTER (WHERE "delete") AS n FROM ledger',
    ),
    # recursive CTEs
    L(
        "recursive_cte",
        "counter",
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10) "
        "SELECT sum(i) AS s FROM n",
    ),
    L(
        "recursive_cte",
        "tree",
        "WITH RECURSIVE tree AS (SELECT id, parent_id, 1 AS depth FROM ledger "
        "WHERE parent_id IS NULL UNION ALL SELECT l.id, l.parent_id, t.depth + 1 "
        "FROM ledger l JOIN tree t ON l.parent_id = t.id) SELECT * FROM tree",
    ),
    L(
        "recursive_cte",
        "fibonacci_bigint",
        "WITH RECURSIVE fib(a, b) AS (SELECT 0::bigint, 1::bigint UNION ALL "
        "SELECT b, a + b FROM fib WHERE b < 1000000000000) SELECT max(b) AS m FROM fib",
    ),
    L(
        "recursive_cte",
        "search_depth_first_set",
        "WITH RECURSIVE t(id, parent_id) AS (SELECT id, parent_id FROM ledger "
        "WHERE parent_id IS NULL UNION ALL SELECT l.id, l.parent_id FROM ledger l "
        "JOIN t ON l.parent_id = t.id) SEARCH DEPTH FIRST BY id SET ord "
        "SELECT id FROM t ORDER BY ord",
    ),
    L(
        "recursive_cte",
        "cycle_set_using",
        "WITH RECURSIVE t(id, parent_id) AS (SELECT id, parent_id FROM ledger "
        "UNION ALL SELECT l.id, l.parent_id FROM ledger l JOIN t ON l.parent_id = t.id) "
        "CYCLE id SET is_cycle USING path SELECT count(*) AS n FROM t",
    ),
    L(
        "recursive_cte",
        "materialized_chain",
        "WITH a AS (SELECT id FROM canary WHERE id < 5), b AS MATERIALIZED (SELECT id FROM a) "
        "SELECT count(*) AS n FROM b",
    ),
    # window functions
    L(
        "window",
        "row_number",
        "SELECT id, row_number() OVER (ORDER BY id DESC) AS rn FROM canary ORDER BY id LIMIT 5",
    ),
    L(
        "window",
        "named_window_lag_lead",
        "SELECT id, lag(id) OVER w AS prev, lead(id) OVER w AS next FROM canary "
        "WINDOW w AS (ORDER BY id)",
    ),
    L(
        "window",
        "running_sum_partition",
        "SELECT id, sum(id) OVER (PARTITION BY id % 3 ORDER BY id "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS running FROM canary",
    ),
    L(
        "window",
        "rank_over_enum",
        "SELECT id, rank() OVER (PARTITION BY mood ORDER BY amount) AS r FROM ledger",
    ),
    L(
        "window",
        "groups_exclude",
        "SELECT id, count(*) OVER (ORDER BY id GROUPS BETWEEN 1 PRECEDING AND 1 FOLLOWING "
        "EXCLUDE CURRENT ROW) AS neighbours FROM canary",
    ),
    # LATERAL
    L(
        "lateral",
        "subquery",
        "SELECT c.id, x.n FROM canary c CROSS JOIN LATERAL (SELECT c.id * 2 AS n) x "
        "WHERE c.id <= 3",
    ),
    L("lateral", "unnest", "SELECT l.id, t.tag FROM ledger l, LATERAL unnest(l.tags) AS t(tag)"),
    L(
        "lateral",
        "left_join_srf",
        "SELECT c.id, s.g FROM canary c LEFT JOIN LATERAL generate_series(1, c.id % 3) s(g) "
        "ON true WHERE c.id < 6",
    ),
    # WITHIN GROUP
    L(
        "within_group",
        "percentile_cont",
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY id) AS p FROM canary",
    ),
    L("within_group", "mode", "SELECT mode() WITHIN GROUP (ORDER BY id % 4) AS m FROM canary"),
    L(
        "within_group",
        "percentile_disc_array",
        "SELECT percentile_disc(ARRAY[0.25, 0.75]) WITHIN GROUP (ORDER BY id) AS p FROM canary",
    ),
    L(
        "within_group",
        "hypothetical_rank",
        "SELECT rank(10) WITHIN GROUP (ORDER BY id) AS r FROM canary",
    ),
    # set operations
    L(
        "set_operation",
        "union",
        "SELECT id FROM canary WHERE id < 5 UNION SELECT id FROM canary WHERE id > 45",
    ),
    L(
        "set_operation",
        "intersect",
        "SELECT id FROM canary WHERE id < 10 INTERSECT SELECT id FROM canary WHERE id > 5",
    ),
    L(
        "set_operation",
        "except",
        "SELECT id FROM canary WHERE id < 10 EXCEPT SELECT id FROM canary WHERE id % 2 = 0",
    ),
    L(
        "set_operation",
        "parenthesised_union_all",
        "(SELECT 1 AS v) UNION ALL (SELECT 2) ORDER BY 1",
    ),
    L("set_operation", "table_statement", "TABLE ledger_summary"),
    L("set_operation", "values", "VALUES (1, 'a'), (2, 'b')"),
    # grouping and other syntax
    L(
        "grouping",
        "rollup",
        "SELECT mood::text AS mood, count(*) AS n FROM ledger GROUP BY ROLLUP (mood)",
    ),
    L(
        "grouping",
        "grouping_sets",
        "SELECT updated_by, insert_mode, count(*) AS n FROM ledger "
        "GROUP BY GROUPING SETS ((updated_by), (insert_mode), ())",
    ),
    L(
        "grouping",
        "cube",
        'SELECT updated_by, "delete", count(*) AS n FROM ledger '
        'GROUP BY CUBE (updated_by, "delete")',
    ),
    L(
        "grouping",
        "case_having",
        "SELECT CASE WHEN id % 2 = 0 THEN 'even' ELSE 'odd' END AS parity, count(*) AS n "
        "FROM canary GROUP BY 1 HAVING count(*) > 1",
    ),
    L("grouping", "distinct_on", "SELECT DISTINCT ON (id % 5) id FROM canary ORDER BY id % 5, id"),
    L(
        "grouping",
        "offset_fetch",
        "SELECT id FROM canary ORDER BY id OFFSET 5 ROWS FETCH FIRST 3 ROWS ONLY",
    ),
    L(
        "grouping",
        "fetch_with_ties",
        "SELECT reset_count FROM ledger ORDER BY reset_count FETCH FIRST 2 ROWS WITH TIES",
    ),
    L(
        "grouping",
        "subquery_predicates",
        "SELECT EXISTS (SELECT 1 FROM canary WHERE id = 1) AS e, 2 = ANY (ARRAY[1, 2, 3]) AS a, "
        "5 IN (SELECT id FROM canary) AS i, 'x' IS DISTINCT FROM NULL AS d",
    ),
    L(
        "grouping",
        "ordered_aggregates",
        "SELECT array_agg(id ORDER BY id) AS ids, "
        "string_agg(body, ', ' ORDER BY id) AS bodies FROM canary WHERE id < 4",
    ),
    L(
        "grouping",
        "with_ordinality",
        "SELECT * FROM generate_series(1, 3) WITH ORDINALITY AS g(v, n)",
    ),
    L(
        "grouping",
        "json_table",
        "SELECT * FROM JSON_TABLE('[{\"a\": 1}, {\"a\": 2}]'::jsonb, '$[*]' "
        "COLUMNS (a int PATH '$.a'))",
        since=170000,  # JSON_TABLE is new in PostgreSQL 17
    ),
    L("grouping", "attribute_of_row", "SELECT (c).id FROM canary c WHERE id = 1"),
    L("grouping", "enum_and_numeric", "SELECT mood, amount FROM ledger ORDER BY id"),
    L("grouping", "arrays_and_json", "SELECT tags, settings FROM ledger ORDER BY id"),
    # functions a keyword or volatility filter gets wrong
    L("function", "jsonb_set", "SELECT jsonb_set('{\"a\": 1}', '{a}', '2')::text AS j"),
    L("function", "jsonb_insert", "SELECT jsonb_insert('{\"a\": [1]}', '{a,0}', '0')::text AS j"),
    L(
        "function",
        "setweight",
        "SELECT setweight(to_tsvector('english', 'drop the table'), 'A')::text AS v",
    ),
    L(
        "function",
        "text_search",
        "SELECT id FROM ledger WHERE doc @@ to_tsquery('english', 'delete')",
    ),
    L("function", "current_setting", "SELECT current_setting('search_path') AS sp"),
    L("function", "relation_size", "SELECT pg_total_relation_size('canary') > 0 AS big"),
    L("function", "random", "SELECT random() < 2 AS r"),
    L("function", "gen_random_uuid", "SELECT gen_random_uuid() IS NOT NULL AS u"),
    L("function", "clock_timestamp", "SELECT clock_timestamp() IS NOT NULL AS t"),
    L("function", "pg_sleep_short", "SELECT 1 AS v FROM pg_sleep(0.01)"),
    L("function", "user_immutable", "SELECT corpus_double(21) AS v"),
    L("function", "format_identifier", "SELECT format('%I', 'delete') AS f"),
    # catalog reads and comments
    L("catalog", "pg_class", "SELECT relname FROM pg_catalog.pg_class WHERE relname = 'canary'"),
    L(
        "catalog",
        "information_schema",
        "SELECT table_name FROM information_schema.tables WHERE table_name = 'ledger'",
    ),
    L("catalog", "view", "SELECT * FROM ledger_summary"),
    L("comment", "plain_line_comment", "SELECT 1 AS v -- the answer"),
    L("comment", "nested_block_comment", "/* outer /* nested */ still comment */ SELECT 2 AS v"),
    L("comment", "trailing_semicolon", "SELECT 3 AS v;"),
    # pagila: a real schema
    L(
        "pagila",
        "last_update",
        "SELECT actor_id, first_name, last_update FROM actor ORDER BY actor_id LIMIT 5",
        db="pagila",
    ),
    L(
        "pagila",
        "enum_filter",
        "SELECT title, rating FROM film WHERE rating = 'PG-13' ORDER BY title LIMIT 5",
        db="pagila",
    ),
    L(
        "pagila",
        "full_text",
        "SELECT count(*) AS n FROM film WHERE fulltext @@ to_tsquery('english', 'drama & boat')",
        db="pagila",
    ),
    L(
        "pagila",
        "deleted_scenes_array",
        "SELECT title, special_features FROM film WHERE 'Deleted Scenes' = ANY (special_features) "
        "ORDER BY film_id LIMIT 3",
        db="pagila",
    ),
    L(
        "pagila",
        "rank_payments",
        "SELECT customer_id, sum(amount) AS total, rank() OVER (ORDER BY sum(amount) DESC) AS r "
        "FROM payment GROUP BY customer_id ORDER BY total DESC, customer_id LIMIT 5",
        db="pagila",
    ),
    L(
        "pagila",
        "lateral_first_actor",
        "SELECT f.title, a.last_name FROM film f CROSS JOIN LATERAL (SELECT a.last_name "
        "FROM film_actor fa JOIN actor a USING (actor_id) WHERE fa.film_id = f.film_id "
        "ORDER BY a.last_name LIMIT 1) a ORDER BY f.film_id LIMIT 5",
        db="pagila",
    ),
    L(
        "pagila",
        "median_length",
        "SELECT rating, percentile_cont(0.5) WITHIN GROUP (ORDER BY length) AS median_length "
        "FROM film GROUP BY rating",
        db="pagila",
    ),
    L("pagila", "whole_row", "SELECT * FROM film WHERE film_id = 1", db="pagila"),
]

# Every parameter type round-trips: (name, sql, JSON value, value expected back).
PARAMETER_TYPES: list[tuple[str, str, Any, Any]] = [
    ("int", "SELECT $1::int AS v", 42, 42),
    ("bigint_beyond_double", "SELECT $1::bigint AS v", 9007199254740993, 9007199254740993),
    ("numeric", "SELECT $1::numeric AS v", 12.5, 12.5),
    (
        "numeric_as_string",
        "SELECT $1::numeric AS v",
        "12345678901234567890.123",
        "12345678901234567890.123",
    ),
    ("float", "SELECT $1::float8 AS v", 0.1, 0.1),
    (
        "text",
        "SELECT $1::text AS v",
        "O'Reilly; DROP TABLE canary --",
        "O'Reilly; DROP TABLE canary --",
    ),
    ("untyped", "SELECT $1 AS v", "hello", "hello"),
    ("bool", "SELECT $1::bool AS v", True, True),
    ("date", "SELECT $1::date AS v", "2024-02-29", "2024-02-29"),
    (
        "timestamptz",
        "SELECT $1::timestamptz AS v",
        "2024-02-29T12:34:56+00:00",
        "2024-02-29T12:34:56+00:00",
    ),
    (
        "uuid",
        "SELECT $1::uuid AS v",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    ),
    ("jsonb", "SELECT $1::jsonb AS v", {"a": [1, 2, {"b": None}]}, {"a": [1, 2, {"b": None}]}),
    ("int_array", "SELECT $1::int[] AS v", [1, 2, 3], [1, 2, 3]),
    (
        "text_array",
        "SELECT $1::text[] AS v",
        ["a", "b,c", "DROP TABLE"],
        ["a", "b,c", "DROP TABLE"],
    ),
    ("null", "SELECT $1::int AS v", None, None),
    ("null_is_null", "SELECT $1::text IS NULL AS v", None, True),
    ("enum", "SELECT $1::mood AS v", "happy", "happy"),
    ("interval", "SELECT $1::interval AS v", "1 day 02:00:00", "1 day 02:00:00"),
    ("bytea_base64", "SELECT $1::bytea AS v", "AAEC", "AAEC"),
    ("inferred_from_column", "SELECT body AS v FROM canary WHERE id = $1", 3, "row 3"),
    (
        "inferred_array_any",
        "SELECT count(*) AS v FROM canary WHERE body = ANY($1)",
        ["row 1", "row 2"],
        2,
    ),
    ("reused", "SELECT $1::int + $1::int AS v", 20, 40),
]

# explain_query on legitimate reads: (name, arguments).
EXPLAINS: list[tuple[str, dict[str, Any]]] = [
    ("text", {"sql": "SELECT * FROM canary WHERE id = 1"}),
    ("analyze", {"sql": "SELECT count(*) FROM canary WHERE body LIKE '%DELETE%'", "analyze": True}),
    ("json", {"sql": "SELECT * FROM ledger ORDER BY last_update", "format": "json"}),
    ("yaml", {"sql": "SELECT * FROM ledger", "format": "yaml", "verbose": True}),
    (
        "analyze_buffers",
        {
            "sql": "SELECT * FROM canary c JOIN ledger l ON l.id = c.id",
            "analyze": True,
            "buffers": True,
        },
    ),
    (
        "parameters",
        {"sql": "SELECT * FROM canary WHERE id = $1 AND body <> $2", "params": [1, "DROP"]},
    ),
    (
        "analyze_recursive",
        {
            "sql": "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5) "
            "SELECT * FROM n",
            "analyze": True,
        },
    ),
]

# Harmless where clauses a naive filter refuses: (clause, rows expected of the 50 canaries).
WHERE_CLAUSES: list[tuple[str, int]] = [
    ("last_update < now()", 50),
    ("body <> 'DROP TABLE canary; DELETE FROM canary'", 50),
    ("body IN ('row 1', 'row 2') OR id = $$3$$::int", 3),
    ("\"body\" ~ '^row [0-9]$'", 9),
]
