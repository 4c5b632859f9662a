"""Who a call is for, and what that caller may use: the `users:` and `auth:` sections of the
configuration file (`--config FILE`, configfile.py), and the identity each request carries.

The gateway (transport/gateway.py) finds the caller of each HTTP request (a static token, or
an OAuth 2.1 access token verified as a resource server) and sets `current_identity` for the
request; the SDK serves it in a task that inherits the gateway's context, so the registry
(which tools and resources are listed, which databases may be used) and the pool (which role
and settings a statement runs with, database/pool/engine.py) see the same caller. Over stdio
the identity is the configured one (`auth.stdio_user`), or none.

No identity (`None`) means the server's own login role, every database: the one-database,
environment-variables case, unchanged.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

# A custom setting's name as PostgreSQL accepts it in set_config: a dotted name (a prefix no
# built-in setting has), letters, digits and underscores.
SETTING_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)+$")
EVERY_DATABASE = "*"


class Grant(BaseModel):
    """What one user's statements run as in one database."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: str | None = Field(
        default=None,
        description="PostgreSQL role the user's statements run as (SET LOCAL ROLE, inside "
        "each call's transaction; the login role must be a member of it). None: the login role",
    )
    settings: dict[str, str] = Field(
        default_factory=dict,
        description="Custom settings set for each call (set_config(name, value, true)), e.g. "
        "{'app.tenant_id': 'a'}, for row-level security policies (current_setting(...))",
    )

    @field_validator("settings")
    @classmethod
    def _dotted(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not SETTING_NAME.match(name):
                raise ValueError(
                    f"setting {name!r} is not a custom setting name (like 'app.tenant_id'): "
                    "only dotted names can be set per call"
                )
        return value


class UserEntry(BaseModel):
    """One entry of `users:`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="The user's name (logs, audit, held results)")
    token: SecretStr | None = Field(
        default=None, description="A static bearer token that identifies this user over HTTP"
    )
    subject: str | None = Field(
        default=None,
        description="The `sub` claim of an OAuth access token that identifies this user",
    )
    databases: dict[str, Grant] = Field(
        default_factory=dict,
        description="The databases this user may use, by name ('*': every one), each with the "
        "role and settings its statements run with",
    )
    tools: list[str] | None = Field(
        default=None,
        description="The only tools this user may see and call (None: every tool)",
    )

    def grant(self, database: str) -> Grant | None:
        """What this user runs as in `database`, None when it may not use it."""
        return self.databases.get(database, self.databases.get(EVERY_DATABASE))


class OAuthSettings(BaseModel):
    """The server as an OAuth 2.1 resource server (MCP authorization, 2025-06-18 and later)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    issuer: str = Field(description="The authorization server's issuer (the `iss` claim)")
    audience: str = Field(
        description="This server's resource identifier (the `aud` claim tokens must carry)"
    )
    jwks_uri: str | None = Field(default=None, description="Where the issuer's signing keys are")
    introspection_endpoint: str | None = Field(
        default=None, description="RFC 7662 token introspection, for opaque tokens"
    )
    client_id: str | None = Field(default=None, description="For introspection")
    client_secret: SecretStr | None = Field(default=None, description="For introspection")
    required_scopes: list[str] = Field(default_factory=list)
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256"])
    resource_url: str | None = Field(
        default=None,
        description="This server's public URL, named in the protected resource metadata",
    )
    user_claim: str = Field(
        default="sub", description="The claim that names a user entry's `subject`"
    )

    @model_validator(mode="after")
    def _verifiable(self) -> OAuthSettings:
        if self.jwks_uri is None and self.introspection_endpoint is None:
            raise ValueError("oauth needs jwks_uri (JWT access tokens) or introspection_endpoint")
        return self


class AuthSettings(BaseModel):
    """The `auth:` section."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    oauth: OAuthSettings | None = None
    stdio_user: str | None = Field(
        default=None, description="The user entry a stdio client is (stdio has no tokens)"
    )
    user_setting: str | None = Field(
        default="mcp.user_id",
        description="Custom setting carrying the caller's user name in each call (None: not set)",
    )
    claims_setting: str | None = Field(
        default="mcp.claims",
        description="Custom setting that carries the caller's token claims as JSON (None: not set)",
    )
    audit_parameters: bool = Field(
        default=False, description="Audit lines include parameter values (never by default)"
    )

    @field_validator("user_setting", "claims_setting")
    @classmethod
    def _custom(cls, value: str | None) -> str | None:
        # Set per call with set_config: a built-in name ('role', 'search_path') would run
        # the call as a role named after the user, or on another path.
        if value is not None and not SETTING_NAME.match(value):
            raise ValueError(
                f"{value!r} is not a custom setting name (like 'mcp.user_id'): only dotted "
                "names can be set per call"
            )
        return value


@dataclass(frozen=True)
class Identity:
    """The caller of one request: a user entry, and the claims of its token (OAuth)."""

    user: UserEntry
    claims: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.user.name


current_identity: ContextVar[Identity | None] = ContextVar("pg_mcp_identity", default=None)
