"""OAuth 2.1 access tokens, verified as a resource server (MCP authorization, 2025-06-18 and
later): a JWT signed by one of the issuer's keys (its JWKS, fetched over HTTP and cached), for
this server (`aud`), from the issuer (`iss`), not expired (`exp`, `nbf`, a little leeway),
signed with an allowed asymmetric algorithm (never `none`, never an HMAC: a public key must
not verify an HMAC), with the required scopes. Each refusal says which check failed, never
the token (RFC 6750 3: `error_description` in WWW-Authenticate, transport/gateway.py).

The SDK's `TokenVerifier` protocol is what `JwtVerifier.verify_token` answers (an
`AccessToken`, or None); `check` says why a token is refused. Opaque tokens are asked of the
authorization server instead (identity/introspection.py); `verifier` picks.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol

import httpx2 as httpx
import jwt
from mcp.server.auth.provider import AccessToken

from pg_mcp_server.identity import OAuthSettings

logger = logging.getLogger(__name__)

LEEWAY_S = 30  # clock skew allowed for exp and nbf
JWKS_REFETCH_S = 60.0  # an unknown key id fetches the JWKS again at most this often
JWKS_RETRY_S = 5.0  # after a failed fetch, tokens are answered 503 this long without one
JWKS_TIMEOUT = httpx.Timeout(10.0, connect=5.0)
JWKS_MAX_BYTES = 1_000_000
ASYMMETRIC = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)


class TokenRejected(Exception):
    """A bearer token refused: `status` 401 (`invalid_token`), 403 (`insufficient_scope`) or
    503 (the issuer's keys could not be had); `description` says which check failed."""

    def __init__(self, description: str, status: int = 401, error: str = "invalid_token"):
        super().__init__(description)
        self.description = description
        self.status = status
        self.error = error


def insufficient_scope(description: str) -> TokenRejected:
    return TokenRejected(description, 403, "insufficient_scope")


@dataclass
class _Keys:
    by_kid: dict[str, jwt.PyJWK]
    fetched_at: float


class Verifier(Protocol):
    async def check(self, token: str) -> AccessToken: ...


class SdkVerifier:
    """The SDK's TokenVerifier protocol over `check` (JWTs and introspection alike)."""

    async def check(self, token: str) -> AccessToken:
        raise NotImplementedError

    async def verify_token(self, token: str) -> AccessToken | None:
        """The token's access, None when refused."""
        try:
            return await self.check(token)
        except TokenRejected:
            return None


class Verifiers:
    """JWTs against the JWKS (`jwks_uri`), other tokens by introspection
    (`introspection_endpoint`), as configured."""

    def __init__(self, settings: OAuthSettings) -> None:
        from pg_mcp_server.identity.introspection import Introspector

        self.jwt = JwtVerifier(settings) if settings.jwks_uri is not None else None
        self.introspection = (
            Introspector(settings) if settings.introspection_endpoint is not None else None
        )

    async def check(self, token: str) -> AccessToken:
        looks_like_jwt = token.count(".") == 2
        if self.jwt is not None and (looks_like_jwt or self.introspection is None):
            return await self.jwt.check(token)
        assert self.introspection is not None  # (OAuthSettings requires one of them)
        return await self.introspection.check(token)


async def bounded_json(
    method: str, url: str, most: int, timeout: httpx.Timeout, **request: Any
) -> Any:
    """The JSON answer of one request, read up to `most` bytes (ValueError past that, or for
    a status other than 200); no redirect is followed."""
    body = bytearray()
    async with (
        httpx.AsyncClient(timeout=timeout, follow_redirects=False) as http,
        http.stream(method, url, headers={"Accept": "application/json"}, **request) as reply,
    ):
        if reply.status_code != 200:
            raise ValueError(f"HTTP {reply.status_code}")
        async for chunk in reply.aiter_bytes():
            body += chunk
            if len(body) > most:
                raise ValueError(f"over {most} bytes")
    return json.loads(body)


class JwtVerifier(SdkVerifier):
    """Verifies JWT access tokens against the issuer's JWKS (`oauth.jwks_uri`)."""

    def __init__(self, settings: OAuthSettings) -> None:
        assert settings.jwks_uri is not None
        refused = [a for a in settings.algorithms if a not in ASYMMETRIC]
        if refused or not settings.algorithms:
            raise ValueError(
                f"auth.oauth.algorithms: {', '.join(refused) or 'none given'}: only asymmetric "
                f"signatures are accepted ({', '.join(sorted(ASYMMETRIC))}); an HMAC or 'none' "
                "would let a token be made with what is public"
            )
        self.settings = settings
        self.jwks_uri = settings.jwks_uri
        self.algorithms = list(settings.algorithms)
        self.refetch_s = JWKS_REFETCH_S
        self._keys: _Keys | None = None
        self._failed_at = -JWKS_RETRY_S  # (monotonic) when a fetch last failed
        self._fetching = asyncio.Lock()

    async def check(self, token: str) -> AccessToken:
        """The verified token, or TokenRejected saying which check failed."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise TokenRejected("not a JWT access token") from None
        alg = header.get("alg")
        if alg not in self.algorithms:
            raise TokenRejected(f"signing algorithm {str(alg)[:20]!r} is not accepted")
        kid = header.get("kid")
        key = await self._key(kid if isinstance(kid, str) else None)
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key.key,
                algorithms=[alg],
                audience=self.settings.audience,
                issuer=self.settings.issuer,
                leeway=LEEWAY_S,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise TokenRejected("the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise TokenRejected("the token is not valid yet (nbf)") from None
        except jwt.InvalidAudienceError:
            raise TokenRejected("the token is not for this server (aud)") from None
        except jwt.InvalidIssuerError:
            raise TokenRejected("the token is from another issuer (iss)") from None
        except jwt.InvalidSignatureError:
            raise TokenRejected("bad signature") from None
        except jwt.MissingRequiredClaimError as exc:
            raise TokenRejected(f"the token has no {exc.claim!r} claim") from None
        except jwt.PyJWTError as exc:
            raise TokenRejected(f"the token cannot be read ({type(exc).__name__})") from None
        scopes = scopes_of(claims)
        missing = [s for s in self.settings.required_scopes if s not in scopes]
        if missing:
            raise insufficient_scope(f"the token lacks the scope {' '.join(missing)}")
        subject = claims.get(self.settings.user_claim)
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id") or claims.get("azp") or ""),
            scopes=scopes,
            expires_at=int(claims["exp"]),
            resource=self.settings.audience,
            subject=None if subject is None else str(subject),
            claims=claims,
        )

    async def _key(self, kid: str | None) -> jwt.PyJWK:
        keys = self._keys or await self._refresh(None)
        found = _pick(keys, kid)
        if found is None:
            # A key the cache does not know: the issuer may have rotated its keys. Fetched
            # again at most every `refetch_s`, so tokens naming made-up key ids cannot
            # make the server hammer the issuer.
            keys = await self._refresh(keys)
            found = _pick(keys, kid)
        if found is None:
            raise TokenRejected("the token is signed by an unknown key (kid)")
        return found

    async def _refresh(self, seen: _Keys | None) -> _Keys:
        async with self._fetching:
            now = time.monotonic()
            current = self._keys
            if current is not None and (
                current is not seen or now - current.fetched_at < self.refetch_s
            ):
                return current  # fetched meanwhile, or recently enough
            if current is None and now - self._failed_at < JWKS_RETRY_S:
                # The issuer was just unreachable: each request must not wait for it again
                # (nor make the server hammer it).
                raise TokenRejected("the issuer's signing keys are unavailable", 503, "")
            try:
                self._keys = _Keys(await self._fetch(), now)
            except TokenRejected:
                self._failed_at = time.monotonic()
                if current is None:
                    raise
                logger.warning("auth: the issuer's keys could not be fetched again; kept")
                self._keys = _Keys(current.by_kid, now)
            return self._keys

    async def _fetch(self) -> dict[str, jwt.PyJWK]:
        try:
            said = await bounded_json("GET", self.jwks_uri, JWKS_MAX_BYTES, JWKS_TIMEOUT)
            found = jwt.PyJWKSet.from_dict(said)
        except (httpx.HTTPError, ValueError, jwt.PyJWTError) as exc:
            logger.warning("auth: the issuer's keys (jwks_uri) are unavailable: %s", _said(exc))
            raise TokenRejected("the issuer's signing keys are unavailable", 503, "") from None
        return {k.key_id or "": k for k in found.keys}


def _pick(keys: _Keys, kid: str | None) -> jwt.PyJWK | None:
    if kid is not None:
        return keys.by_kid.get(kid)
    # No kid: only unambiguous with one key.
    return next(iter(keys.by_kid.values())) if len(keys.by_kid) == 1 else None


def scopes_of(claims: dict[str, Any]) -> list[str]:
    """`scope` (RFC 9068: space separated), or `scp` (a list, as some issuers send it)."""
    scope = claims.get("scope")
    if isinstance(scope, str):
        return scope.split()
    scp = claims.get("scp")
    if isinstance(scp, list):
        return [str(s) for s in scp]
    return scp.split() if isinstance(scp, str) else []


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"
