"""Who may call, as whom: the `users:` entries and the `auth:` section, as the transports use
them (the HTTP gateway finds a request's user by its bearer token, stdio takes
`auth.stdio_user`) and the registry filters what a caller is shown.

An `Access` is handed to the server (`PgMcp(access=...)`, `http_app(access=...)`); the
configuration file's parser (configfile.py) makes it. None, or no users: today's behaviour
(MCP_AUTH_TOKENS over HTTP, no identity, the login role, every tool).
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pg_mcp_server.identity import AuthSettings, Identity, UserEntry, current_identity
from pg_mcp_server.results.owner import caller

if TYPE_CHECKING:
    from pg_mcp_server.database.pool import Database

logger = logging.getLogger(__name__)

USER_OWNER = "user:"  # results/owner.py's caller for an identified user: "user:" + name


@dataclass(frozen=True)
class Access:
    users: tuple[UserEntry, ...] = ()
    auth: AuthSettings = field(default_factory=AuthSettings)

    def __post_init__(self) -> None:
        names = [u.name for u in self.users]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"users: {', '.join(twice)} named more than once")
        subjects = [u.subject for u in self.users if u.subject is not None]
        if len(subjects) != len(set(subjects)):
            raise ValueError("users: two entries have the same subject")
        tokens = [u.token.get_secret_value() for u in self.users if u.token is not None]
        if len(tokens) != len(set(tokens)):
            raise ValueError("users: two entries have the same token")
        if self.auth.oauth is not None and not self.users:
            raise ValueError("auth.oauth: no users: a token's subject must name a user entry")
        if self.auth.stdio_user is not None and self.auth.stdio_user not in names:
            raise ValueError(f"auth.stdio_user {self.auth.stdio_user!r} is not in users:")

    @property
    def identifies(self) -> bool:
        """Whether callers are users (else: today's behaviour)."""
        return bool(self.users)

    def by_token(self, token: bytes) -> UserEntry | None:
        """The user whose static token this is. Compared with every one, always, so timing
        says nothing about which one matched (nor whether one did)."""
        found = None
        for user in self.users:
            if user.token is None:
                continue
            if hmac.compare_digest(token, user.token.get_secret_value().encode()):
                found = user
        return found

    def by_subject(self, subject: str) -> UserEntry | None:
        """The user an OAuth access token's subject (`auth.oauth.user_claim`) names."""
        return next((u for u in self.users if u.subject == subject), None)

    def stdio_identity(self) -> Identity | None:
        """The identity of a stdio client (`auth.stdio_user`), None when not configured."""
        name = self.auth.stdio_user
        user = next((u for u in self.users if u.name == name), None)
        return None if user is None else Identity(user)


def owner_of(identity: Identity) -> str:
    """The caller held results and the query history belong to (results/owner.py)."""
    return USER_OWNER + identity.name


def enter_stdio(access: Access | None) -> None:
    """For a stdio server's whole run (the tasks it starts inherit the context): the
    configured `auth.stdio_user`, when there is one; stdio carries no token."""
    identity = access.stdio_identity() if access is not None else None
    if identity is not None:
        current_identity.set(identity)
        caller.set(owner_of(identity))


def shown() -> frozenset[str] | None:
    """What the current caller may see and use, by name: tools, resource URIs, URI templates
    and prompts (its `tools:` list); None for everything (no identity, or no list), so the
    one-user case does no filtering at all. A resource or template that is a tool's answer
    (pg://schemas/..., a table's sample) is shown with its tool (primitives/registry.py)."""
    identity = current_identity.get()
    if identity is None or identity.user.tools is None:
        return None
    return frozenset(identity.user.tools)


async def warn_unusable_roles(db: Database, access: Access) -> None:
    """At start: one warning naming the users whose grant for `db` names a role the login
    role cannot act as (their calls are refused, PERMISSION_DENIED, until that is fixed).
    A database that cannot be reached now is not checked (its calls will say so)."""
    grants = {u.name: u.grant(db.name) for u in access.users}
    roles = {n: g.role for n, g in grants.items() if g is not None and g.role is not None}
    if not roles:
        return
    try:
        unusable = set(await db.unusable_roles(roles.values()))
    except Exception as exc:
        logger.info("users' roles not checked at start (%s)", type(exc).__name__)
        return
    found = [f"{name} ({role})" for name, role in sorted(roles.items()) if role in unusable]
    if found:
        logger.warning(
            "database %r: the login role cannot act as the role of %s (no such role, or not "
            "a member of it): those users' calls will be refused; GRANT the role to the "
            "login role or fix users:",
            db.name,
            ", ".join(found),
        )
