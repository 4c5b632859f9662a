"""Connection strings: check them at start-up, accept libpq's key=value form, describe the target.

asyncpg takes only URIs and reports a malformed one deep inside its first connect (a
traceback, or "could not be reached" for a scheme it does not know). Here a DSN is checked when
the settings load, so a typo fails the start with one line that names the problem; a libpq
`key=value` string becomes the equivalent URI; and the start-up log can say where the server
connects (host, port, database, user: never the password).
"""

from __future__ import annotations

import getpass
import os
import re
from dataclasses import dataclass
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

SCHEMES = ("postgresql", "postgres")
EXAMPLE = "postgresql://user@host:5432/dbname or 'host=... port=5432 dbname=... user=...'"
# The key=value keys that mean the same in a URI's query (as asyncpg reads it), plus two
# PostgreSQL takes as start-up parameters. libpq refuses unknown keys, and so do we.
KEYS = {
    "host", "port", "dbname", "user", "password", "passfile", "service", "sslmode", "sslcert",
    "sslkey", "sslrootcert", "sslcrl", "sslpassword", "sslnegotiation",
    "ssl_min_protocol_version", "ssl_max_protocol_version", "target_session_attrs",
    "krbsrvname", "gsslib", "application_name", "options",
}  # fmt: skip
_PAIR = re.compile(r"\s*([A-Za-z_]+)\s*=\s*")


class DsnError(ValueError):
    """A connection string that cannot work; the message never quotes the string itself."""


@dataclass(frozen=True)
class Target:
    """Where a connection goes, for messages (None: the driver's default applies)."""

    host: str | None
    port: str | None
    database: str | None
    user: str | None
    # Where the password comes from (never the password): "PG_PASSWORD", "the DSN", or None.
    password_from: str | None = None
    password_overridden: bool = False  # PG_PASSWORD set AND the DSN holds one: PG_PASSWORD wins

    def describe(self) -> str:
        user = self.user or os.environ.get("PGUSER") or _os_user()
        host = self.host or os.environ.get("PGHOST") or "localhost (or the local socket)"
        port = self.port or os.environ.get("PGPORT") or "5432"
        database = self.database or os.environ.get("PGDATABASE") or user
        password = self.password_from or "none given (~/.pgpass or PGPASSWORD, if any)"
        if self.password_overridden:
            password += ", which overrides the one in the DSN"
        return f"host {host}, port {port}, database {database}, user {user}, password {password}"


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (some containers)
        return "(current OS user)"


def to_uri(dsn: str) -> str:
    """The URI form of `dsn` (URIs pass unchanged), checked; raises DsnError."""
    text = dsn.strip()
    if "://" in text:
        _check_uri(text)
        return text
    if "=" not in text:
        raise DsnError(f"not a connection URI or key=value string; expected {EXAMPLE}")
    pairs = parse_keywords(text)
    if "port" in pairs:
        _check_ports(pairs["port"])
    return "postgresql://?" + urlencode(pairs, quote_via=quote)


def parse_keywords(text: str) -> dict[str, str]:
    """libpq's `key=value key2='quoted \\' value'` syntax."""
    pairs: dict[str, str] = {}
    pos = 0
    while pos < len(text.rstrip()):
        match = _PAIR.match(text, pos)
        if match is None:
            raise DsnError(
                f"key=value string: expected key=value at character {pos + 1}; expected {EXAMPLE}"
            )
        key, pos = match.group(1), match.end()
        if key not in KEYS:
            known = ", ".join(sorted(KEYS))
            raise DsnError(f"key=value string: unknown key {key!r} (known: {known})")
        value, pos = _value(text, pos, key)
        pairs[key] = value
    return pairs


def _value(text: str, pos: int, key: str) -> tuple[str, int]:
    if pos < len(text) and text[pos] == "'":
        out, pos = [], pos + 1
        while pos < len(text) and text[pos] != "'":
            if text[pos] == "\\" and pos + 1 < len(text):
                pos += 1
            out.append(text[pos])
            pos += 1
        if pos >= len(text):
            raise DsnError(f"key=value string: the quoted value of {key!r} is not closed")
        return "".join(out), pos + 1
    end = pos
    while end < len(text) and not text[end].isspace():
        end += 1
    return text[pos:end], end


# What a URI's user:password part may hold unencoded (RFC 3986 userinfo): letters, digits,
# `-._~`, sub-delimiters, `:` and percent-escapes.
_USERINFO = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:]|%[0-9A-Fa-f]{2}")
ENCODE_HINT = (
    'percent-encode it (python3 -c "import sys, urllib.parse; '
    "print(urllib.parse.quote(sys.argv[1], safe=''))\" 'the-password'), or leave the password "
    "out of the URI and set PG_PASSWORD (or use ~/.pgpass)"
)


def _check_userinfo(uri: str) -> None:
    """Refuse a user name or password holding a character that a URI must percent-encode
    (`/ ? # @ %` and others): the URI then splits in the wrong place, and the driver's own
    error quotes a fragment of the password as a port, a query field or a host name. Which
    character, or where, is never said: that would show part of the secret."""
    rest = uri.split("://", 1)[1]
    at = rest.rfind("@")
    if at < 0:
        return
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "@" in authority:
        userinfo = authority.rpartition("@")[0]
    else:
        # The '@' comes after a '/', '?' or '#'. In a query value (`?application_name=a@b`)
        # it is fine, unless the authority reads as user:password (no port after the ':').
        before = rest[:at]
        query = before.partition("?")[2]
        port = authority.rpartition(":")[2] if ":" in authority else ""
        no_password = ":" not in authority or port.replace(",", "").isdigit()
        if "=" in query and no_password:
            return
        userinfo = before
    if _USERINFO.sub("", userinfo):
        raise DsnError(
            "the user name or password in the connection URI holds a character a URI must "
            f"percent-encode (one of / ? # @ % [ ] or a space): {ENCODE_HINT}"
        )


def _check_uri(uri: str) -> None:
    _check_userinfo(uri)
    try:
        parts = urlsplit(uri)
        query = parse_qs(parts.query, strict_parsing=True) if parts.query else {}
    except ValueError as exc:
        raise DsnError(f"malformed connection URI ({exc}); expected {EXAMPLE}") from None
    if parts.scheme not in SCHEMES:
        raise DsnError(
            f"unsupported scheme {parts.scheme + '://'!r}: use postgresql:// (or postgres://), "
            f"as in {EXAMPLE}"
        )
    hosts = parts.netloc.rpartition("@")[2]
    ports = [_host_port(spec)[1] for spec in hosts.split(",")] if hosts else []
    for port in ports + query.get("port", []):
        _check_ports(port)


def _host_port(spec: str) -> tuple[str, str]:
    """`host:port`, `[::1]:port` or `host` (percent-encoded as in the URI)."""
    if spec.startswith("["):
        host, _, rest = spec[1:].partition("]")
        return host, rest.removeprefix(":")
    host, _, port = spec.partition(":")
    return host, port


def _check_ports(spec: str) -> None:
    for port in spec.split(","):
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):
            raise DsnError(f"port {unquote(port)[:20]!r} is not a number from 1 to 65535")


def ssl_params(dsn: str) -> dict[str, str]:
    """The TLS parameters in `dsn`'s query (libpq's names: sslmode, sslrootcert, ...), the last
    of each, as asyncpg reads them."""
    if "ssl" not in dsn:  # the common case, without parsing
        return {}
    query = parse_qs(urlsplit(to_uri(dsn)).query)
    return {k: v[-1] for k, v in query.items() if k.startswith("ssl")}


def target(dsn: str) -> Target:
    """What `dsn` (already checked) names; the parts it leaves out stay None."""
    parts = urlsplit(to_uri(dsn))
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    auth, _, hosts = parts.netloc.rpartition("@")
    user = unquote(auth.partition(":")[0]) if auth else None
    host, port = _host_port(hosts.split(",")[0])
    database = unquote(parts.path.lstrip("/")) or None
    has_password = ":" in auth or "password" in query
    return Target(
        host=query.get("host") or unquote(host) or None,
        port=query.get("port") or port or None,
        database=query.get("dbname") or query.get("database") or database,
        user=query.get("user") or user,
        password_from="the DSN" if has_password else None,
    )
