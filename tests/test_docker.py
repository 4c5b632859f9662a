"""The Docker files agree with themselves and with what the README says, checked without a
Docker engine: the compose file is read as compose reads it, the Dockerfile's installing steps
are replayed in a directory (COPY as a copy, `RUN uv sync` as is), and the database init script
runs with psql as the postgres image runs it."""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import yaml
from pgbed import PgServer
from serverproc import ROOT, clean_env

from pg_mcp_server.config import setting_names

EXAMPLES = ROOT / "examples"


def uv() -> str:
    found = os.environ.get("UV") or shutil.which("uv")
    assert found, "uv is needed"
    return found


def env_example_names() -> set[str]:
    """Variables `.env.example` sets or shows (commented out)."""
    text = (ROOT / ".env.example").read_text()
    return set(re.findall(r"^(?:# )?([A-Z][A-Z0-9_]*)=", text, re.MULTILINE))


def test_compose_reads_from_env_every_variable_its_comments_say_to_set() -> None:
    """Every variable docker-compose.yml interpolates is in .env.example, and every variable
    its comments tell the user to set is interpolated (not hard-coded, as MCP_ALLOWED_HOSTS
    was, where a value in .env did nothing)."""

    text = (ROOT / "docker-compose.yml").read_text()
    compose = yaml.safe_load(text)
    used = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)(?::?-[^}]*)?\}", text))
    assert used >= {"POSTGRES_PASSWORD", "MCP_READER_PASSWORD", "MCP_AUTH_TOKENS"}
    assert used <= env_example_names(), used - env_example_names()
    header = text.partition("\nservices:")[0]  # the comment that tells what to set
    told = set(re.findall(r"\b([A-Z][A-Z0-9]*_[A-Z0-9_]+)\b", header))
    assert "MCP_ALLOWED_HOSTS" in told
    assert told <= used, told - used
    # The server's variables are settings it reads (a misspelt one would be ignored).

    server_env = compose["services"]["pg-mcp-server"]["environment"]
    assert set(server_env) <= set(setting_names())
    # What compose mounts exists in the repository.
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            assert (ROOT / volume.split(":")[0]).is_file(), volume


def dockerfile_steps() -> list[tuple[str, str]]:
    """(instruction, arguments) of each Dockerfile step, continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    steps = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            instruction, _, arguments = line.strip().partition(" ")
            steps.append((instruction.upper(), arguments.strip()))
    return steps


def test_the_image_pins_uv() -> None:
    runs = [args for step, args in dockerfile_steps() if step == "RUN"]
    installs = [r for r in runs if "install" in r and " uv" in r]
    assert len(installs) == 1
    assert re.search(r"\buv==\d+\.\d+\.\d+\b", installs[0]), installs[0]


def test_the_image_installs_dependencies_in_a_layer_the_code_does_not_touch(
    tmp_path: Path,
) -> None:
    """Replays the Dockerfile's COPY and `uv sync` steps (offline, from uv's cache): the first
    sync sees only pyproject.toml and uv.lock and installs every dependency but not the project;
    the later one adds the project, and the server it installs starts."""
    app = tmp_path / "app"
    app.mkdir()
    env = clean_env(UV_PYTHON_DOWNLOADS="never")
    env.pop("VIRTUAL_ENV", None)
    syncs: list[set[str]] = []
    for step, args in dockerfile_steps():
        if step == "COPY":
            *sources, dest = shlex.split(args)
            assert not any(s.startswith("--") for s in sources), "COPY from another stage"
            for source in sources:
                target = app / dest / Path(source).name if dest.endswith("/") else app / dest
                if (ROOT / source).is_dir():
                    shutil.copytree(ROOT / source, target, ignore=shutil.ignore_patterns("__py*"))
                else:
                    shutil.copy2(ROOT / source, target)
        elif step == "RUN":
            for command in args.split("&&"):
                words = shlex.split(command)
                if words[:2] != ["uv", "sync"]:
                    continue
                syncs.append({p.name for p in app.iterdir() if p.name != ".venv"})
                argv = [uv(), "sync", "--offline", *words[2:]]
                done = subprocess.run(argv, cwd=app, env=env, capture_output=True, text=True)
                assert done.returncode == 0, done.stderr
                installed = subprocess.run(
                    [uv(), "pip", "list", "--python", str(app / ".venv" / "bin" / "python")],
                    cwd=app, env=env, capture_output=True, text=True, check=True,
                ).stdout  # fmt: skip
                if len(syncs) == 1:
                    assert "--no-install-project" in words
                    assert "asyncpg" in installed and "postgres-mcp-layered" not in installed
    assert syncs[0] == {"pyproject.toml", "uv.lock"}, "the dependency layer sees only these"
    assert len(syncs) == 2 and "src" in syncs[1]
    version = subprocess.run(
        [str(app / ".venv" / "bin" / "pg-mcp-server"), "--version"], capture_output=True, text=True
    )
    assert version.stdout.startswith("pg-mcp-server "), version.stderr


async def test_the_compose_init_script_makes_a_reader_of_tables_created_later(
    pg: PgServer,
) -> None:
    """examples/postgres-init/20-reader.sh, run by bash with psql as the postgres image runs it
    (POSTGRES_USER, POSTGRES_DB, MCP_READER_PASSWORD; the role renamed to one of its own): the
    role it creates reads a table created afterwards and starts read-only."""
    db = await pg.create_database("reader")
    role = f"mcp_reader_{secrets.token_hex(4)}"
    script = (EXAMPLES / "postgres-init" / "20-reader.sh").read_text().replace("mcp_reader", role)
    env = clean_env(
        POSTGRES_USER=urlsplit(db.dsn).username or "postgres",
        POSTGRES_DB=db.dsn,  # psql takes a URI for a database name
        MCP_READER_PASSWORD="reader's password",
        PATH=f"{pg.psql_path.parent}{os.pathsep}{os.environ['PATH']}",
    )
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    conn = await asyncpg.connect(db.dsn)
    try:
        config = await conn.fetchval("SELECT rolconfig FROM pg_roles WHERE rolname = $1", role)
        assert config == ["default_transaction_read_only=on"]
        await conn.execute("CREATE TABLE later AS SELECT 1 AS x")
        async with conn.transaction():
            await conn.execute(f"SET LOCAL ROLE {role}")
            assert await conn.fetchval("SELECT x FROM later") == 1
    finally:
        await conn.execute(f"DROP OWNED BY {role}; DROP ROLE {role}")
        await conn.close()
    await pg.drop_database(db.name)
