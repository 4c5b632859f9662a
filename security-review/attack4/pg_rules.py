"""attack4 / target 2: can a role that is not superuser get a function it controls into an
operator family (the path Judge.index_support no longer follows for trusted functions that
take `internal`)? Asks PostgreSQL itself, as role attacker, every way we could think of.
Run: PYTHONPATH=tests uv run python security-review/attack4/pg_rules.py [.dsn file]
(the .dsn of security-review/bed.py for PG 18, attack4/.dsn15 of bed15.py for PG 15)
"""
import asyncio
import sys
from pathlib import Path

import asyncpg
from pgbed import with_database

ADMIN = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parents[1] / ".dsn").read_text()
DB = with_database(ADMIN, "rulesdb")

SUPER_SETUP = """
CREATE ROLE attacker LOGIN;
GRANT CREATE ON DATABASE rulesdb TO attacker;
GRANT CREATE, USAGE ON SCHEMA public TO attacker;
CREATE SCHEMA atk AUTHORIZATION attacker;
CREATE OPERATOR FAMILY atk.given_fam USING btree;
ALTER OPERATOR FAMILY atk.given_fam USING btree OWNER TO attacker;
CREATE OPERATOR FAMILY atk.given_hash USING hash;
ALTER OPERATOR FAMILY atk.given_hash USING hash OWNER TO attacker;
"""

ATTEMPTS = [
    ("SQL function taking internal", "CREATE FUNCTION atk.f(internal) RETURNS bool LANGUAGE sql AS 'SELECT true'"),
    ("PL/pgSQL function taking internal", "CREATE FUNCTION atk.g(internal) RETURNS void LANGUAGE plpgsql AS 'begin end'"),
    ("SQL function taking (int, internal)", "CREATE FUNCTION atk.f2(int, internal) RETURNS bool LANGUAGE sql AS 'SELECT true'"),
    ("function returning internal", "CREATE FUNCTION atk.h(int) RETURNS internal LANGUAGE sql AS 'SELECT NULL'"),
    ("LANGUAGE internal", "CREATE FUNCTION atk.i(internal) RETURNS internal LANGUAGE internal AS 'ginarrayextract'"),
    ("LANGUAGE c", "CREATE FUNCTION atk.c(internal) RETURNS void LANGUAGE c AS '$libdir/plpgsql', 'plpgsql_validator'"),
    ("CREATE OPERATOR FAMILY", "CREATE OPERATOR FAMILY atk.fam USING btree"),
    ("CREATE OPERATOR CLASS", "CREATE TYPE atk.t AS (a int); CREATE OPERATOR CLASS atk.cls FOR TYPE atk.t USING btree AS FUNCTION 1 pg_catalog.btrecordcmp(record, record)"),
    ("ALTER FAMILY it owns ADD FUNCTION (builtin, internal)", "ALTER OPERATOR FAMILY atk.given_fam USING btree ADD FUNCTION 2 (int4, int4) pg_catalog.btint4sortsupport(internal)"),
    ("ALTER FAMILY it owns ADD FUNCTION (its own SQL)", "CREATE FUNCTION atk.cmp(int, int) RETURNS int LANGUAGE sql AS 'SELECT 0'; ALTER OPERATOR FAMILY atk.given_fam USING btree ADD FUNCTION 1 (int4, int4) atk.cmp(int, int)"),
    ("ALTER FAMILY it owns ADD OPERATOR", "ALTER OPERATOR FAMILY atk.given_hash USING hash ADD OPERATOR 1 pg_catalog.=(int4, int4)"),
    ("ALTER FAMILY it owns RENAME/SET SCHEMA", "ALTER OPERATOR FAMILY atk.given_fam USING btree RENAME TO integer_ops2"),
    ("ALTER builtin FAMILY ADD", "ALTER OPERATOR FAMILY pg_catalog.integer_ops USING btree ADD FUNCTION 4 (int4) pg_catalog.btequalimage(oid)"),
    ("CREATE EXTENSION vector (trusted?) then own its family", "CREATE EXTENSION IF NOT EXISTS vector SCHEMA atk"),
]


async def main() -> int:
    admin = await asyncpg.connect(ADMIN)
    await admin.execute("DROP DATABASE IF EXISTS rulesdb WITH (FORCE)")
    await admin.execute("DROP ROLE IF EXISTS attacker_r")
    await admin.execute("CREATE DATABASE rulesdb TEMPLATE template0")
    await admin.close()
    su = await asyncpg.connect(DB)
    print(await su.fetchval("SELECT version()"))
    await su.execute(SUPER_SETUP.replace("attacker", "attacker_r"))
    atk = await asyncpg.connect(DB.replace("postgres@", "attacker_r@", 1))
    allowed = []
    for what, sql in ATTEMPTS:
        try:
            await atk.execute(sql.replace("attacker", "attacker_r"))
            print(f"ALLOWED  {what}")
            allowed.append(what)
        except asyncpg.PostgresError as exc:
            print(f"refused  {what}: {exc.sqlstate} {exc}")
    # Who owns the members of an extension a non-superuser created as trusted?
    owners = await su.fetch(
        """SELECT DISTINCT pg_get_userbyid(p.proowner) AS owner, pg_get_userbyid(e.extowner) AS extowner
           FROM pg_extension e JOIN pg_depend d ON d.refobjid = e.oid AND d.deptype = 'e'
           JOIN pg_proc p ON p.oid = d.objid WHERE e.extname = 'vector'""")
    print("vector members owned by:", [dict(r) for r in owners])
    await atk.close()
    await su.execute("DROP SCHEMA atk CASCADE; DROP EXTENSION IF EXISTS vector CASCADE")
    await su.close()
    admin = await asyncpg.connect(ADMIN)
    await admin.execute("DROP DATABASE rulesdb WITH (FORCE)")
    await admin.execute("DROP ROLE attacker_r")
    await admin.close()
    print("allowed:", allowed)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
