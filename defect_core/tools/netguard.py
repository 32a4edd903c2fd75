"""Where the `fetch` tool may connect: the guard against server-side request forgery.

Owns the address rules (which IP addresses are not reachable by default and why), the
allow-list (`[fetch] allow` in the configuration, see `defect_core/config.py`), and
`NetGuard.vet`, which turns a URL's host and port into the one address to connect to.

Invariants:
- Only an address that passed the rules (or an allow-list entry) is ever returned, and the
  caller connects to exactly that address (`defect_core/tools/fetch.py` pins the connection
  to it while sending the original Host and TLS server name). The name is resolved once per
  hop, here, so a DNS answer that changes between the check and the connection (DNS
  rebinding) cannot carry a request to an address nobody checked.
- A host name is judged by EVERY address it resolves to: one private address among public
  ones refuses the host (an attacker controls which address a client would pick).
- Refused by default: loopback, link-local, private, unique-local, multicast, unspecified
  and every other non-global address (shared, reserved, documentation ranges), IPv4 inside
  IPv6 (`::ffff:127.0.0.1`, NAT64, 6to4, Teredo) judged by the IPv4 address it carries, and
  cloud metadata endpoints by address (169.254.169.254, fd00:ec2::254, …) and by name
  (metadata.google.internal, …).
- An allow-list entry opens exactly what it names: `host` (any port) or `host:port`, where
  host is a name as written in the URL or an IP address the name resolves to.
- Resolution runs off the event loop (`anyio.getaddrinfo` uses a worker thread); tests
  inject a resolver at this boundary (`NetGuard(resolve=...)`), production uses
  `system_resolve`.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import anyio

from defect_core.tools.base import ToolError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]
"""(host, port) → the IP addresses the host name resolves to (raises OSError when none)."""

METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, …
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "100.100.100.200",  # Alibaba Cloud
    )
)
METADATA_HOSTS = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.internal",
    }
)
_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class Refused(ToolError):
    """The destination is not reachable under the guard's rules; the message says why."""


async def system_resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to, through the system resolver, in a worker thread."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses: list[str] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        address = str(sockaddr[0]).split("%", 1)[0]  # drop an IPv6 zone (fe80::1%eth0)
        if address not in addresses:
            addresses.append(address)
    return addresses


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None


def blocked_reason(address: IPAddress) -> str | None:
    """Why `address` is not reachable by default (e.g. "a loopback address"), or None."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = _embedded_ipv4(address)
        if inner is not None:
            reason = blocked_reason(inner)
            return f"{reason} (inside the IPv6 address {address})" if reason else None
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if isinstance(address, ipaddress.IPv6Address) and address in _UNIQUE_LOCAL:
        return "a unique-local address"
    if address.is_private:
        return "a private address"
    if not address.is_global:
        return "a reserved, shared or documentation address, not a public one"
    return None


def _ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _norm_host(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


@dataclass(frozen=True, slots=True)
class AllowEntry:
    host: str
    """A host name (lower case, no trailing dot) or an IP address in its canonical form."""
    port: int | None
    """None: any port."""

    @classmethod
    def parse(cls, entry: str) -> AllowEntry:
        """`host`, `host:port`, an IP address, `[v6]:port`; ValueError when it is none."""
        text = entry.strip()
        port: int | None = None
        if text.startswith("["):
            host, sep, rest = text[1:].partition("]")
            if not sep or (rest and not rest.startswith(":")):
                raise ValueError(f"not host or host:port: {entry!r}")
            port_text = rest[1:] if rest else None
        elif text.count(":") == 1:
            host, _, port_text = text.partition(":")
        else:
            host, port_text = text, None
        if port_text is not None:
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise ValueError(f"not a port number in {entry!r}")
            port = int(port_text)
        host = _norm_host(host)
        if not host or any(c in host for c in "/@ \t?#") or (":" in host and _ip(host) is None):
            raise ValueError(f"not host or host:port: {entry!r}")
        address = _ip(host)
        return cls(str(address) if address is not None else host, port)

    def matches(self, host: str, port: int) -> bool:
        return self.host == host and (self.port is None or self.port == port)


@dataclass(frozen=True, slots=True)
class Destination:
    """Where one request goes: the URL's host and port, and the vetted address to dial."""

    host: str
    port: int
    address: str


class NetGuard:
    """Vets destinations against the rules and the allow-list (see the module docstring)."""

    def __init__(self, allow: Iterable[str] = (), resolve: Resolver = system_resolve) -> None:
        entries: list[AllowEntry] = []
        for entry in allow:
            try:
                entries.append(AllowEntry.parse(entry))
            except ValueError as exc:
                raise ToolError(f"fetch is misconfigured: [fetch] allow: {exc}") from None
        self._allow = tuple(entries)
        self._resolve = resolve

    def allowed(self, host: str, port: int) -> bool:
        host = _norm_host(host)
        address = _ip(host)
        key = str(address) if address is not None else host
        return any(entry.matches(key, port) for entry in self._allow)

    async def vet(self, host: str, port: int) -> Destination:
        """The address to connect to for `host:port`, or `Refused` saying why not."""
        name = _norm_host(host)
        shown = f"{host}:{port}"
        literal = _ip(name)
        if literal is not None:
            if not self.allowed(name, port):
                reason = blocked_reason(literal)
                if reason is not None:
                    raise Refused(_refusal(shown, f"{literal} is {reason}"))
            return Destination(name, port, str(literal))
        by_name = self.allowed(name, port)
        if name in METADATA_HOSTS and not by_name:
            raise Refused(_refusal(shown, f"{name} is a cloud metadata host"))
        try:
            addresses = await self._resolve(name, port)
        except OSError as exc:
            raise ToolError(f"cannot resolve the host {name}: {exc}") from None
        parsed = [a for a in (_ip(text) for text in addresses) if a is not None]
        if not parsed:
            raise ToolError(f"cannot resolve the host {name}: no address")
        if not by_name:
            for address in parsed:
                if self.allowed(str(address), port):
                    continue
                reason = blocked_reason(address)
                if reason is not None:
                    raise Refused(_refusal(shown, f"{name} resolves to {address}, {reason}"))
        return Destination(name, port, str(parsed[0]))


def _refusal(shown: str, why: str) -> str:
    return (
        f"refused to fetch {shown}: {why}. fetch only reaches public addresses; the user can "
        'open this host with `[fetch] allow = ["host:port"]` in the defect configuration.'
    )
