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
import ipaddress
import secrets
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from .config import Config, ServerConfig
from .config import key_digest as digest

__all__ = [
    "AdminAccess",
    "AllowedHosts",
    "KeyRing",
    "bearer",
    "digest",
    "foreign_origin",
    "new_key",
]


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


@dataclass(frozen=True)
class AllowedHosts:
    """The host names a browser may reach this gateway by (``server.allowed_hosts``).

        >>> hosts = AllowedHosts.from_server(ServerConfig(allowed_hosts=("gw.example", ".corp")))
        >>> hosts.allows("gw.example:8080"), hosts.allows("a.corp"), hosts.allows("evil.example")
        (True, True, False)

    NOTE: DNS rebinding. A page on ``http://evil.example:8080`` whose name the attacker then
    points at 127.0.0.1 reaches a gateway there as ``evil.example``: its ``Origin`` and ``Host``
    are both ``evil.example:8080``, so the Origin check takes it for the gateway's own page, and
    the browser lets it read the answers too. Only the ``Host`` it names gives it away.
    """

    #: Host names allowed as they are: lowercase, IPv6 without brackets, no trailing dot.
    names: frozenset[str] = frozenset()
    #: ``.corp.example``: that domain and its subdomains.
    domains: tuple[str, ...] = ()
    #: ``*``: any host (a gateway on a non-loopback address, unless configured).
    wildcard: bool = False

    @classmethod
    def from_server(cls, server: ServerConfig) -> AllowedHosts:
        """The configured hosts; without any, those of a gateway bound to ``server.host``.

        NOTE: a gateway on another address than loopback (0.0.0.0 in a container, a LAN
        address) is reached by names the gateway cannot know: it allows any host unless told.
        """
        listed = server.allowed_hosts
        if listed is None:
            if not _loopback(server.host):
                return cls(wildcard=True)
            listed = ("localhost", "127.0.0.1", "::1", server.host)
        names = {_bare(host) for host in listed}
        return cls(
            names=frozenset(n for n in names if n[0] not in ".*"),
            domains=tuple(sorted(n for n in names if n.startswith("."))),
            wildcard="*" in names,
        )

    def allows(self, host: str | None) -> bool:
        """Whether a request with this ``Host`` header may be answered.

        NOTE: a request without one is answered: every browser sends it, and the check
        is against browsers (a client of HTTP/1.0 may leave it out).
        """
        if self.wildcard or not host:
            return True
        name = _host_name(host)
        return name is not None and (
            name in self.names or any(name == d[1:] or name.endswith(d) for d in self.domains)
        )

    def named(self, host: str) -> bool:
        """Whether ``host`` (a name, no port) is listed by itself, not through ``*`` or a
        domain: a name of this gateway, so that a page there on its port is its own page."""
        return _bare(host) in self.names


def new_key(prefix: str = "cg-") -> str:
    """A fresh random key (256 bits)."""
    return prefix + secrets.token_urlsafe(32)


def bearer(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer ...`` header ("" when there is none)."""
    if authorization and authorization[:7].lower() == "bearer ":
        return authorization[7:].strip()
    return ""


def foreign_origin(headers: Mapping[str, str], hosts: AllowedHosts) -> bool:
    """Whether a browser sent this request for a page of another origin (``Origin``, which
    browsers send with every cross-origin request but a plain link's, names another host
    than ``Host``, or another port; a host that ``hosts`` names by itself, on the port of
    ``Host``, is another name of this gateway: ``http://localhost:8080`` calling
    ``http://127.0.0.1:8080``).

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
    if not page.hostname or page_port != port:
        return True
    return page.hostname != host.hostname and not hosts.named(page.hostname)


def _host_name(host: str) -> str | None:
    """The host name a ``Host`` header names (lowercase, IPv6 without brackets, no trailing
    dot); None when it names none as a browser sends it (a port that is no number, a path)."""
    try:
        split = urllib.parse.urlsplit("//" + host)
        split.port  # noqa: B018 (raises ValueError for a port that is no number)
    except ValueError:
        return None
    if split.path or split.query or split.fragment or "@" in split.netloc or not split.hostname:
        return None
    return _bare(split.hostname)


def _bare(name: str) -> str:
    """A host name as ``AllowedHosts`` compares it (``[::1]`` -> ``::1``, ``GW.`` -> ``gw``)."""
    return name.lower().removeprefix("[").removesuffix("]").rstrip(".")


def _loopback(address: str) -> bool:
    """Whether ``server.host`` binds only this machine's loopback (127.0.0.0/8, ::1)."""
    if _bare(address) == "localhost":
        return True
    try:
        return ipaddress.ip_address(_bare(address)).is_loopback
    except ValueError:  # (a name: it may resolve to any address)
        return False


#: NOTE: browsers leave a scheme's default port out of ``Origin`` and ``Host``, but a reverse
#: proxy may pass ``Host`` with it (nginx: ``$host:$server_port``): the gateway's own page was
#: refused. A ``Host`` without a port is taken as the page's scheme's default.
_DEFAULT_PORTS = {"http": 80, "https": 443}
