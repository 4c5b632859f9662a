"""TLS to PostgreSQL as libpq does it (sslmode, sslrootcert, sslcert, sslkey), with errors that
name which part failed.

asyncpg reads the same parameters from a DSN, but its failures are OpenSSL's words ("certificate
verify failed", a FileNotFoundError without a file name), and it takes files only from the DSN
or libpq's environment. When a verifying mode or a certificate file is configured, the
`ssl.SSLContext` is built here instead (asyncpg's public `ssl=` argument), so that an unreadable
file is named with the setting it came from and a refused handshake says whether the server's
certificate was not trusted, named another host, or the server refused ours. With none of this
configured there is no plan and asyncpg connects exactly as before.

Light on purpose (the standard library and our errors): it runs while the server starts.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pg_mcp_server.errors import DatabaseConnectionError

VERIFYING = ("verify-ca", "verify-full")
ENCRYPTING = ("require", *VERIFYING)
# The query parameters of a DSN this module reads (libpq's names, as asyncpg reads them).
DSN_KEYS = (
    "sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword", "sslcrl",
    "ssl_min_protocol_version", "ssl_max_protocol_version",
)  # fmt: skip
_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and _IP_ADDRESS_MISMATCH: the chain is trusted, the
# name (or address) is not the host's.
_HOST_MISMATCH = (62, 64)


@dataclass(frozen=True)
class File:
    """A file setting and where it was given, for messages ("PG_SSLKEY", "sslkey in the DSN")."""

    path: str
    origin: str

    def named(self) -> str:
        return f"{self.origin} ({self.path})"


@dataclass(frozen=True)
class TlsPlan:
    """What the connection's TLS must be; built into an SSLContext for every new connection,
    so that a rotated certificate file is read again, as libpq does."""

    mode: str
    mode_origin: str
    rootcert: File | None = None
    cert: File | None = None
    key: File | None = None
    crl: File | None = None
    min_version: str | None = None
    max_version: str | None = None
    password: str | None = field(default=None, repr=False)  # the key's passphrase


def plan(
    settings: Mapping[str, str | None],
    dsn_params: Mapping[str, str],
    environ: Mapping[str, str] | None = None,
) -> TlsPlan | None:
    """The TLS plan for `settings` (sslmode, sslrootcert, sslcert, sslkey, sslpassword: the PG_*
    values, which win) and `dsn_params` (the DSN's query); None when asyncpg's own handling
    applies unchanged (no verifying mode, no certificate file). Raises ValueError for a
    combination that would not do what it seems to (a file under a mode that ignores it)."""
    env = os.environ if environ is None else environ

    def pick(key: str) -> File | None:
        if settings.get(key):
            return File(str(settings[key]), f"PG_{key.upper()}")
        if dsn_params.get(key):
            return File(dsn_params[key], f"{key} in the DSN")
        return None

    if settings.get("sslmode"):
        mode, mode_origin = str(settings["sslmode"]), "PG_SSLMODE"
    elif dsn_params.get("sslmode"):
        mode, mode_origin = dsn_params["sslmode"], "sslmode in the DSN"
    elif env.get("PGSSLMODE"):
        mode, mode_origin = env["PGSSLMODE"], "PGSSLMODE"
    else:
        mode, mode_origin = "prefer", "the default sslmode"
    mode = mode.replace("_", "-")  # asyncpg takes verify_full for verify-full
    rootcert, cert, key = pick("sslrootcert"), pick("sslcert"), pick("sslkey")
    files = [f for f in (rootcert, cert, key) if f is not None]
    if mode == "disable" or (mode not in VERIFYING and not files):
        return None
    if mode not in ENCRYPTING:
        # libpq would connect without checking anything (prefer falls back to plain text):
        # a root certificate given and never used is a configuration that lies.
        raise ValueError(
            f"{files[0].origin} is set, but sslmode is {mode} ({mode_origin}), under which "
            "the connection may go unencrypted and no certificate is checked: set PG_SSLMODE "
            "to verify-full (or verify-ca, or require)"
        )
    if key is not None and cert is None:
        raise ValueError(f"{key.origin} is set without a client certificate: set PG_SSLCERT too")
    if rootcert is not None and rootcert.path == "system" and mode != "verify-full":
        # libpq refuses this too: the system's CAs sign certificates for any name.
        raise ValueError(
            f"{rootcert.origin}=system (the system's CAs) needs sslmode verify-full, not {mode}"
        )
    password = settings.get("sslpassword") or dsn_params.get("sslpassword")
    return TlsPlan(
        mode=mode,
        mode_origin=mode_origin,
        rootcert=rootcert,
        cert=cert,
        key=key,
        crl=File(dsn_params["sslcrl"], "sslcrl in the DSN") if dsn_params.get("sslcrl") else None,
        min_version=dsn_params.get("ssl_min_protocol_version"),
        max_version=dsn_params.get("ssl_max_protocol_version"),
        password=password,
    )


def _home_file(name: str) -> Path | None:
    """libpq's default ~/.postgresql/NAME, if it exists."""
    try:
        path = Path.home() / ".postgresql" / name
    except RuntimeError:  # no home directory
        return None
    return path if path.is_file() else None


def _readable(file: File) -> None:
    try:
        with open(file.path, "rb"):
            pass
    except OSError as exc:
        raise DatabaseConnectionError(
            f"The TLS file {file.named()} cannot be read: {exc.strerror or exc}.",
            suggestion=f"Check the path in {file.origin} and that the server's OS user may "
            "read it.",
            context={"setting": file.origin, "path": file.path},
        ) from None


def _root(plan: TlsPlan) -> File | None:
    """The CA file to verify against: the configured one, else libpq's PGSSLROOTCERT, else
    ~/.postgresql/root.crt; required by the verifying modes."""
    if plan.rootcert is not None:
        return plan.rootcert
    if os.environ.get("PGSSLROOTCERT"):
        return File(os.environ["PGSSLROOTCERT"], "PGSSLROOTCERT")
    default = _home_file("root.crt")
    if default is not None:
        return File(str(default), "the default root certificate")
    if plan.mode in VERIFYING:
        raise DatabaseConnectionError(
            f"sslmode {plan.mode} ({plan.mode_origin}) checks the server's certificate, and no "
            "root certificate is given (PG_SSLROOTCERT, sslrootcert in the DSN, or "
            "~/.postgresql/root.crt).",
            suggestion="Set PG_SSLROOTCERT to the file of the CA that signed the server's "
            "certificate (for a managed service, its CA bundle), or to `system` for a server "
            "whose certificate a public CA signed.",
        )
    return None


def context(plan: TlsPlan) -> ssl.SSLContext:
    """The SSLContext for one new connection; raises DatabaseConnectionError naming the file
    and its setting when one cannot be used (never the passphrase)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = plan.mode == "verify-full"
    root = _root(plan)
    if root is None:
        ctx.verify_mode = ssl.CERT_NONE  # require without a root certificate: libpq's
    elif root.path == "system":
        ctx.load_default_certs()
    else:
        # libpq: with a root certificate at hand, require verifies as verify-ca does.
        _readable(root)
        _load(root, lambda: ctx.load_verify_locations(cafile=root.path))
    if plan.crl is not None:
        crl = plan.crl
        _readable(crl)
        _load(crl, lambda: ctx.load_verify_locations(cafile=crl.path))
        ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_CHAIN
    _client_certificate(ctx, plan)
    ctx.minimum_version = _version(plan.min_version or "TLSv1.2", "ssl_min_protocol_version")
    if plan.max_version:
        ctx.maximum_version = _version(plan.max_version, "ssl_max_protocol_version")
    if ssl.HAS_ALPN:
        ctx.set_alpn_protocols(["postgresql"])  # as asyncpg's own contexts: direct TLS needs it
    return ctx


def _load(file: File, load: Callable[[], object]) -> None:
    try:
        load()
    except ssl.SSLError as exc:
        raise DatabaseConnectionError(
            f"The TLS file {file.named()} holds no usable PEM certificate ({exc.reason}).",
            suggestion=f"{file.origin} must name a PEM file (-----BEGIN CERTIFICATE-----).",
            context={"setting": file.origin, "path": file.path},
        ) from None


def _client_certificate(ctx: ssl.SSLContext, plan: TlsPlan) -> None:
    cert, key = plan.cert, plan.key
    if cert is None:
        # libpq's default client certificate, used when present (asyncpg does the same).
        default = _home_file("postgresql.crt")
        if default is None:
            return
        cert = File(str(default), "the default client certificate")
        home_key = _home_file("postgresql.key")
        key = File(str(home_key), "the default client key") if home_key else None
    _readable(cert)
    if key is not None:
        _readable(key)
    passphrase = plan.password or ""
    try:
        # Always a passphrase callback: without one, OpenSSL would ask on the terminal.
        ctx.load_cert_chain(cert.path, key.path if key else None, password=lambda: passphrase)
    except ssl.SSLError as exc:
        reason = str(exc.reason or exc.library or "unreadable")
        named = f"{cert.named()} with {key.named()}" if key else cert.named()
        if _encrypted(key or cert):
            # OpenSSL says only "PEM lib" for a wrong passphrase, as for a file that is no PEM.
            how = "does not open it" if passphrase else "is not set"
            why, fix = (
                f"the key is encrypted and PG_SSLPASSWORD {how}",
                "Set PG_SSLPASSWORD to the key's passphrase (or use an unencrypted key file).",
            )
        elif "MISMATCH" in reason.upper():
            why, fix = "the key is not the certificate's", "Pair the certificate with its key."
        else:
            why, fix = (
                f"not a PEM certificate and key ({reason})",
                "PG_SSLCERT must name a PEM certificate and PG_SSLKEY its PEM private key.",
            )
        raise DatabaseConnectionError(
            f"The client certificate {named} cannot be used: {why}.",
            suggestion=fix,
            context={"setting": cert.origin, "path": cert.path},
        ) from None


def _encrypted(file: File) -> bool:
    """Whether a PEM key file is encrypted (PKCS#8's or OpenSSL's traditional header)."""
    try:
        with open(file.path, "rb") as pem:
            return b"ENCRYPTED" in pem.read(1 << 20)
    except OSError:
        return False


def _version(name: str, key: str) -> ssl.TLSVersion:
    try:
        return _VERSIONS[name]
    except KeyError:
        raise DatabaseConnectionError(
            f"{key} in the DSN is {name[:20]!r}: expected one of {', '.join(_VERSIONS)}."
        ) from None


def explain(exc: BaseException, plan: TlsPlan, host: str) -> DatabaseConnectionError | None:
    """What a failed TLS handshake means, naming the setting at fault; None if not TLS's."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        if exc.verify_code in _HOST_MISMATCH:
            return DatabaseConnectionError(
                f"The server's certificate does not name the host {host!r}: sslmode "
                f"verify-full ({plan.mode_origin}) checks the host name against the "
                "certificate; verify-ca checks only that a trusted CA signed it.",
                suggestion="Connect with the host name the certificate names (see its subject "
                "alternative names), or use sslmode verify-ca if any server holding a "
                "certificate from that CA may answer for this one.",
                context={"host": host, "sslmode": plan.mode},
            )
        root = plan.rootcert.named() if plan.rootcert else "the root certificate"
        return DatabaseConnectionError(
            f"The server's certificate is not trusted: no CA in {root} signed it "
            f"({exc.verify_message}).",
            suggestion="Set PG_SSLROOTCERT to the CA certificate that signed the server's "
            "certificate (for a managed service, its published CA bundle).",
            context={"setting": plan.rootcert.origin if plan.rootcert else None},
        )
    if isinstance(exc, ssl.SSLError) and "ALERT" in str(exc.reason or "").upper():
        # An alert from the server during the handshake: it refused our certificate (or
        # wanted one and got none).
        if plan.cert is None:
            return DatabaseConnectionError(
                f"The server ended the TLS handshake ({exc.reason}): it may require a client "
                "certificate.",
                suggestion="Set PG_SSLCERT and PG_SSLKEY to a client certificate the server's "
                "ssl_ca_file trusts.",
            )
        return refused(plan.cert, str(exc.reason))
    return None


def refused(cert: File, how: str) -> DatabaseConnectionError:
    """The server ended the connection over our client certificate (`how`: what it did)."""
    return DatabaseConnectionError(
        f"The server refused the client certificate {cert.named()} ({how}).",
        suggestion="The server must trust the CA that signed it (its ssl_ca_file), and the "
        "certificate must be valid now; the server's log says which check failed.",
        context={"setting": cert.origin, "path": cert.path},
    )
