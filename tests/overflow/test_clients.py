"""The deferrable-key rule (pure): digests kept, not keys; the bearer key looked up by its digest."""

from __future__ import annotations

import pytest

from console.overflow.clients import digest, is_deferrable_key, key_digests, presented_key


def test_the_listing_becomes_digests_only():
    digests = key_digests(" batch-key-1 , ,batch-key-2,,")
    assert digests == frozenset({digest("batch-key-1"), digest("batch-key-2")})
    assert all(len(d) == 32 for d in digests)
    assert b"batch-key" not in b"".join(digests)
    assert key_digests("") == key_digests(" , ") == frozenset()


@pytest.mark.parametrize(
    "header, key",
    [
        ("Bearer batch-key-1", "batch-key-1"),
        ("bearer  batch-key-1 ", "batch-key-1"),
        ("BEARER batch-key-1", "batch-key-1"),
        ("Basic YWxhZGRpbjpvcGVu", None),
        ("Bearer ", None),
        ("batch-key-1", None),
        ("", None),
        (None, None),
        ("Bearer " + "k" * 5000, None),
    ],
)
def test_the_presented_key(header, key):
    assert presented_key(header) == key


def test_only_a_listed_key_is_deferrable():
    digests = key_digests("batch-key-1,batch-key-2")
    assert is_deferrable_key("Bearer batch-key-2", digests)
    assert not is_deferrable_key("Bearer batch-key-3", digests)
    assert not is_deferrable_key("Bearer batch-key-", digests)
    assert not is_deferrable_key(None, digests)
    assert not is_deferrable_key("Bearer batch-key-1", frozenset())
    assert is_deferrable_key("Bearer k\udcff", key_digests("k\udcff"))  # odd text hashes, never raises
