"""Opaque OAuth access tokens, asked of the authorization server (RFC 7662 token
introspection) at `oauth.introspection_endpoint`, with this server's `client_id` and
`client_secret` (HTTP Basic, RFC 7662 2.1). An answer is used only when `active`, from the
issuer (`iss`, when it says), for this server (`aud` must name `audience`: an introspection
answer without it is refused, as a token not bound to this server), not expired, with the
required scopes. An active answer is kept for at most CACHE_S (never past the token's `exp`),
by a hash of the token, so that a client's calls do not each cost a round trip to the
authorization server; a revoked token is therefore refused at most CACHE_S later. Any caller,
with any made-up token, makes the server ask: after a failed ask the server answers 503 for
RETRY_S without asking again (as for an unreachable JWKS), so that an authorization server
that is down or refusing is not hammered by a flood of tokens, with this server's own client
credentials, nor each request kept waiting on its timeout (attack7 F4).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from typing import Any

import httpx2 as httpx
from mcp.server.auth.provider import AccessToken

from pg_mcp_server.identity import OAuthSettings
from pg_mcp_server.identity.oauth import (
    JWKS_RETRY_S,
    LEEWAY_S,
    SdkVerifier,
    TokenRejected,
    bounded_json,
    insufficient_scope,
    scopes_of,
)

logger = logging.getLogger(__name__)

CACHE_S = 30.0
CACHED = 1000  # tokens' answers kept at most
TIMEOUT = httpx.Timeout(10.0, connect=5.0)
MAX_BYTES = 100_000
RETRY_S = JWKS_RETRY_S  # after a failed ask, tokens are answered 503 this long without one


class Introspector(SdkVerifier):
    """Verifies opaque access tokens by asking the authorization server (RFC 7662)."""

    def __init__(self, settings: OAuthSettings) -> None:
        assert settings.introspection_endpoint is not None
        if settings.client_id is None or settings.client_secret is None:
            raise ValueError(
                "auth.oauth: introspection_endpoint needs client_id and client_secret (this "
                "server's credentials at the authorization server)"
            )
        self.settings = settings
        self.endpoint = settings.introspection_endpoint
        self._auth = (settings.client_id, settings.client_secret.get_secret_value())
        self._cache: OrderedDict[str, tuple[float, AccessToken]] = OrderedDict()
        self._failed_at = -RETRY_S  # (monotonic) when an ask last failed

    async def check(self, token: str) -> AccessToken:
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.time()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        self._cache.pop(key, None)
        said = await self._ask(token)
        checked = self._checked(token, said, now)
        until = min(now + CACHE_S, float(checked.expires_at or now + CACHE_S))
        self._cache[key] = (until, checked)
        while len(self._cache) > CACHED:
            self._cache.popitem(last=False)
        return checked

    def _checked(self, token: str, said: dict[str, Any], now: float) -> AccessToken:
        s = self.settings
        if said.get("active") is not True:
            raise TokenRejected("the token is not active (introspection)")
        if "iss" in said and said["iss"] != s.issuer:
            raise TokenRejected("the token is from another issuer (iss)")
        audience = said.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if s.audience not in audiences:
            raise TokenRejected("the token is not for this server (aud)")
        exp = said.get("exp")
        if isinstance(exp, int | float) and exp + LEEWAY_S < now:
            raise TokenRejected("the token has expired")
        nbf = said.get("nbf")
        if isinstance(nbf, int | float) and nbf - LEEWAY_S > now:
            raise TokenRejected("the token is not valid yet (nbf)")
        scopes = scopes_of(said)
        missing = [x for x in s.required_scopes if x not in scopes]
        if missing:
            raise insufficient_scope(f"the token lacks the scope {' '.join(missing)}")
        subject = said.get(s.user_claim)
        return AccessToken(
            token=token,
            client_id=str(said.get("client_id") or ""),
            scopes=scopes,
            expires_at=int(exp) if isinstance(exp, int | float) else None,
            resource=s.audience,
            subject=None if subject is None else str(subject),
            claims=said,
        )

    async def _ask(self, token: str) -> dict[str, Any]:
        if time.monotonic() - self._failed_at < RETRY_S:
            raise TokenRejected("the authorization server did not answer", 503, "")
        try:
            said = await bounded_json(
                "POST",
                self.endpoint,
                MAX_BYTES,
                TIMEOUT,
                data={"token": token, "token_type_hint": "access_token"},
                auth=self._auth,
            )
            if not isinstance(said, dict):
                raise ValueError("not a JSON object")
        except (httpx.HTTPError, ValueError) as exc:
            self._failed_at = time.monotonic()
            logger.warning(
                "auth: token introspection failed: %s: %s", type(exc).__name__, str(exc)[:200]
            )
            raise TokenRejected("the authorization server did not answer", 503, "") from None
        return said
