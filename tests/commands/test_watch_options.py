"""`capcon watch`'s options checked before any fleet is watched."""

from __future__ import annotations

import argparse

import pytest

from console.commands import watch
from console.errors import UserError


def watch_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    watch.add_parser(parser.add_subparsers())
    return parser.parse_args(["watch", "--target", "127.0.0.1:8000", *argv])


def test_a_window_shorter_than_the_interval_is_refused():
    with pytest.raises(UserError) as refused:
        watch.check_options(watch_args("--interval", "5", "--window", "2"))
    message = str(refused.value)
    assert "--window 2" in message and "--interval 5" in message and "expected" in message and "\n" not in message
    watch.check_options(watch_args("--interval", "5", "--window", "5"))  # equal is enough: no error
    watch.check_options(watch_args("--interval", "5"))  # the default window follows the interval
