"""OAuth 2.1 access tokens (issue 24): JWTs signed by a key the test serves as a JWKS over a
loopback HTTP server, checked as a resource server (issuer, audience, expiry, signature, key
id, algorithm, scopes), protected resource metadata (RFC 9728) and the 401/403 challenges
(RFC 6750, MCP authorization)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2 as httpx
import jwt
import pytest
import pytest_asyncio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from identitybed import Tenants, client_as, serving, tenants_in
from mcpclient import call, records
from pgbed import PgServer

from pg_mcp_server.config import Settings
from pg_mcp_server.identity import AuthSettings, Grant, OAuthSettings, UserEntry
from pg_mcp_server.identity.access import Access

ISSUER = "https://issuer.example.test"
AUDIENCE = "https://mcp.example.test/mcp"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


class Jwks:
    """The issuer's JWKS on a loopback port, counting the fetches."""

    def __init__(self) -> None:
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key()))
        self.body = json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "RS256", "use": "sig"}]})
        self.fetches = 0
        self.status = 200
        jwks = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                jwks.fetches += 1
                data = jwks.body.encode()
                self.send_response(jwks.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks.json"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def jwks() -> Iterator[Jwks]:
    served = Jwks()
    yield served
    served.close()


@pytest_asyncio.fixture(loop_scope="session")
async def tenants(pg: PgServer) -> AsyncIterator[Tenants]:
    async with tenants_in(pg, "oauth") as made:
        yield made


def token(key: Any = KEY, alg: str = "RS256", kid: str | None = "k1", **claims: Any) -> str:
    now = int(time.time())
    body = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice-sub",
        "iat": now,
        "exp": now + 600,
        "scope": "mcp:read profile",
        "org": "acme",
        **claims,
    }
    body = {k: v for k, v in body.items() if v is not None}
    headers = {"kid": kid} if kid is not None else {}
    return jwt.encode(body, key, algorithm=alg, headers=headers)


def _hs256_with_the_public_key() -> str:
    """The classic confusion: an HMAC whose secret is the issuer's public key, which anyone
    has (made by hand: PyJWT refuses to)."""
    secret = KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    head, body, _ = token().split(".")
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
    signature = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(signature)}"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def access(tenants: Tenants, jwks: Jwks, **oauth: Any) -> Access:
    users = (
        UserEntry(
            name="alice",
            subject="alice-sub",
            databases={"default": Grant(role=tenants.ta, settings={"app.tenant_id": "a"})},
        ),
        UserEntry(
            name="bob",
            subject="bob-sub",
            databases={"default": Grant(role=tenants.tb, settings={"app.tenant_id": "b"})},
        ),
    )
    settings = OAuthSettings(
        issuer=ISSUER,
        audience=AUDIENCE,
        jwks_uri=jwks.url,
        required_scopes=["mcp:read"],
        **oauth,
    )
    return Access(users, AuthSettings(oauth=settings))


def config(tenants: Tenants) -> Settings:
    return Settings.load(database={"dsn": tenants.dsn})


async def test_a_valid_token_is_its_subjects_user_with_its_claims(
    tenants: Tenants, jwks: Jwks
) -> None:
    async with serving(config(tenants), access(tenants, jwks)) as (base, _):
        for subject, ids in (("alice-sub", [1, 2]), ("bob-sub", [3, 4])):
            async with client_as(base, token(sub=subject)) as client:
                out = await call(
                    client,
                    "execute_query",
                    sql="SELECT id, current_setting('mcp.claims')::jsonb ->> 'org' AS org, "
                    "current_setting('mcp.claims')::jsonb ->> 'sub' AS sub FROM app.notes "
                    "ORDER BY id",
                )
                rows = records(out)
                assert [r["id"] for r in rows] == ids
                assert {(r["org"], r["sub"]) for r in rows} == {("acme", subject)}


@pytest.mark.parametrize(
    ("made", "said"),
    [
        (lambda: token(exp=int(time.time()) - 120), "expired"),
        (lambda: token(nbf=int(time.time()) + 600), "not valid yet"),
        (lambda: token(aud="https://other.example.test/mcp"), "not for this server (aud)"),
        (lambda: token(iss="https://evil.example.test"), "another issuer (iss)"),
        (lambda: token(key=OTHER_KEY), "bad signature"),
        (lambda: token(key=OTHER_KEY, kid="k9"), "unknown key (kid)"),
        (lambda: token(key=None, alg="none"), "'none' is not accepted"),
        (lambda: _hs256_with_the_public_key(), "'HS256' is not accepted"),
        (lambda: token(exp=None), "no 'exp' claim"),
        (lambda: "not-a-jwt", "not a JWT"),
    ],
    ids=[
        "expired",
        "not_yet",
        "audience",
        "issuer",
        "signature",
        "unknown_kid",
        "alg_none",
        "hs256_with_public_key",
        "no_exp",
        "garbage",
    ],
)
async def test_a_refused_token_gets_401_saying_which_check_failed(
    tenants: Tenants, jwks: Jwks, made: Any, said: str
) -> None:
    bad = made()
    async with (
        serving(config(tenants), access(tenants, jwks)) as (base, _),
        httpx.AsyncClient(timeout=30) as http,
    ):
        reply = await http.post(base + "/mcp", json={}, headers={"Authorization": f"Bearer {bad}"})
    assert reply.status_code == 401
    challenge = reply.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert 'error="invalid_token"' in challenge
    assert said in challenge, challenge
    assert (
        'resource_metadata="https://mcp.example.test/.well-known/oauth-protected-resource/mcp"'
        in challenge
    )
    assert bad not in challenge and bad not in reply.text


async def test_no_token_missing_scope_and_unknown_subject(tenants: Tenants, jwks: Jwks) -> None:
    async with (
        serving(config(tenants), access(tenants, jwks)) as (base, _),
        httpx.AsyncClient(timeout=30) as http,
    ):
        reply = await http.post(base + "/mcp", json={})
        assert reply.status_code == 401
        assert "error=" not in reply.headers["www-authenticate"]  # RFC 6750 3.1
        assert "resource_metadata=" in reply.headers["www-authenticate"]
        for bad, said in (
            (token(scope="profile"), "lacks the scope mcp:read"),
            (token(sub="mallory-sub"), "not a user of this server"),
        ):
            reply = await http.post(
                base + "/mcp", json={}, headers={"Authorization": f"Bearer {bad}"}
            )
            assert reply.status_code == 403
            challenge = reply.headers["www-authenticate"]
            assert 'error="insufficient_scope"' in challenge and said in challenge
            assert 'scope="mcp:read"' in challenge


async def test_protected_resource_metadata_is_served(tenants: Tenants, jwks: Jwks) -> None:
    async with (
        serving(config(tenants), access(tenants, jwks)) as (base, _),
        httpx.AsyncClient(timeout=30) as http,
    ):
        for path in (
            "/.well-known/oauth-protected-resource/mcp",
            "/.well-known/oauth-protected-resource",
        ):
            reply = await http.get(base + path)
            assert reply.status_code == 200
            assert reply.json() == {
                "resource": AUDIENCE,
                "authorization_servers": [ISSUER + "/"],
                "scopes_supported": ["mcp:read"],
                "bearer_methods_supported": ["header"],
            }


async def test_unknown_key_ids_fetch_the_jwks_again_at_most_once_a_minute(
    tenants: Tenants, jwks: Jwks
) -> None:
    async with (
        serving(config(tenants), access(tenants, jwks)) as (base, gateway),
        httpx.AsyncClient(timeout=30) as http,
    ):
        before = jwks.fetches
        good = {"Authorization": f"Bearer {token()}"}
        reply = await http.post(base + "/mcp", json={}, headers=good)
        assert reply.status_code != 401
        assert jwks.fetches == before + 1  # the first token fetched the keys
        for kid in ("k2", "k3", "k4"):
            bad = {"Authorization": f"Bearer {token(key=OTHER_KEY, kid=kid)}"}
            reply = await http.post(base + "/mcp", json={}, headers=bad)
            assert reply.status_code == 401
        assert jwks.fetches == before + 1, "no fetch again within a minute of the last"
        # The issuer rotates to a new key; once the interval has passed, a token naming it
        # fetches the keys again, once, and is accepted.
        rotated = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(OTHER_KEY.public_key()))
        served, jwks.body = jwks.body, json.dumps({"keys": [{**rotated, "kid": "k2"}]})
        assert gateway.callers is not None and gateway.callers.verifier is not None
        assert gateway.callers.verifier.jwt is not None
        gateway.callers.verifier.jwt.refetch_s = 0
        new = {"Authorization": f"Bearer {token(key=OTHER_KEY, kid='k2')}"}
        try:
            reply = await http.post(base + "/mcp", json={}, headers=new)
        finally:
            jwks.body = served
        assert reply.status_code != 401, reply.headers.get("www-authenticate")
        assert jwks.fetches == before + 2


def test_symmetric_algorithms_and_introspection_without_credentials_are_refused(
    jwks: Jwks,
) -> None:
    from pg_mcp_server.identity.oauth import Verifiers

    with pytest.raises(ValueError, match="only asymmetric"):
        Verifiers(
            OAuthSettings(issuer=ISSUER, audience=AUDIENCE, jwks_uri=jwks.url, algorithms=["HS256"])
        )
    with pytest.raises(ValueError, match="client_id and client_secret"):
        Verifiers(
            OAuthSettings(issuer=ISSUER, audience=AUDIENCE, introspection_endpoint=jwks.url + "/i")
        )


async def test_an_unavailable_issuer_is_503_and_not_asked_again_at_once(
    tenants: Tenants,
) -> None:
    from pg_mcp_server.identity.oauth import JWKS_RETRY_S

    failing = Jwks()
    failing.status = 500
    try:
        async with (
            serving(config(tenants), access(tenants, failing)) as (base, _),
            httpx.AsyncClient(timeout=30) as http,
        ):
            sent = token()
            bearer = {"Authorization": f"Bearer {sent}"}
            started = time.monotonic()
            for _ in range(3):
                reply = await http.post(base + "/mcp", json={}, headers=bearer)
                assert reply.status_code == 503
                assert reply.headers["retry-after"] == "5"
                assert sent not in reply.text
            assert time.monotonic() - started < JWKS_RETRY_S  # so this says something:
            assert failing.fetches == 1
    finally:
        failing.close()


class Introspection:
    """An authorization server's introspection endpoint on a loopback port: what it says of
    each opaque token, asked with this server's client credentials (else 401)."""

    def __init__(self) -> None:
        now = int(time.time())
        good = {"active": True, "iss": ISSUER, "aud": AUDIENCE, "scope": "mcp:read"}
        self.answers: dict[str, dict[str, Any]] = {
            "opaque-alice": {**good, "sub": "alice-sub", "exp": now + 600},
            "opaque-bob": {**good, "sub": "bob-sub", "aud": [AUDIENCE, "x"]},
            "opaque-revoked": {"active": False},
            "opaque-elsewhere": {**good, "sub": "alice-sub", "aud": "https://other.test"},
            "opaque-no-aud": {"active": True, "iss": ISSUER, "sub": "alice-sub"},
            "opaque-expired": {**good, "sub": "alice-sub", "exp": now - 600},
            "opaque-no-scope": {**good, "sub": "alice-sub", "scope": "profile"},
        }
        self.asked = 0
        served = self
        expected = "Basic " + base64.b64encode(b"mcp-server:s3cret").decode()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                served.asked += 1
                length = int(self.headers["Content-Length"])
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                if self.headers.get("Authorization") != expected:
                    self.send_response(401)
                    self.end_headers()
                    return
                said = served.answers.get(form["token"][0], {"active": False})
                data = json.dumps(said).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/introspect"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_opaque_tokens_by_introspection(tenants: Tenants, jwks: Jwks) -> None:
    """Opaque tokens go to the introspection endpoint (JWTs still to the JWKS): active, for
    this server, from the issuer, unexpired, with the scope; an answer is kept a while."""
    endpoint = Introspection()
    try:
        both = access(
            tenants,
            jwks,
            introspection_endpoint=endpoint.url,
            client_id="mcp-server",
            client_secret="s3cret",
        )
        async with (
            serving(config(tenants), both) as (base, _),
            httpx.AsyncClient(timeout=30) as http,
        ):
            for opaque, ids in (("opaque-alice", [1, 2]), ("opaque-bob", [3, 4])):
                async with client_as(base, opaque) as client:
                    out = await call(client, "execute_query", sql="SELECT id FROM app.notes")
                    assert sorted(r["id"] for r in records(out)) == ids
            async with client_as(base, token()) as client:  # a JWT: checked on the JWKS
                out = await call(client, "execute_query", sql="SELECT id FROM app.notes")
                assert sorted(r["id"] for r in records(out)) == [1, 2]
            asked = endpoint.asked
            assert asked == 2, "each opaque token asked about once, its answer kept"
            for opaque, status, said in (
                ("opaque-revoked", 401, "not active"),
                ("opaque-elsewhere", 401, "not for this server (aud)"),
                ("opaque-no-aud", 401, "not for this server (aud)"),
                ("opaque-expired", 401, "expired"),
                ("opaque-no-scope", 403, "lacks the scope mcp:read"),
            ):
                reply = await http.post(
                    base + "/mcp", json={}, headers={"Authorization": f"Bearer {opaque}"}
                )
                assert reply.status_code == status, opaque
                assert said in reply.headers["www-authenticate"], opaque
            async with client_as(base, "opaque-alice") as client:
                await call(client, "list_tables", schema_name="app")
            assert endpoint.asked == asked + 5, "opaque-alice's answer was kept"
    finally:
        endpoint.close()
