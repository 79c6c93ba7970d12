"""URL safety for the web tools: SSRF protection and the contamination blocklist.

The model chooses the URLs it visits, and a page it reads can redirect anywhere, so every hop
of every fetch is checked here before a connection is made:

* :class:`UrlPolicy` allows only ``http``/``https``, resolves the host and refuses loopback,
  private, link-local (cloud metadata at 169.254.169.254), multicast, reserved and unspecified
  addresses, IPv4 and IPv6 alike, including IPv4 addresses embedded in IPv6 ones. A host opened
  with ``--allow-host HOST[:PORT]`` skips the address check (a local test server, a lab proxy).
* :class:`Blocklist` keeps the benchmark's own pages (dataset, paper, code, and the HLE source
  of MEDMISHLE) out of search results and visits, so a search agent cannot look the answers up.

Refusals raise :class:`~medmis.tools._types.ToolError` with ``kind="refused"`` and a message written
for the model: it says what was refused and why, so the agent can pick another source.

Limit: the address check resolves the host itself and the HTTP client resolves it again when
it connects, so a DNS server that answers differently within seconds (DNS rebinding) is not
stopped here; run untrusted agents behind an egress firewall as well.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx

from ._types import SearchResult, ToolError

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""``resolve(host, port) -> addresses``: the IP address strings a host name resolves to."""

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
R = TypeVar("R", bound=SearchResult)

DEFAULT_BLOCKLIST: tuple[str, ...] = (
    # MedMisBench itself: any URL naming it (dataset mirrors, forks, blog posts about it)
    "re:medmis[-_ ]?bench",
    "huggingface.co/datasets/AI4HealthResearch/MedMisBench",
    "hf.co/datasets/AI4HealthResearch/MedMisBench",
    "github.com/*/MedMisBench",
    # the MedMisBench paper (arXiv 2606.12291) in its usual renderings
    "arxiv.org/abs/2606.12291",
    "arxiv.org/pdf/2606.12291",
    "arxiv.org/html/2606.12291",
    "arxiv.org/format/2606.12291",
    "alphaxiv.org/abs/2606.12291",
    "huggingface.co/papers/2606.12291",
    "doi.org/10.48550/arXiv.2606.12291",
    # Humanity's Last Exam, the source of MEDMISHLE (dataset, site, code, paper)
    "huggingface.co/datasets/cais/hle",
    "hf.co/datasets/cais/hle",
    "lastexam.ai",
    "github.com/centerforaisafety/hle",
    "arxiv.org/abs/2501.14249",
    "arxiv.org/pdf/2501.14249",
    "arxiv.org/html/2501.14249",
)


# -- contamination blocklist ---------------------------------------------------------------------


def _compile_pattern(pattern: str) -> re.Pattern[str]:
    if pattern.startswith("re:"):
        return re.compile(pattern[3:], re.IGNORECASE)
    text = pattern.strip().lower()
    text = re.sub(r"^[a-z][a-z0-9+.-]*://", "", text)  # a pasted URL works as a pattern
    host, _, path = text.partition("/")
    host = host.removeprefix("www.")
    # '*' stays within one host label or path segment, so "github.com/*/medmisbench" names a
    # repository under any owner but not a file deep inside an unrelated repository
    host_re = re.escape(host).replace(r"\*", r"[^/.]*")
    path_re = re.escape("/" + path).replace(r"\*", r"[^/]*") if path else ""
    # subdomains match too (export.arxiv.org, www.lastexam.ai); the path is a prefix so
    # versions (2606.12291v2) and sub-pages are covered
    return re.compile(rf"^(?:[^/]*\.)?{host_re}(?=/|$){path_re}", re.IGNORECASE)


def _url_key(url: str) -> str | None:
    """``host/path`` with the host lower-cased and the path percent-decoded (None if unparsable)."""
    try:
        parsed = httpx.URL(url.strip())
    except (httpx.InvalidURL, TypeError, ValueError):
        return None
    host = parsed.host.lower().rstrip(".").removeprefix("www.")
    if not host:
        return None
    return host + (parsed.path or "/")


class Blocklist:
    """URL patterns for pages that would leak the benchmark's answers to a search agent.

    A pattern is ``host[/path-prefix]`` (case-insensitive; subdomains of ``host`` match; ``*``
    matches within one label or path segment), or ``re:REGEX`` searched in the whole URL.

    Example::

        Blocklist.default().extend(["example.org/leaked-answers", "re:medqa.*answers"])
    """

    def __init__(self, patterns: Iterable[str] = DEFAULT_BLOCKLIST) -> None:
        self.patterns: tuple[str, ...] = tuple(
            p.strip() for p in patterns if p.strip() and not p.strip().startswith("#")
        )
        self._compiled = [(p, _compile_pattern(p)) for p in self.patterns]

    @classmethod
    def default(cls) -> Blocklist:
        """The built-in patterns for MedMisBench, its paper and Humanity's Last Exam."""
        return cls(DEFAULT_BLOCKLIST)

    @classmethod
    def from_file(cls, path: str | Path, *, include_defaults: bool = True) -> Blocklist:
        """Patterns from a text file, one per line (``#`` starts a comment line).

        Args:
            path: The file to read.
            include_defaults: Keep the built-in patterns as well (the usual choice).
        """
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        return cls([*(DEFAULT_BLOCKLIST if include_defaults else ()), *lines])

    def extend(self, patterns: Iterable[str]) -> Blocklist:
        """A new blocklist with these patterns added."""
        return Blocklist([*self.patterns, *patterns])

    def match(self, url: str) -> str | None:
        """The first pattern that blocks ``url``, or None."""
        key = _url_key(url)
        for pattern, compiled in self._compiled:
            if pattern.startswith("re:"):
                if compiled.search(url):
                    return pattern
            elif key is not None and compiled.match(key):
                return pattern
        return None

    def check(self, url: str) -> None:
        """Raise ``ToolError(kind="refused")`` when ``url`` is blocked."""
        if self.match(url) is not None:
            raise ToolError(
                f"{url} is on the contamination blocklist (it hosts the benchmark being "
                "evaluated or its source questions); use other sources",
                kind="refused",
            )

    def filter(self, results: Iterable[R]) -> list[R]:
        """The results whose URLs are not blocked, in their original order."""
        return [r for r in results if self.match(r.url) is None]

    def __len__(self) -> int:
        return len(self.patterns)

    def __repr__(self) -> str:
        return f"Blocklist({len(self.patterns)} patterns)"


# -- network address safety ----------------------------------------------------------------------


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, 6to4, NAT64), if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def address_problem(address: str | IPAddress) -> str | None:
    """Why an address must not be fetched (``"loopback"``, ``"private"``, …), or None if public.

    Args:
        address: An IPv4 or IPv6 address (a zone id such as ``%eth0`` is ignored).
    """
    ip = ipaddress.ip_address(str(address).split("%", 1)[0]) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_ipv4(ip)
        if inner is not None:
            # judge the IPv4 address the packets really go to (::ffff:127.0.0.1 is loopback)
            return address_problem(inner)
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local/cloud metadata"
    if ip.is_multicast:
        return "multicast"
    if ip.is_reserved:
        return "reserved"
    if ip.is_private:
        return "private"
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
        return "site-local"  # fec0::/10: deprecated, but still routed inside some networks
    if not ip.is_global:
        return "not publicly routable"
    return None


async def system_resolve(host: str, port: int) -> list[str]:
    """Resolve a host with the event loop's ``getaddrinfo`` (runs in the default executor)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


@dataclass(frozen=True)
class AllowedHost:
    """One ``--allow-host`` entry: a host, and a port when the entry named one."""

    host: str
    port: int | None = None

    @classmethod
    def parse(cls, spec: str) -> AllowedHost:
        """Parse ``HOST``, ``HOST:PORT``, ``[IPv6]``, ``[IPv6]:PORT`` or a bare IPv6 address."""
        text = spec.strip()
        if not text:
            raise ValueError("empty --allow-host value")
        text = re.sub(r"^[a-z][a-z0-9+.-]*://", "", text, flags=re.IGNORECASE).rstrip("/")
        port: int | None = None
        if text.startswith("["):
            host, _, rest = text[1:].partition("]")
            if rest:
                if not rest.startswith(":") or not rest[1:].isdigit():
                    raise ValueError(f"invalid --allow-host {spec!r}")
                port = int(rest[1:])
        elif text.count(":") == 1:
            host, _, port_text = text.partition(":")
            if not port_text.isdigit():
                raise ValueError(f"invalid port in --allow-host {spec!r}")
            port = int(port_text)
        else:
            host = text  # a name, an IPv4 address or an unbracketed IPv6 address
        if port is not None and not 0 < port < 65536:
            raise ValueError(f"port out of range in --allow-host {spec!r}")
        return cls(_normalise_host(host), port)

    def matches(self, host: str, port: int) -> bool:
        return self.host == _normalise_host(host) and (self.port is None or self.port == port)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"


def _normalise_host(host: str) -> str:
    host = host.strip().lower().rstrip(".")
    try:
        return ipaddress.ip_address(host).compressed  # "0:0::1" and "::1" are the same host
    except ValueError:
        return host


class UrlPolicy:
    """Decides whether a URL may be fetched: scheme, blocklist, and where the host resolves.

    Args:
        allow_hosts: ``HOST[:PORT]`` entries that skip the address check (``--allow-host``);
            without a port every port of that host is open.
        blocklist: The contamination blocklist (default: :meth:`Blocklist.default`); pass
            ``Blocklist(())`` for none.
        resolve: ``async (host, port) -> [address, …]``; defaults to the system resolver.
            Tests inject a fake.
        resolve_timeout: Seconds allowed for one DNS lookup.
    """

    def __init__(
        self,
        allow_hosts: Iterable[str | AllowedHost] = (),
        blocklist: Blocklist | None = None,
        resolve: Resolver | None = None,
        *,
        resolve_timeout: float = 5.0,
    ) -> None:
        self.allow_hosts = tuple(
            h if isinstance(h, AllowedHost) else AllowedHost.parse(h) for h in allow_hosts
        )
        self.blocklist = Blocklist.default() if blocklist is None else blocklist
        self._resolve: Resolver = resolve or system_resolve
        self.resolve_timeout = resolve_timeout

    def check_static(self, url: str | httpx.URL) -> httpx.URL:
        """Scheme, host and blocklist checks that need no network; returns the parsed URL.

        Raises:
            ToolError: ``kind="refused"`` for a refused URL.
        """
        try:
            # parse with the HTTP client's own parser so the host checked is the host connected to
            parsed = url if isinstance(url, httpx.URL) else httpx.URL(url.strip())
        except (httpx.InvalidURL, TypeError, ValueError) as exc:
            raise ToolError(f"{url!s} is not a valid URL ({exc})", kind="refused") from exc
        if parsed.scheme not in ("http", "https"):
            shown = parsed.scheme or "no scheme"
            raise ToolError(
                f"only http:// and https:// URLs can be visited, not {shown} ({url!s})",
                kind="refused",
            )
        if not parsed.host:
            raise ToolError(f"{url!s} has no host name", kind="refused")
        self.blocklist.check(str(parsed))
        return parsed

    def is_allowed_host(self, parsed: httpx.URL) -> bool:
        """Whether ``--allow-host`` opened this URL's host (and port)."""
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        return any(a.matches(parsed.host, port) for a in self.allow_hosts)

    async def check(self, url: str | httpx.URL) -> httpx.URL:
        """All checks, DNS included; returns the parsed URL that may be fetched.

        Raises:
            ToolError: ``kind="refused"`` for a refused URL, ``kind="not_found"`` when the host
                does not resolve, ``kind="timeout"`` when DNS does not answer in time.
        """
        parsed = self.check_static(url)
        if self.is_allowed_host(parsed):
            return parsed
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        host = parsed.raw_host.decode("ascii")  # IDNA-encoded, as the connection will use it
        try:
            literal: IPAddress | None = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            literal = None
        if literal is not None:
            addresses: Sequence[str] = [str(literal)]
        else:
            try:
                addresses = await asyncio.wait_for(
                    self._resolve(host, port), timeout=self.resolve_timeout
                )
            except TimeoutError as exc:
                raise ToolError(f"DNS lookup for {parsed.host} timed out", kind="timeout") from exc
            except (OSError, UnicodeError) as exc:  # socket.gaierror is an OSError
                raise ToolError(f"could not resolve host {parsed.host}", kind="not_found") from exc
            if not addresses:
                raise ToolError(f"could not resolve host {parsed.host}", kind="not_found")
        for address in addresses:
            # every address must be public: the client may connect to any of them
            problem = address_problem(address)
            if problem is not None:
                where = f"{address} is" if literal is not None else f"{parsed.host} resolves to {address},"
                raise ToolError(
                    f"{where} not a public address ({problem}); only public web pages can be "
                    "visited",
                    kind="refused",
                )
        return parsed
