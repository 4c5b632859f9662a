"""What a user pastes works as written and leaves no secret in a file meant for sharing: the
README's client snippets and `claude mcp` lines, the client files in examples/, `uvx --from` a
clone after a change, the terminal banner, the README's Inspector lines and the output they are
shown to print, and its read-only role SQL. (The Docker files: tests/test_docker.py.)"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest
from mcp import Client, StdioServerParameters
from mcpclient import call
from serverproc import ROOT, clean_env

from pg_mcp_server.__main__ import banner

EXAMPLES = ROOT / "examples"
PLACEHOLDER = "/path/to/pg-mcp-server"
README = (ROOT / "README.md").read_text()

# A URI's user:password@ (the password written out), a setting that holds a password, a bearer
# token written out. A `${...}` reference in the password's place is what a recipe should say.
_URI_PASSWORD = re.compile(r"://[^/@\s:]*:(?!\$\{)[^/@\s]*@")
_PASSWORD_SETTING = re.compile(r"PASSWORD|TOKEN|SECRET", re.IGNORECASE)
_BEARER = re.compile(r"Bearer\s+(?!\$\{)\S")


def uv() -> str:
    found = os.environ.get("UV") or shutil.which("uv")
    assert found, "uv is needed (uvx is `uv tool run`)"
    return found


def strings(node: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """Every string in a JSON document, with the key it is the value of."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from strings(v, k)
    elif isinstance(node, list):
        for v in node:
            yield from strings(v, key)
    elif isinstance(node, str):
        yield key, node


def secrets_in(document: Any) -> list[str]:
    found = []
    for key, value in strings(document):
        written_out = _PASSWORD_SETTING.search(key) and not value.startswith("${")
        if written_out or _URI_PASSWORD.search(value) or _BEARER.search(value):
            found.append(f"{key}: {value}")
    return found


def readme_blocks(language: str) -> list[str]:
    return [b.split("```", 1)[0] for b in README.split(f"```{language}\n")[1:]]


def example_files() -> list[Path]:
    return sorted(EXAMPLES.glob("*.json"))


def test_the_secret_check_finds_what_the_old_recipes_held() -> None:
    """The check below can fail: it finds each kind of secret the recipes once held."""
    assert secrets_in({"env": {"PG_DSN": "postgresql://u:secure_password@localhost/app"}})
    assert secrets_in({"headers": {"Authorization": "Bearer your-token-from-MCP_AUTH_TOKENS"}})
    assert secrets_in({"env": {"PG_PASSWORD": "hunter2"}})
    assert not secrets_in({"env": {"PG_DSN": "${env:PG_DSN}", "PG_PASSWORD": "${PG_PASSWORD}"}})
    assert not secrets_in({"url": "http://127.0.0.1:8080/mcp", "password": True})


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_an_example_file_parses_and_holds_no_secret(path: Path) -> None:
    document = json.loads(path.read_text())
    assert secrets_in(document) == []


def test_the_readme_json_snippets_parse_and_hold_no_secret() -> None:
    blocks = readme_blocks("json")
    assert len(blocks) >= 4
    for block in blocks:
        assert secrets_in(json.loads(block)) == [], block


def claude_mcp_lines() -> list[list[str]]:
    """Each `claude mcp ...` command in the README's bash blocks, as the shell splits it (a
    line's comment dropped, continuation lines joined)."""
    commands = []
    for block in readme_blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["claude", "mcp"]:
                commands.append(words)
    return commands


# `claude mcp add`'s options (commander.js): these take one value; `-e/--env` and `-H/--header`
# take every word up to the next option, so a name written after them becomes one of their
# values ("Invalid environment variable format: postgres").
_ONE_VALUE = {"-s", "--scope", "-t", "--transport", "--client-id", "--callback-port"}
_VARIADIC = {"-e", "--env", "-H", "--header"}


def server_name(words: list[str]) -> str | None:
    """The name `claude mcp add ...` registers, parsed as commander.js parses it (None when a
    variadic option swallows it)."""
    rest = words[3:]
    while rest:
        word = rest.pop(0)
        if word == "--":
            return None
        if word in _ONE_VALUE:
            rest.pop(0)
        elif word in _VARIADIC:
            while rest and not rest[0].startswith("-"):
                rest.pop(0)
        elif not word.startswith("-"):
            return word
    return None


def test_the_readme_claude_mcp_add_lines_name_their_server() -> None:
    old = "claude mcp add --scope project --env PG_DSN=$PG_DSN postgres -- uvx --from x pg"
    assert server_name(shlex.split(old)) is None  # the line that failed
    adds = [w for w in claude_mcp_lines() if w[2] == "add"]
    assert len(adds) >= 2
    for words in adds:
        assert server_name(words) in {"postgres", "postgres-http"}, words


def test_no_readme_claude_mcp_line_writes_a_secret_into_the_project() -> None:
    """`--scope project` writes `.mcp.json`, the file to commit: only `${...}` references go
    there, and only through single quotes (`claude mcp add -e` would get the expanded value)."""
    lines = claude_mcp_lines()
    shared = [w for w in lines if "project" in w and ("--scope" in w or "-s" in w)]
    assert shared, "the README shows how to share the server with a project"
    for words in shared:
        assert words[2] == "add-json", words
        entry = json.loads(words[-1])
        assert entry["env"] == {"PG_DSN": "${PG_DSN}"}
        assert secrets_in(entry) == []
    # In single quotes, as the shell must see it (shlex above does not expand variables).
    assert re.search(r"^  '\{.*\$\{PG_DSN\}.*\}'$", README, re.MULTILINE)


def expand(value: str, dsn: str) -> str:
    """What each client makes of its variable references (Claude Code `${VAR}`, Cursor
    `${env:VAR}`, VS Code `${input:id}`), with the demo's DSN as every value."""
    return re.sub(r"\$\{(?:env:|input:)?[A-Za-z_-]+\}", dsn, value)


def stdio_entries() -> list[tuple[str, str]]:
    found = []
    for path in example_files():
        document = json.loads(path.read_text())
        for name, entry in (document.get("mcpServers") or document["servers"]).items():
            # tests/test_examples.py runs Claude Desktop's entries.
            if "command" in entry and path.name != "claude_desktop_config.json":
                found.append((path.name, name))
    return found


@pytest.mark.parametrize("file, entry", stdio_entries())
async def test_an_example_stdio_entry_serves_from_a_clone(
    demo_dsn: str, file: str, entry: str
) -> None:
    """Each stdio entry, run as its client would (its variable references expanded), from a
    directory outside the clone."""
    document = json.loads((EXAMPLES / file).read_text())
    server = (document.get("mcpServers") or document["servers"])[entry]
    assert server["command"] == "uvx"
    args = [a.replace(PLACEHOLDER, str(ROOT)) for a in server["args"]]
    args = ["tool", "run", "--offline", *args]
    env = clean_env(**{k: expand(v, demo_dsn) for k, v in server.get("env", {}).items()})
    env.pop("VIRTUAL_ENV", None)  # as from a desktop app, not from inside this project's venv
    params = StdioServerParameters(command=uv(), args=args, env=env, cwd=os.path.expanduser("~"))
    async with Client(params) as client:
        listed = await call(client, "list_tables")
        assert "orders" in {t["name"] for t in listed["tables"]}


def _copy_project(to: Path) -> None:
    to.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, to / name)
    shutil.copytree(ROOT / "src", to / "src", ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-C", str(to), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "clone"], check=True)


def test_uvx_from_a_clone_serves_the_new_code_after_a_change(tmp_path: Path) -> None:
    """`uvx --from /path/to/clone` after a `git pull` runs the pulled code: a change to a
    source file is a cache key ([tool.uv] cache-keys), so uv builds the clone again. Offline:
    every dependency is in uv's cache already (this project's own `uv sync` put it there)."""
    clone = tmp_path / "clone"
    _copy_project(clone)
    env = clean_env()
    env.pop("VIRTUAL_ENV", None)

    def version() -> subprocess.CompletedProcess[str]:
        argv = [uv(), "tool", "run", "--offline", "--from", str(clone), "pg-mcp-server"]
        done = subprocess.run(
            [*argv, "--version"], env=env, cwd=tmp_path, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done

    assert "changed" not in version().stderr
    init = clone / "src" / "pg_mcp_server" / "__init__.py"
    init.write_text(init.read_text() + '\nimport sys\n\nsys.stderr.write("changed by a pull\\n")\n')
    subprocess.run(
        ["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam",
         "pull"],
        check=True,
    )  # fmt: skip
    assert "changed by a pull" in version().stderr


def inspector_words(text: str) -> list[str]:
    """The Inspector's command line as the banner's `npx ... -c '...'` runs it: split by a real
    shell in an environment with no PG_*/MCP_* variable (another terminal)."""
    npx = next(line for line in text.splitlines() if line.startswith("  npx "))
    inner = shlex.split(npx)[-1]
    shell = subprocess.run(
        ["bash", "-c", f"printf '%s\\n' {inner}"], env=clean_env(), capture_output=True, text=True
    )
    assert shell.returncode == 0, shell.stderr
    return shell.stdout.splitlines()


@pytest.fixture
def terminal_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """The environment of a terminal with no setting in it, in a directory without .env."""
    for name in list(os.environ):
        if name.startswith(("PG_", "MCP_")) or name == "DATABASE_URL":
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def test_the_banner_passes_no_variable_that_is_not_set(terminal_env: pytest.MonkeyPatch) -> None:
    terminal_env.setenv("PG_TEST_SERVER", "embedded")  # starts like a setting, is not one
    text = banner(["/venv/bin/pg-mcp-server", "--demo"])
    words = inspector_words(text)
    assert "-e" not in words
    assert words[-4:] == ["/venv/bin/pg-mcp-server", "--demo", "--method", "tools/list"]
    assert "export" not in text and ".env" not in text


def test_the_banner_passes_settings_with_their_values(terminal_env: pytest.MonkeyPatch) -> None:
    """Set as `PG_HOST=... uv run pg-mcp-server`, they are not in the other terminal: the
    command carries their values, not references to them."""
    terminal_env.setenv("PG_HOST", "db.example.com")
    terminal_env.setenv("MCP_LOG_LEVEL", "DEBUG")
    terminal_env.setenv("PG_DSN", "host=db.example.com dbname='my app' user=reader")
    words = inspector_words(banner(["pg-mcp-server"]))
    passed = [words[i + 1] for i, w in enumerate(words) if w == "-e"]
    assert passed == [
        "MCP_LOG_LEVEL=DEBUG",
        "PG_DSN=host=db.example.com dbname='my app' user=reader",
        "PG_HOST=db.example.com",
    ]


@pytest.mark.parametrize(
    "variable, value",
    [
        ("PG_DSN", "postgresql://reader:s3cr3t-pw@db.example.com/app"),
        ("DATABASE_URL", "postgresql://reader@db.example.com/app?password=s3cr3t-pw"),
        ("PG_DSN", "host=db.example.com user=reader password=s3cr3t-pw"),
        ("PG_PASSWORD", "s3cr3t-pw"),
    ],
)
def test_the_banner_never_prints_a_password_from_the_environment(
    terminal_env: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    terminal_env.setenv(variable, value)
    text = banner(["pg-mcp-server"])
    assert "s3cr3t" not in text
    assert f'-e {variable}="${variable}"' in text
    assert f"(first, in that terminal: export {variable}=...; it holds a password" in text


@pytest.mark.parametrize(
    "argv, shown",
    [
        (
            ["--dsn", "postgresql://reader:s3cr3t-pw@db.example.com:5432/app"],
            ["--dsn", "postgresql://reader@db.example.com:5432/app"],
        ),
        (
            ["--dsn=postgresql://reader:s3cr3t-pw@db.example.com/app?sslmode=require"],
            ["--dsn=postgresql://reader@db.example.com/app?sslmode=require"],
        ),
        (
            ["--dsn", "host=db.example.com user=reader password=s3cr3t-pw dbname='my app'"],
            ["--dsn", "host=db.example.com user=reader dbname='my app'"],
        ),
        (
            ["--dsn", "postgresql://reader@db.example.com/app"],
            ["--dsn", "postgresql://reader@db.example.com/app"],
        ),
        (  # a client key's passphrase is a secret too
            [
                "--dsn",
                "postgresql://reader@db.example.com/app?sslpassword=s3cr3t-pw&sslmode=verify-full",
            ],
            ["--dsn", "postgresql://reader@db.example.com/app?sslmode=verify-full"],
        ),
        (
            ["--dsn", "host=db.example.com sslkey=/k.pem sslpassword=s3cr3t-pw"],
            ["--dsn", "host=db.example.com sslkey=/k.pem"],
        ),
    ],
)
def test_the_banner_shows_a_dsn_flag_without_its_password(
    terminal_env: pytest.MonkeyPatch, argv: list[str], shown: list[str]
) -> None:
    text = banner(["/venv/bin/pg-mcp-server", *argv])
    assert "s3cr3t" not in text
    words = inspector_words(text)
    at = words.index("/venv/bin/pg-mcp-server")
    assert words[at + 1 : at + 1 + len(shown)] == shown
    asks = "export PG_PASSWORD=...; --dsn is shown without its password" in text
    assert asks == (argv[-1] != shown[-1])
    # The reference is to the other terminal's variable (empty here, in no terminal's env).
    assert ("PG_PASSWORD=" in words) == asks


def test_the_banner_says_where_to_run_it_when_a_dot_env_is_read(
    terminal_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / ".env").write_text("PG_DSN=postgresql://reader@db.example.com/app\n")
    assert f"run it from {tmp_path}: the server reads the .env there" in banner(["pg-mcp-server"])


# The README's MCP Inspector lines: one form everywhere, and what they are shown to print is
# what the server answers. (.ci/clients.sh runs the Inspector itself, which needs Node and npm.)
INSPECTOR = "npx -y -p node@22 -p @modelcontextprotocol/inspector@2.12.0 -c"


def inspector_examples() -> list[tuple[list[str], list[str]]]:
    """(mcp-inspector's words, the sample-output comment lines after it) for each README line."""
    found = []
    for block in readme_blocks("bash"):
        lines = block.replace("\\\n", " ").splitlines()
        for i, line in enumerate(lines):
            if "mcp-inspector" not in line:
                continue
            npx = shlex.split(line, comments=True)
            assert npx[:-1] == INSPECTOR.split(), f"not the Quick start's form: {line}"
            words = shlex.split(npx[-1])
            sample = []
            for after in lines[i + 1 :]:
                if not after.startswith("#"):
                    break
                sample.append(after[1:].strip())
            found.append((words, sample))
    return found


def test_every_readme_inspector_line_has_the_quick_start_form() -> None:
    examples = inspector_examples()
    assert len(examples) >= 6
    for words, _ in examples:
        assert words[:2] == ["mcp-inspector", "--cli"], words
        if "--transport" not in words:  # a command to start: the demo can take a while
            assert words[2:4] == ["--connect-timeout", "60000"], words


def _option(words: list[str], name: str) -> list[str]:
    return [words[i + 1] for i, w in enumerate(words) if w == name]


def _pairs(node: Any) -> Iterator[tuple[str, Any]]:
    """Every key/value at any depth, JSON documents inside strings ("text") included."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from _pairs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _pairs(value)
    elif isinstance(node, str) and node.startswith("{"):
        with contextlib.suppress(ValueError):
            yield from _pairs(json.loads(node))


_SCALAR_PAIR = re.compile(r'"(\w+)":\s*("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?|true|false|null)')


def _shown_pairs_hold(sample: list[str], answer: dict[str, Any]) -> None:
    actual = list(_pairs(answer))
    for line in sample:
        for key, text in _SCALAR_PAIR.findall(line):
            shown = json.loads(text)
            if isinstance(shown, str) and shown.endswith(" ..."):  # shortened: a prefix
                prefix = shown.removesuffix("...")
                assert any(k == key and str(v).startswith(prefix) for k, v in actual), line
            else:
                assert (key, shown) in actual, f"{key}: {shown!r} is not in the answer"


async def test_the_readme_inspector_samples_are_what_the_demo_answers() -> None:
    """Each README Inspector line on `uv run pg-mcp-server --demo` that shows output, run as
    the same request through one session with that same command: every field the sample shows
    has the shown value, and a prompt's shown lines are its text."""
    examples = [(w, s) for w, s in inspector_examples() if s and "--demo" in w]
    assert len(examples) >= 3
    params = StdioServerParameters(
        command=uv(), args=["run", "pg-mcp-server", "--demo"], env=clean_env(), cwd=ROOT
    )
    async with Client(params) as client:
        for words, sample in examples:
            at = words.index("--method")
            assert words[4:at] == ["uv", "run", "pg-mcp-server", "--demo"], words
            method = words[at + 1]
            if method == "resources/read":
                read = await client.read_resource(_option(words, "--uri")[0])
                _shown_pairs_hold(sample, read.model_dump(mode="json", by_alias=True))
            elif method == "prompts/get":
                arguments = dict(a.split("=", 1) for a in _option(words, "--prompt-args"))
                got = await client.get_prompt(_option(words, "--prompt-name")[0], arguments)
                text = got.messages[0].content.text  # type: ignore[union-attr]
                shown = [line.removesuffix("...").rstrip() for line in sample[1:]]
                assert shown and all(line in text for line in shown), (shown, text)
            else:
                raise AssertionError(f"no check for {method}: add one")


async def test_the_readme_reader_role_reads_tables_created_later(scratch_dsn: str) -> None:
    """The README's read-only role, created as written (names made unique): it reads a table
    created afterwards by the role that ran the SQL, which `GRANT ... ON ALL TABLES` alone
    misses (shown with the same SQL less its ALTER DEFAULT PRIVILEGES line)."""
    block = next(b for b in readme_blocks("sql") if "CREATE ROLE mcp_reader" in b)
    database = urlsplit(scratch_dsn).path.lstrip("/")
    conn = await asyncpg.connect(scratch_dsn)
    roles = []
    try:
        for with_defaults in (False, True):
            role = f"mcp_reader_{secrets.token_hex(4)}"
            sql = block.replace("mcp_reader", role).replace("PASSWORD '...'", "PASSWORD 'x'")
            sql = sql.replace("DATABASE app", f'DATABASE "{database}"')
            if not with_defaults:
                sql = "\n".join(s for s in sql.splitlines() if "DEFAULT PRIVILEGES" not in s)
            await conn.execute(sql)  # one implicit transaction: all of it, or nothing
            roles.append(role)
            table = f"later_{role}"
            await conn.execute(f"CREATE TABLE {table} AS SELECT 1 AS x")
            async with conn.transaction():
                await conn.execute(f"SET LOCAL ROLE {role}")
                if with_defaults:
                    assert await conn.fetchval(f"SELECT x FROM {table}") == 1
                else:
                    with pytest.raises(asyncpg.InsufficientPrivilegeError):
                        await conn.fetchval(f"SELECT x FROM {table}")
    finally:
        for role in roles:
            await conn.execute(f"DROP OWNED BY {role}; DROP ROLE {role}")
        await conn.close()
