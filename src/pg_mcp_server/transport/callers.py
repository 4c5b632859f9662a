"""Who an HTTP request is, when users are configured (identity/): its bearer token is a
user's static token (compared in constant time with every one), or an OAuth 2.1 access token
(a JWT, identity/oauth.py, or an opaque token the authorization server is asked about,
identity/introspection.py) whose subject is a user's. A refused token gets 401 (RFC 6750 3.1:
`invalid_token`, saying which check failed, never the token), 403 (`insufficient_scope`: a
required scope missing, or a valid token whose subject is no user here) or 503 (the issuer's
keys could not be had), each with the challenge that names the protected resource metadata
(RFC 9728), which is served at `/.well-known/oauth-protected-resource[/mcp]`.
"""

from __future__ import annotations

import json

from mcp.server.auth.routes import build_resource_metadata_url
from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import AnyHttpUrl
from starlette.types import Scope

from pg_mcp_server.identity import Identity
from pg_mcp_server.identity.access import Access
from pg_mcp_server.identity.oauth import TokenRejected, Verifiers, insufficient_scope

RESOURCE_METADATA_PATH = "/.well-known/oauth-protected-resource"  # RFC 9728 3
MCP_PATH = "/mcp"


def bearer(scope: Scope) -> bytes | None:
    """The request's bearer token (RFC 6750 2.1), None when it carries none."""
    header = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
    scheme, _, token = header.partition(b" ")
    token = token.strip()
    return token if scheme.lower() == b"bearer" and token else None


class Callers:
    def __init__(self, access: Access) -> None:
        self.access = access
        oauth = access.auth.oauth
        self.verifier = Verifiers(oauth) if oauth is not None else None
        self.metadata: bytes | None = None
        self.challenge = 'Bearer realm="pg-mcp-server"'
        self.scopes = " ".join(oauth.required_scopes) if oauth is not None else ""
        if oauth is not None:
            resource = AnyHttpUrl(oauth.resource_url or oauth.audience)
            self.metadata = json.dumps(
                ProtectedResourceMetadata(
                    resource=resource,
                    authorization_servers=[AnyHttpUrl(oauth.issuer)],
                    scopes_supported=list(oauth.required_scopes) or None,
                    bearer_methods_supported=["header"],
                ).model_dump(mode="json", exclude_none=True)
            ).encode()
            self.challenge += f', resource_metadata="{build_resource_metadata_url(resource)}"'

    def metadata_at(self, path: str) -> bytes | None:
        """The protected resource metadata when `path` asks for it (RFC 9728 3.1: the
        well-known path with the resource's path appended; the bare one is served too)."""
        if self.metadata is None:
            return None
        wanted = path.rstrip("/") in (RESOURCE_METADATA_PATH, RESOURCE_METADATA_PATH + MCP_PATH)
        return self.metadata if wanted else None

    async def identify(self, scope: Scope) -> Identity:
        """The user the request's bearer token names, else TokenRejected saying why."""
        token = bearer(scope)
        if token is None:
            raise TokenRejected("", error="")  # no token: no error code (RFC 6750 3.1)
        user = self.access.by_token(token)
        if user is not None:
            return Identity(user)
        if self.verifier is None:
            raise TokenRejected("unknown bearer token")
        try:
            text = token.decode("ascii")
        except UnicodeDecodeError:
            raise TokenRejected("not an access token") from None
        checked = await self.verifier.check(text)
        subject = checked.subject
        user = self.access.by_subject(subject) if subject is not None else None
        if user is None:
            raise insufficient_scope("the token's subject is not a user of this server")
        return Identity(user, checked.claims or {})

    def refusal(self, refused: TokenRejected) -> tuple[int, str, dict[str, str]]:
        """The status, message and headers of the answer to a refused token."""
        if refused.status == 503:
            return 503, refused.description, {"Retry-After": "5"}
        challenge = self.challenge
        if refused.error:
            challenge += f', error="{refused.error}"'
            challenge += f', error_description="{_quotable(refused.description)}"'
        if self.scopes:
            challenge += f', scope="{self.scopes}"'
        message = refused.description or "Missing bearer token"
        return refused.status, message, {"WWW-Authenticate": challenge}


def _quotable(text: str) -> str:
    """A quoted-string's content for a challenge (RFC 6750 3: no '"' or backslash)."""
    return "".join(c for c in text if c not in '"\\' and 0x20 <= ord(c) < 0x7F)
