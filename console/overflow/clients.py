"""Which traffic class a client's API key puts its requests in: the operator's list of deferrable keys.

The gateway keeps only the SHA-256 digests of the listed keys, never the keys: a memory dump or
a repr shows no key, and looking up the digest of the presented key in a set does not tell an
attacker, by its timing, how much of a guess was right (the digest of a near miss shares nothing
with the listed one).
"""

from __future__ import annotations

import hashlib

BEARER = "bearer "
MAX_KEY_LENGTH = 4096  # a longer Authorization header is not hashed: it is no key of the list


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def key_digests(listing: str) -> frozenset[bytes]:
    """The digests of a comma-separated list of keys (blanks around and between them dropped)."""
    return frozenset(digest(key.strip()) for key in listing.split(",") if key.strip())


def presented_key(authorization: str | None) -> str | None:
    """The key of `Authorization: Bearer KEY`, or None."""
    if not authorization or len(authorization) > MAX_KEY_LENGTH + len(BEARER):
        return None
    if authorization[: len(BEARER)].lower() != BEARER:
        return None
    key = authorization[len(BEARER) :].strip()
    return key or None


def is_deferrable_key(authorization: str | None, digests: frozenset[bytes]) -> bool:
    """Whether the client's bearer key is one of the listed deferrable keys."""
    if not digests:
        return False
    key = presented_key(authorization)
    return key is not None and digest(key) in digests
