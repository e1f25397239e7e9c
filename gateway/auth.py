"""Who a request is: gateway keys map to tenants, the admin key opens the admin routes.

Keys are kept as SHA-256 digests only, whether the YAML gives the key (``key:``) or its digest
(``key_sha256:``), so a presented key is hashed once and looked up::

    >>> ring = KeyRing.from_config(config)
    >>> ring.tenant("sk-team-a")        # "team-a", or None for an unknown key
    >>> ring.admin_access("sk-admin")   # AdminAccess.GRANTED / DENIED / CLOSED / OPEN

NOTE: the admin policy. With no admin key and no gateway keys the admin routes are open (a
local gateway). With gateway keys but no admin key they are *closed*: a tenant key never opens
them, since /admin/cache/* and /metrics span every tenant. docs/security.md explains why.
"""

from __future__ import annotations

import enum
import secrets
import urllib.parse
from collections.abc import Mapping

from .config import Config
from .config import key_digest as digest

__all__ = ["AdminAccess", "KeyRing", "bearer", "digest", "foreign_origin", "new_key"]


class AdminAccess(enum.Enum):
    OPEN = "open"  # no keys configured at all
    GRANTED = "granted"  # the admin key was presented
    DENIED = "denied"  # an admin key is configured and this is not it
    CLOSED = "closed"  # tenants exist and no admin key is configured: nobody gets in


class KeyRing:
    """Digests of the gateway keys (→ tenant) and of the admin key."""

    def __init__(self, tenants: dict[str, str], admin: str | None) -> None:
        self._tenants = tenants  # sha256 hex digest -> tenant
        self._admin = admin  # sha256 hex digest, or None

    @classmethod
    def from_config(cls, config: Config) -> KeyRing:
        tenants = {k.key_sha256 or digest(k.key or ""): k.tenant for k in config.auth.keys}
        admin = config.admin.api_key_sha256
        if admin is None and config.admin.api_key is not None:
            admin = digest(config.admin.api_key)
        return cls(tenants, admin)

    @property
    def has_tenants(self) -> bool:
        return bool(self._tenants)

    def tenant(self, token: str) -> str | None:
        """The tenant of gateway key ``token``; None when it is not one."""
        # NOTE: a dict lookup of the digest: timing tells an attacker about digests of keys
        # they chose, never about the stored keys themselves.
        return self._tenants.get(digest(token)) if token else None

    def admin_access(self, token: str) -> AdminAccess:
        if self._admin is None:
            return AdminAccess.CLOSED if self._tenants else AdminAccess.OPEN
        if token and secrets.compare_digest(digest(token), self._admin):
            return AdminAccess.GRANTED
        return AdminAccess.DENIED


def new_key(prefix: str = "cg-") -> str:
    """A fresh random key (256 bits)."""
    return prefix + secrets.token_urlsafe(32)


def bearer(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer ...`` header ("" when there is none)."""
    if authorization and authorization[:7].lower() == "bearer ":
        return authorization[7:].strip()
    return ""


def foreign_origin(headers: Mapping[str, str]) -> bool:
    """Whether a browser sent this request for a page of another origin (``Origin``, which
    browsers send with every cross-origin request but a plain link's, names another host).

    NOTE: routes open to whoever reaches the port (no keys) on 127.0.0.1 are reached by the
    operator's browser as well: any web page it opened flushed the cache (admin routes) or
    made model calls (the API) with a cross-site POST (a text/plain body asks no CORS
    preflight). With a key a page cannot send it (the Authorization header needs a preflight
    the gateway never grants). Clients that are not browsers (the CLI, curl, the SDKs,
    Prometheus) send no Origin.
    """
    origin = headers.get("origin")
    if origin is None:
        return False
    try:
        page = urllib.parse.urlsplit(origin)  # ("null": a sandboxed page, a file)
        host = urllib.parse.urlsplit("//" + headers.get("host", ""))
        default = _DEFAULT_PORTS.get(page.scheme.lower())
        page_port, port = page.port or default, host.port or default
    except ValueError:  # ("http://[::1", a port that is no number: no origin a browser sends)
        return True
    return not page.hostname or (page.hostname, page_port) != (host.hostname, port)


#: NOTE: browsers leave a scheme's default port out of ``Origin`` and ``Host``, but a reverse
#: proxy may pass ``Host`` with it (nginx: ``$host:$server_port``): the gateway's own page was
#: refused. A ``Host`` without a port is taken as the page's scheme's default.
_DEFAULT_PORTS = {"http": 80, "https": 443}
