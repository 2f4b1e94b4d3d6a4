"""Targets: the one rule for an address capcon connects to, and the targets named by it.

`--target`, a plan's fleet.targets, the gateway's replicas and Prometheus' URL all go through
`checked_url`; a replica's address through `target_metrics_url` (its /metrics page). Here,
below both the plan reader and the metrics sources, so neither has to import the other.

A `TargetResult` is what one target answered at one poll: the sources hand it on, the store
records it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from console.errors import UserError
from console.redact import redact, redact_url

if TYPE_CHECKING:  # annotations only: the plan reader imports this module and needs no metrics code
    from console.metrics.figures import ReplicaState
    from console.metrics.vllm import ReplicaSample


TARGET_EXPECTED = "host:port or an http(s) URL such as http://10.0.0.5:8000"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*$")
# `http//h:8000` and `http:/h:8000` would otherwise read as a host named "http" (or "http:"):
# a DNS failure at poll time, exit 1, instead of a refusal naming the typo.
_SCHEME_TYPO = re.compile(r"^(https?)(:/(?!/)|//|:\\)", re.IGNORECASE)
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")  # RFC 1123: letters, digits, inner hyphens
_PORT = re.compile(r"^[0-9]+$")
_SHOWN_LENGTH = 200  # a target echoed in an error: enough to find it, never a screenful


def masked_target(text: str) -> str:
    """`text` as an error may show it: a password (`user:pass@`) and secret query values (`?token=...`) masked.

    The rule is `console.redact.redact_url`'s: everything up to the last `@` is credentials,
    whatever it holds (a password may contain `/`, `:` or `?`); the user name before the first
    `:` stays, to say which one it was.
    """
    shown = redact_url(text)
    return shown if len(shown) <= _SHOWN_LENGTH else shown[:_SHOWN_LENGTH] + "…"


def checked_url(text: str) -> str:
    """`host:8000`, `http://host:8000` or a full URL -> that URL, `http://` added when it has no scheme.

    The one rule for an address capcon connects to (a replica, Prometheus). Strict,
    because a mistyped address must be refused here rather than polled as a host that does not
    resolve: scheme http or https, optional `user:password@` (sent as HTTP Basic auth, shown and
    recorded as `user:***@`), an RFC 1123 host name or an IPv4 or [IPv6] literal, a port
    1-65535, a path and query after them. The URL returned keeps the credentials: it is the
    one to connect to, never one to show (`console.redact.redact_url` makes that one). A
    ValueError says what is wrong; it never repeats the text (callers show
    `masked_target(text)`), so a password in it is never echoed.
    """
    url = text.strip()
    if not url:
        raise ValueError("an empty address")
    odd = next((c for c in url if c.isspace() or not c.isprintable()), None)
    if odd is not None:
        raise ValueError(f"{odd!r} is not allowed in an address")
    typo = _SCHEME_TYPO.match(url)
    if typo:
        raise ValueError(f"{typo[0]!r} is a mistyped scheme: write {typo[1].lower()}://")
    if "://" not in url:
        url = "http://" + url
    scheme, _, rest = url.partition("://")
    if not _SCHEME.match(scheme):
        raise ValueError("what comes before '://' is not a scheme")
    if scheme.lower() not in ("http", "https"):
        raise ValueError(f"scheme {scheme.lower()!r} is not http or https")
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "@" in rest[len(authority) :]:
        # Read as the address shows it (credentials up to the last '@'), this would connect
        # somewhere else than a URL parser does: refused, and nothing of it repeated.
        raise ValueError(
            "an '@' after the host's '/', '?' or '#': in a user name or password write '/', '?', "
            "'#' and '@' as %2F, %3F, %23 and %40; in a path or query write '@' as %40"
        )
    userinfo, at, netloc = authority.rpartition("@")
    if at:
        _check_userinfo(userinfo)  # sent as HTTP Basic auth; shown and recorded as user:***@
    _check_netloc(netloc)
    return url


def target_metrics_url(text: str) -> str:
    """`host:8000`, `http://host:8000` or a full URL -> the URL of its /metrics page.

    The one rule for a replica's address, from `--target` or a plan's fleet.targets: that of
    `checked_url`, with `/metrics` for an empty path. ValueError as `checked_url` raises it.
    """
    url = checked_url(text)
    parts = urlsplit(url)
    if parts.path in ("", "/"):
        # Rebuilt rather than appended to, so a query string (?token=...) stays after the path.
        url = urlunsplit(parts._replace(path="/metrics"))
    return url


_USERINFO = re.compile(r"(?:[A-Za-z0-9._~!$&'()*+,;=:-]|%[0-9A-Fa-f]{2})*")


def _check_userinfo(userinfo: str) -> None:
    """RFC 3986 userinfo: unreserved, sub-delims, ':' and %XX; ValueError (never quoting it) otherwise."""
    if not _USERINFO.fullmatch(userinfo):
        raise ValueError(
            "a user name or password may hold letters, digits, ':' and -._~!$&'()*+,;= only; "
            "percent-encode anything else (%40 for '@', %25 for '%')"
        )


def _check_netloc(netloc: str) -> None:
    """`host`, `host:port`, `[v6]` or `[v6]:port`; ValueError otherwise."""
    if netloc.startswith("["):
        host, bracket, after = netloc[1:].partition("]")
        if not bracket:
            raise ValueError("'[' without a closing ']' (an IPv6 address is written [::1]:8000)")
        try:
            ipaddress.IPv6Address(host.replace("%25", "%"))  # a zone (fe80::1%25eth0) is written %25 in a URL
        except ValueError:
            raise ValueError(f"[{_short(host)}] is not an IPv6 address") from None
        if after and not after.startswith(":"):
            raise ValueError(f"{_short(after)!r} after the IPv6 address, where only :port may follow")
        port = after[1:] if after else None
    else:
        if netloc.count(":") > 1:
            raise ValueError("an IPv6 address needs brackets, as in [::1]:8000")
        host, colon, port = netloc.partition(":")
        port = port if colon else None
        _check_host(host)
    if port is not None:
        _check_port(port)


def _check_port(port: str) -> None:
    if not port:
        raise ValueError("no port after ':'")
    if not _PORT.match(port):
        raise ValueError(f"port {_short(port)!r} is not a number")
    digits = port.lstrip("0") or "0"
    if len(digits) > 5 or not 1 <= int(digits) <= 65535:  # the length first: int() of 5,000 digits refuses
        raise ValueError(f"port {_short(port)} is outside 1-65535")


def _check_host(host: str) -> None:
    if not host:
        raise ValueError("no host or port")
    if re.fullmatch(r"[0-9.]+", host):
        # All digits and dots is an IPv4 address or a typo of one, never a name (RFC 1123 2.1).
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ValueError(f"{_short(host)!r} is not an IPv4 address (four numbers 0-255)") from None
        return
    odd = next((c for c in host if not (c.isascii() and (c.isalnum() or c in "-."))), None)
    if odd is not None:
        raise ValueError(f"{odd!r} is not allowed in a host name (letters, digits, '-' and '.')")
    name = host[:-1] if host.endswith(".") else host  # a fully qualified name may end in a dot
    if len(name) > 253:
        raise ValueError("a host name longer than 253 characters")
    for label in name.split("."):
        if not label:
            raise ValueError(f"{_short(host)!r} has an empty label (two dots in a row, or a leading dot)")
        if not _LABEL.match(label):
            raise ValueError(f"host name label {_short(label)!r} is not 1-63 letters, digits or inner '-'")


def _short(piece: str) -> str:
    return piece if len(piece) <= 60 else piece[:60] + "…"


@dataclass(frozen=True)
class Target:
    name: str
    url: str  # the full /metrics URL, credentials included: the one to connect to, never shown


@dataclass(frozen=True)
class TargetResult:
    name: str  # redacted, as everything downstream shows and records it
    url: str  # redacted (console.redact): no password or token past the source
    state: ReplicaState  # "up" with a sample, else "down", "timeout" or "bad_payload"
    sample: ReplicaSample | None
    error: str  # why the state is not "up", in words; warnings when it is
    fetched_at: float


def metrics_url(text: str) -> str:
    """`host:8000`, `http://host:8000` or a full URL -> the URL of its /metrics page.

    A target that cannot be an address (another scheme than http(s), a malformed host,
    a port outside 1-65535) is a UserError. The rule is `target_metrics_url`'s, the plan
    reader's too, so `--target` and fleet.targets accept the same forms.
    """
    try:
        return target_metrics_url(text)
    except ValueError as problem:
        raise UserError(f"target {masked_target(text)!r}: {problem}; expected {TARGET_EXPECTED}") from None


def base_url(text: str) -> str:
    """A server's address (host:port or a URL) -> http(s)://host:port, its path dropped; ValueError saying what is
    wrong. A gateway's replicas and its admin API are named this way."""
    url = target_metrics_url(text)
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc}"


def target_name(url: str) -> str:
    """A short name for a target: host:port of its URL (never its user name or password)."""
    parts = urlsplit(url)
    return parts.netloc.rpartition("@")[2] or redact_url(url)


def targets_from(urls: list[str]) -> list[Target]:
    """Targets from URLs, named by host:port; a URL given twice is scraped once.

    `url` stays the address to connect to (credentials and all); names never hold a secret.
    """
    seen: dict[str, Target] = {}
    for text in urls:
        url = metrics_url(text)
        if url not in seen:
            seen[url] = Target(target_name(url), url)
    names = [t.name for t in seen.values()]
    # Two targets on one host:port with different paths keep their full URL, redacted, as name.
    return [t if names.count(t.name) == 1 else Target(redact_url(t.url), t.url) for t in seen.values()]


def shown_targets(targets: Sequence[Target]) -> list[Target]:
    """The targets as results carry them, to be shown and recorded: names and URLs redacted.

    Two targets told apart only by a secret (`?token=a`, `?token=b`) would read the same once
    redacted; the later ones get `#2`, `#3` (a fragment, never sent) so each keeps its own row.
    """
    out: list[Target] = []
    taken: set[str] = set()
    for target in targets:
        name, url = redact(target.name), redact_url(target.url)
        if url in taken:
            count = 2
            while f"{url}#{count}" in taken:
                count += 1
            url, name = f"{url}#{count}", f"{name}#{count}"
        taken.add(url)
        out.append(Target(name, url))
    return out
