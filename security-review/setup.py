"""Create database atkdb: attacker role (legacy CREATE on public + own schema atk), reader role
(SELECT only), a users table with secrets, and the side-effect fingerprints."""
import asyncio
from pathlib import Path

import asyncpg
from pgbed import with_database

ADMIN = Path(__file__).with_name(".dsn").read_text()
DSN = with_database(ADMIN, "atkdb")

SETUP = """
DO $$BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname='attacker') THEN
    CREATE ROLE attacker LOGIN; END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname='reader') THEN
    CREATE ROLE reader LOGIN; END IF;
END$$;
GRANT CREATE, USAGE ON SCHEMA public TO attacker;
CREATE SCHEMA atk AUTHORIZATION attacker;
GRANT USAGE ON SCHEMA atk TO reader;
CREATE TABLE public.users (id int PRIMARY KEY, name text, password text, api_token text);
INSERT INTO public.users VALUES (1,'alice','hunter2','tok-ALICE-123'),(2,'bob','s3cr3t!','tok-BOB-456');
CREATE SEQUENCE public.fp_seq;
CREATE TABLE public.fp (n int);
GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader;
GRANT SELECT ON ALL SEQUENCES IN SCHEMA public TO reader;
ALTER DEFAULT PRIVILEGES FOR ROLE attacker IN SCHEMA atk GRANT SELECT ON TABLES TO reader;
"""

async def main() -> None:
    c = await asyncpg.connect(ADMIN)
    await c.execute("DROP DATABASE IF EXISTS atkdb WITH (FORCE)")
    await c.execute("CREATE DATABASE atkdb TEMPLATE template0")
    await c.close()
    c = await asyncpg.connect(DSN)
    await c.execute(SETUP)
    await c.close()
    print(DSN)

if __name__ == "__main__":
    asyncio.run(main())
