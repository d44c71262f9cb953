"""What egress a sandbox may have: the ``Egress`` settings, the allowlist and the address check.

An allowlist entry is ``HOST``, ``HOST:PORT``, ``*.DOMAIN`` or ``*.DOMAIN:PORT`` (an IPv6 literal in
brackets); without a port it allows 80 and 443. ``*.example.org`` matches the subdomains of
example.org, not example.org itself. A host name is resolved on the host and the request goes to
the address found (pinned: the sandbox never resolves, and the broker connects to the address it
checked). An address that is not global (private, loopback, link-local, the cloud metadata
address, CGNAT, multicast, reserved) is refused unless an entry names that very address.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["AllowEntry", "Egress", "Refused", "Resolver", "check_address", "match_entry", "parse_entry"]

#: ``(host, port) -> addresses``; the default asks the host's resolver. Tests pass their own.
Resolver = Callable[[str, int], list[str]]
_DEFAULT_PORTS = (80, 443)


class Refused(Exception):
    """A request the broker will not send; ``str()`` is the reason the code is told."""


@dataclass(frozen=True)
class AllowEntry:
    host: str  # lower case; ``*.example.org`` kept as ``.example.org`` in ``suffix``
    suffix: str | None
    ports: tuple[int, ...]
    address: ipaddress.IPv4Address | ipaddress.IPv6Address | None  # the entry names an address


def parse_entry(text: str) -> AllowEntry:
    """``HOST[:PORT]`` as an entry; ValueError with a clear message when it is not one."""
    raw = text.strip().lower()
    host, port = raw, ""
    if raw.startswith("["):
        host, _, rest = raw[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise ValueError(f"egress entry {text!r}: expected [IPv6]:PORT")
        port = rest[1:]
    elif raw.count(":") == 1:
        host, port = raw.split(":")
    ports: tuple[int, ...] = _DEFAULT_PORTS
    if port:
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"egress entry {text!r}: the port must be a number from 1 to 65535")
        ports = (int(port),)
    suffix = None
    if host.startswith("*."):
        suffix = host[1:]
        host = host[2:]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
        labels = host.split(".")
        if not host or any(not label or not all(c.isalnum() or c == "-" for c in label) for label in labels):
            raise ValueError(f"egress entry {text!r} is not HOST[:PORT] or *.DOMAIN[:PORT]") from None
    if address is not None and suffix is not None:
        raise ValueError(f"egress entry {text!r}: a wildcard takes a domain, not an address")
    return AllowEntry(host=host, suffix=suffix, ports=ports, address=address)


def match_entry(entries: tuple[AllowEntry, ...], host: str, port: int) -> AllowEntry | None:
    """The first entry that allows ``host:port``, else None."""
    host = host.lower().rstrip(".")
    for entry in entries:
        if port not in entry.ports:
            continue
        if entry.suffix is not None:
            if host.endswith(entry.suffix) and len(host) > len(entry.suffix):
                return entry
        elif host == entry.host or (entry.address is not None and _same_address(host, entry.address)):
            return entry
    return None


def _same_address(host: str, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    try:
        return ipaddress.ip_address(host) == address
    except ValueError:
        return False


def _refused_kind(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for kind, test in (("loopback", ip.is_loopback), ("link-local", ip.is_link_local),
                       ("private", ip.is_private), ("multicast", ip.is_multicast),
                       ("unspecified", ip.is_unspecified), ("reserved", ip.is_reserved)):
        if test:
            return kind
    return None if ip.is_global else "non-global"


def check_address(entry: AllowEntry, host: str, port: int, resolve: Resolver) -> str:
    """The address to connect to for ``host:port`` under ``entry``: resolved once (pinned), and
    refused when not global unless the entry names that address. Raises Refused."""
    try:
        addresses = resolve(host, port)
    except OSError as exc:
        raise Refused(f"cannot resolve {host}: {exc.strerror or exc}") from None
    if not addresses:
        raise Refused(f"{host} resolves to no address")
    why = ""
    for text in addresses:
        ip = ipaddress.ip_address(text)
        kind = _refused_kind(ip)
        if kind is None or (entry.address is not None and ip == entry.address):
            return text
        why = f"{host} resolves to {text}, a {kind} address; list that address itself to allow it"
    raise Refused(why)


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class Egress(BaseModel):
    """Egress through the host's broker (``SandboxConfig(egress=...)``): what the code may reach
    and the caps on it. The sandbox keeps no network of its own; see ``sandbox/egress.py``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allow: tuple[str, ...] = Field(description="HOST, HOST:PORT, *.DOMAIN or *.DOMAIN:PORT (no port: 80 and 443)")
    secrets: dict[str, str] = Field(default_factory=dict, repr=False, exclude=True,
                                    description="NAME -> value put in for {{secret:NAME}} in a plain-HTTP header "
                                    "(never serialized: a snapshot's config has none)")
    port: int = Field(3128, ge=1, le=65535, description="the forwarder's port on the sandbox's loopback")
    max_request_bytes: int = Field(8 * 1024 * 1024, ge=1024, description="one request's head and body")
    max_response_bytes: int = Field(64 * 1024 * 1024, ge=1024, description="one response (or tunnel) inbound")
    request_timeout_s: float = Field(60.0, gt=0, description="one request (or tunnel), start to end")
    idle_timeout_s: float = Field(15.0, gt=0, description="the longest wait for the next byte (slow upstreams)")
    max_requests_per_run: int = Field(1000, ge=1)
    max_run_s: float | None = Field(None, gt=0, description="one run's egress: no request starts, and none stays "
                                    "open, later than this after the run began (None: the run's own time limit)")
    max_connections: int = Field(64, ge=1, le=1024, description="egress connections open at once, per session")
    max_run_bytes: int = Field(256 * 1024 * 1024, ge=1024, description="all requests of one run, both ways")
    rate_per_s: float = Field(50.0, gt=0, description="requests a second, per session (a bucket of `burst`)")
    burst: int = Field(50, ge=1)
    max_kept_bytes: int = Field(1024 * 1024, ge=0, description="a plain-HTTP response kept for replay, at most")

    @field_validator("allow")
    @classmethod
    def _entries(cls, allow: tuple[str, ...]) -> tuple[str, ...]:
        for text in allow:
            parse_entry(text)
        return allow

    @field_validator("secrets")
    @classmethod
    def _names(cls, secrets: dict[str, str]) -> dict[str, str]:
        bad = [name for name in secrets if not name.replace("_", "").isalnum()]
        if bad:
            raise ValueError(f"secret names are letters, digits and _, not {bad[0]!r}")
        if any(not value for value in secrets.values()):
            raise ValueError("a secret's value may not be empty")
        return secrets

    def entries(self) -> tuple[AllowEntry, ...]:
        return tuple(parse_entry(text) for text in self.allow)

    def __hash__(self) -> int:  # frozen, but the secrets dict is not hashable
        return hash((self.allow, tuple(sorted(self.secrets)), self.port))
