"""Secrets out of every URL and error text capcon shows, logs or stores.

A target or Prometheus URL may carry credentials (`http://user:password@host/...`,
`?api_key=...`). capcon connects with them, but everything it shows, records or
prints goes through one rule first:

* userinfo: `user:password@` becomes `user:***@`; a lone `token@` becomes `***@`;
* query (and fragment) parameters whose name looks secret (`token`, `key`,
  `api_key`, `apikey`, `secret`, `password`, `pass`, `auth`, `access_token`,
  `signature`, `sig`, `X-Amz-*`, ...; any case) get the value `***`.

`redact_url` reads its text as one address, however odd: everything up to the last
`@` is credentials (a password may hold `/`, `?` or `:`). `redact` takes any text (an
exception's message, say), masks every URL in it by the same rule, then any
`user:password@` and `secret=value` left outside a URL, then the literal `secrets`
the caller knows it holds. Both are idempotent: redacting redacted text changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import quote, unquote_plus

MASK = "***"

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*$")
# A URL inside free text: a scheme, then everything up to a space, a double quote or <>. A single
# quote or a parenthesis may be part of a password (RFC 3986 sub-delims): taken in, to be safe.
# The scheme starts where no scheme character stands before it: without that, a long run of letters is tried
# from each of its characters in turn (100 KB of "r" and one URL: 14 s of CPU).
_URL_IN_TEXT = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s\"<>`]*")
# user:password@ outside a URL (an address written without its scheme).
_USERINFO_IN_TEXT = re.compile(r"(?<![\w%.~+!$&'*,;=-])([\w.~%+!$&'*,;=-]*):([^\s@/\"<>]+)@(?=[\w\[])")
# name=value outside a URL, e.g. "params token=abc" or a query string on its own: each `name=`
# is looked at, and only a secret name's value is taken (so `a=b?token=c` still masks c).
_NAME_IN_TEXT = re.compile(r"(?<![\w%.~-])([\w.~%-]+)=")
_VALUE_IN_TEXT = re.compile(r"[^&;\s\"',)]*")
_PARAM = re.compile(r"([^=&;]*)=([^&;]*)")

# Whole words of a parameter name that mark its value secret (api_key -> api, key).
_SECRET_WORDS = frozenset({"key", "sig", "pass", "pwd", "pw", "session", "sessionid", "sid", "jwt", "bearer", "cookie"})
# Pieces that mark a name secret wherever they appear in it (accessToken, clientsecret, X-Amz-Signature).
_SECRET_PIECES = ("token", "secret", "passw", "apikey", "signature", "credential", "auth", "privatekey", "accesskey")
_SECRET_PREFIXES = ("xamz", "xgoog")  # AWS and GCS signed URLs: every X-Amz-* / X-Goog-* parameter


def secret_name(name: str) -> bool:
    """Whether a query parameter called `name` carries a secret (case-insensitive)."""
    decoded = unquote_plus(name)
    lowered = decoded.lower()
    compact = re.sub(r"[^a-z0-9]", "", lowered)
    if not compact:
        return False
    if compact.startswith(_SECRET_PREFIXES) or any(piece in compact for piece in _SECRET_PIECES):
        return True
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", decoded).lower()  # camelCase -> camel_case
    return any(word in _SECRET_WORDS for word in re.split(r"[^a-z0-9]+", spaced))


def _params(query: str) -> str:
    """`a=1&token=x` -> `a=1&token=***`; a value already masked stays as is."""
    return _PARAM.sub(lambda m: f"{m[1]}={MASK}" if m[2] and secret_name(m[1]) else m[0], query)


def redact_url(text: str) -> str:
    """One address (a URL, `host:port`, `user:pw@host`, or something mistyped) with its secrets masked."""
    if "@" not in text and "=" not in text:
        return text  # the common case, kept cheap: nothing there could be a secret
    head, sep, rest = text.partition("://")
    if not sep or not _SCHEME.match(head):  # what comes before '://' is kept only when it is a scheme
        head, sep, rest = "", "", text
    if "@" in rest:
        userinfo, _, rest = rest.rpartition("@")
        user, colon, _password = userinfo.partition(":")
        # A user name alone is often the token itself: it goes too.
        rest = (f"{user}:{MASK}@" if colon else f"{MASK}@") + rest
    before, hash_sign, fragment = rest.partition("#")
    before, question, query = before.partition("?")
    if question:
        before += "?" + _params(query)
    if hash_sign:
        before += "#" + _params(fragment)
    return head + sep + before


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Any text with the secrets in it masked: URLs, `user:pw@`, `secret=value`, and the given `secrets`."""
    if not text:
        return text
    out = _URL_IN_TEXT.sub(lambda m: redact_url(m[0]), text) if "://" in text else text
    if "@" in out:
        out = _USERINFO_IN_TEXT.sub(lambda m: m[0] if m[2] == MASK else f"{m[1]}:{MASK}@", out)
    if "=" in out:
        out = _params_in_text(out)
    for secret in secrets:
        # Literal secrets (a password, a token) as the caller holds them, also percent-encoded;
        # very short ones are left to the rules above, or every "a" in a message would go.
        if secret and len(secret) >= 4:
            for form in {secret, quote(secret, safe=""), quote(secret, safe="~!$&'()*+,;=:")}:
                out = out.replace(form, MASK)
    return out


def _params_in_text(text: str) -> str:
    pieces: list[str] = []
    done = 0
    for found in _NAME_IN_TEXT.finditer(text):
        if found.start() < done or not secret_name(found[1]):
            continue
        value = _VALUE_IN_TEXT.match(text, found.end())  # always matches (maybe nothing): the value may be empty
        end = value.end() if value is not None else found.end()
        if text[found.end() : end] in ("", MASK):
            continue
        pieces += [text[done : found.end()], MASK]
        done = end
    return "".join(pieces) + text[done:] if pieces else text


def url_secrets(url: str) -> list[str]:
    """The secrets an address holds, as sent: its password (or lone user name) and secret query values."""
    found: list[str] = []
    _head, sep, rest = url.partition("://")
    rest = rest if sep else url
    if "@" in rest:
        userinfo = rest.rpartition("@")[0]
        user, colon, password = userinfo.partition(":")
        found += [password, unquote_plus(password)] if colon else [user, unquote_plus(user)]
    query = rest.partition("?")[2]
    for part in re.split(r"[&;#]", query):
        name, equals, value = part.partition("=")
        if equals and value and secret_name(name):
            found += [value, unquote_plus(value)]
    return [secret for secret in dict.fromkeys(found) if secret]
