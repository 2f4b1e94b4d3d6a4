"""Credentials in an upstream's address, taken out of the URL and sent as one Authorization header.

aiohttp refuses a request that has both credentials in its URL and an Authorization header (a
ValueError, which a handler would turn into a 500), and a request can carry only one of them anyway.
So the gateway connects to the bare URL and decides, per upstream, which header goes:

- a replica (`--target http://user:pass@host`): the target's user:password wins over the client's own
  Authorization. The operator wrote it for that replica (a proxy in front of vLLM that checks basic
  auth), and a client's key would not open it; without one, the client's header goes through as is
  (vLLM's --api-key is the client's business).
- the hosted endpoint: `--hosted-key-env` wins over a user:password in `--hosted-url`; it is the option
  made for that endpoint's key, and the URL's credentials are used (as basic auth) only without it. The
  client's own Authorization never goes to the hosted endpoint.
"""

from __future__ import annotations

import base64

from yarl import URL


def split(url: str) -> tuple[str, str | None]:
    """(the URL without `user:password@`, the Basic Authorization value for them, or None without any)."""
    parsed = URL(url)
    if parsed.user is None and parsed.password is None:
        return url, None
    bare = str(parsed.with_user(None))
    # Built here rather than by aiohttp.BasicAuth: that one refuses a `:` in the user and non-Latin-1 text.
    pair = f"{parsed.user or ''}:{parsed.password or ''}".encode()
    return bare, "Basic " + base64.b64encode(pair).decode("ascii")


def replica_authorization(target: str | None, client: str | None) -> str | None:
    """The header a replica gets: its own credentials if its target has them, else the client's."""
    return target or client or None


def hosted_authorization(key: str | None, url_credentials: str | None) -> str | None:
    """The header the hosted endpoint gets: the configured key, else the URL's credentials."""
    return f"Bearer {key}" if key else url_credentials
