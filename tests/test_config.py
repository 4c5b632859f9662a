"""Settings: every one documented, flags beat the environment, secrets stay secret."""

from __future__ import annotations

import getpass
import logging
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from mcpclient import records
from pydantic import ValidationError
from serverproc import EXECUTABLE, Server, clean_env

from pg_mcp_server import dsn as dsn_text
from pg_mcp_server.__main__ import parse_args, settings_from_args
from pg_mcp_server.config import (
    DatabaseSettings,
    ServerSettings,
    Settings,
    describe_errors,
    package_version,
    secret_variables,
    unknown_settings,
)

README = (Path(__file__).parents[1] / "README.md").read_text()


def env_names() -> list[str]:
    names = [f"PG_{f.upper()}" for f in DatabaseSettings.model_fields]
    names += [f"MCP_{f.upper()}" for f in ServerSettings.model_fields]
    return [*names, "DATABASE_URL"]


@pytest.mark.parametrize("name", env_names())
def test_every_setting_is_documented_in_the_readme(name: str) -> None:
    assert f"`{name}`" in README, f"{name} is not documented in README.md"


def test_every_setting_has_a_description() -> None:
    for model in (DatabaseSettings, ServerSettings):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"


def test_cli_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_PORT", "9000")
    monkeypatch.setenv("MCP_TRANSPORT", "stdio")
    monkeypatch.setenv("PG_DSN", "postgresql://env@/envdb")
    settings = settings_from_args(
        parse_args(["--transport", "http", "--port", "8081"]), "postgresql://cli@/clidb"
    )
    assert settings.server.transport == "http"
    assert settings.server.port == 8081
    assert settings.database.connect_kwargs()["dsn"] == "postgresql://cli@/clidb"


def test_environment_applies_where_no_flag_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_PORT", "9000")
    monkeypatch.setenv("PG_DATABASE", "app")
    settings = settings_from_args(parse_args([]), None)
    assert settings.server.port == 9000
    assert settings.server.host == "127.0.0.1"  # loopback unless told otherwise


def test_dsn_takes_precedence_over_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PG_HOST", "/var/run/postgresql")
    monkeypatch.setenv("PG_DATABASE", "parts")
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@h/fromurl")
    kwargs = Settings.load().database.connect_kwargs()
    assert kwargs == {"dsn": "postgresql://u@h/fromurl"}


def test_parts_with_a_socket_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("PG_DSN", "DATABASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PG_HOST", "/var/run/postgresql")
    monkeypatch.setenv("PG_DATABASE", "app")
    monkeypatch.setenv("PG_USER", "reader")
    monkeypatch.setenv("PG_PASSWORD", "s3cret-value")
    db = Settings.load().database
    assert db.connect_kwargs()["host"] == "/var/run/postgresql"
    assert "s3cret-value" not in repr(db) and "s3cret-value" not in str(db)


def test_secrets_are_masked(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PG_DSN", "postgresql://u:hunter2-secret@h/db")
    settings = Settings.load()
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("test").info("settings: %s", settings)
    assert "hunter2-secret" not in caplog.text
    assert "hunter2-secret" not in repr(settings)


def test_missing_database_is_a_clear_start_up_error(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "MCP_PORT": "70000", "PG_PASSWORD": "never-printed"}
    proc = subprocess.run(
        [sys.executable, "-m", "pg_mcp_server"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""  # stdout belongs to the MCP transport
    assert "no database configured" in proc.stderr
    assert "never-printed" not in proc.stderr


def test_unrelated_variables_do_not_break_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE", "prod")
    monkeypatch.setenv("SERVER", "web-1")
    settings = Settings.load(database={"dsn": "postgresql://u@h/db"})
    assert settings.server.port == 8080


def test_a_password_can_stay_out_of_the_dsn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PG_PASSWORD", "s3cret")
    settings = settings_from_args(parse_args([]), "postgresql://reader@db/app")
    assert settings.database.connect_kwargs() == {
        "dsn": "postgresql://reader@db/app",
        "password": "s3cret",
    }


def _run(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pg_mcp_server", *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **env},
        cwd=cwd,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_version_and_help_name_the_version_and_every_setting(tmp_path: Path) -> None:
    version = _run("--version", env={}, cwd=tmp_path)
    assert version.returncode == 0
    assert version.stdout.strip() == f"pg-mcp-server {package_version()}"
    shown = _run("--help", env={}, cwd=tmp_path)
    assert shown.returncode == 0
    text = " ".join(shown.stdout.split())  # argparse wraps the epilog
    for name in env_names():
        assert name in text, name


def test_a_misspelt_setting_is_named_with_the_closest_one(tmp_path: Path) -> None:
    """PG_DNS is ignored, as before, but said so at start; a known one is not mentioned."""
    env = {"PG_DNS": "postgresql://u@h/db", "PG_DSN": "postgresql://u@127.0.0.1:1/db"}
    env |= {"MCP_PROT": "8081", "MCP_LOG_FORMAT": "text"}
    proc = _run(env=env, cwd=tmp_path)  # stdin is empty: it stops at once
    lines = [line for line in proc.stderr.splitlines() if "is not a setting" in line]
    assert len(lines) == 2, proc.stderr
    assert "PG_DNS is not a setting and is ignored; did you mean PG_DSN?" in lines[1]
    assert "MCP_PROT is not a setting and is ignored; did you mean MCP_PORT?" in lines[0]
    assert unknown_settings({"PG_DSN": "x", "MCP_PORT": "1", "PG_TEST_SERVER": "pg15"}) == []


def test_pg_database_alone_is_enough_and_the_error_says_whom_it_logs_in_as() -> None:
    with pytest.raises(ValueError, match="without PG_USER the user is PGUSER, else the OS user"):
        DatabaseSettings.model_validate({})
    assert DatabaseSettings.model_validate({"database": "app"}).database == "app"


@pytest.mark.parametrize(
    ("fields", "pguser", "expected"),
    [
        ({"database": "app"}, None, f"logging in as {getpass.getuser()!r} (the OS user)"),
        ({"database": "app"}, "alice", "logging in as 'alice' (PGUSER)"),
        ({"dsn": "postgresql://db.example/app"}, None, "(the OS user)"),
        ({"dsn": "host=db.example dbname=app"}, "alice", "'alice' (PGUSER)"),
        ({"database": "app", "user": "bob"}, "alice", None),
        ({"dsn": "postgresql://bob@db.example/app"}, None, None),
        ({"dsn": "host=db.example dbname=app user=bob"}, None, None),
    ],
)
def test_without_a_user_the_start_up_line_names_the_one_used(
    monkeypatch: pytest.MonkeyPatch, fields: dict[str, str], pguser: str | None, expected: str
) -> None:
    if pguser is None:
        monkeypatch.delenv("PGUSER", raising=False)
    else:
        monkeypatch.setenv("PGUSER", pguser)
    note = DatabaseSettings.model_validate(fields).default_user_note()
    if expected is None:
        assert note is None
    else:
        assert note is not None and expected in note


def test_pg_database_alone_logs_in_as_pguser_and_says_so(tmp_path: Path, demo_dsn: str) -> None:
    """libpq's default, end to end: no PG_USER, PGUSER names the role; the start-up line says
    so and the session is that role's."""
    target = dsn_text.target(demo_dsn)
    assert target.host and target.database and target.user
    env = clean_env(
        PG_HOST=target.host,
        PG_PORT=target.port or "5432",
        PG_DATABASE=target.database,
        PGUSER=target.user,
        MCP_LOG_FORMAT="json",
    )
    if password := urlsplit(dsn_text.to_uri(demo_dsn)).password:
        env["PG_PASSWORD"] = unquote(password)
    server = Server([EXECUTABLE], env, tmp_path / "stderr.log")
    try:
        server.initialize()
        server.send(
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "execute_query", "arguments": {"sql": "SELECT current_user AS u"}}}
        )  # fmt: skip
        reply = server.read()
        assert reply["id"] == 2 and not reply["result"].get("isError"), reply
        assert records(reply["result"]["structuredContent"]) == [{"u": target.user}]
        assert f"logging in as {target.user!r} (PGUSER)" in "\n".join(server.log_lines())
    finally:
        server.close()


def _config_error(**database: object) -> str:
    with pytest.raises(ValidationError) as caught:
        Settings.load(database={"dsn": "postgresql://reader@db.example.com/app", **database})
    return "\n".join(describe_errors(caught.value))


def test_a_certificate_file_under_a_mode_that_checks_nothing_is_refused() -> None:
    """libpq's default sslmode (prefer) would ignore the root certificate, and may not even
    encrypt: a setting that looks like protection and is none."""
    line = _config_error(sslrootcert="/etc/ssl/ca.pem")
    assert "PG_SSLROOTCERT is set, but sslmode is prefer" in line and "verify-full" in line
    dsn = "postgresql://reader@db/app?sslmode=allow&sslcert=/c.crt"
    assert "sslcert in the DSN is set, but sslmode is allow" in _config_error(dsn=dsn)
    assert "without a client certificate" in _config_error(sslmode="require", sslkey="/k.pem")
    assert "needs sslmode verify-full" in _config_error(sslmode="verify-ca", sslrootcert="system")


def test_tls_settings_win_over_the_dsns_and_nothing_changes_without_them() -> None:
    dsn = "postgresql://reader@db/app?sslmode=verify-ca&sslrootcert=/dsn-ca.pem&sslkey=/k.pem"
    plan = Settings.load(
        database={"dsn": dsn, "sslmode": "verify-full", "sslcert": "/c.pem"}
    ).database.tls()
    assert plan is not None
    assert (plan.mode, plan.mode_origin) == ("verify-full", "PG_SSLMODE")
    assert plan.rootcert is not None and plan.rootcert.named() == (
        "sslrootcert in the DSN (/dsn-ca.pem)"
    )
    assert plan.cert is not None and plan.cert.origin == "PG_SSLCERT"
    assert plan.key is not None and plan.key.origin == "sslkey in the DSN"
    for plain in ({}, {"sslmode": "require"}, {"dsn": "postgresql://r@h/a?sslmode=prefer"}):
        settings = Settings.load(database={"dsn": "postgresql://r@h/a", **plain}).database
        assert settings.tls() is None  # asyncpg connects exactly as before


def test_a_password_command_and_a_password_are_not_both_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PG_PASSWORD", "s3cret-never-shown")
    line = _config_error(password_command="vault kv get -field=password secret/db")
    assert "PG_PASSWORD and PG_PASSWORD_COMMAND are both set" in line
    assert "s3cret-never-shown" not in line
    monkeypatch.delenv("PG_PASSWORD")
    assert "cannot be split" in _config_error(password_command="vault 'unclosed")
    settings = Settings.load(
        database={"dsn": "postgresql://r:in-dsn@h/a", "password_command": "aws rds x"}
    ).database
    assert "PG_PASSWORD_COMMAND (aws)" in settings.target().describe()
    assert "in-dsn" not in settings.target().describe()


def test_the_key_passphrase_is_a_secret() -> None:
    settings = Settings.load(
        database={"dsn": "postgresql://r@h/a", "sslpassword": "key-passphrase-x"}
    )
    assert "key-passphrase-x" not in repr(settings)
    assert "PG_SSLPASSWORD" in secret_variables()
