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


@pytest.mark.parametrize("address", ["http//gw:8080", "ftp://gw:8080", "gw:99999", "10.0.0.5;8080"])
def test_a_gateway_that_cannot_be_an_address_is_refused_before_the_console_opens(address):
    with pytest.raises(UserError) as refused:
        watch.check_options(watch_args("--gateway", address))
    assert "expected" in str(refused.value) and "\n" not in str(refused.value)
    watch.check_options(watch_args("--gateway", "10.0.0.5:8080", "--gateway", "http://gw:8080"))


def test_gateways_come_from_the_option_or_the_plan_and_the_option_wants_one_fleet(tmp_path):
    from dataclasses import replace

    from console.live.setup import check_fleets, gateway_urls
    from console.plan.model import FleetSource, GatewayAddress
    from tests.gateway.plans import gateway_plan

    plan = replace(
        gateway_plan(),
        fleet=FleetSource(targets=("10.0.0.1:8000",), gateways=(GatewayAddress("http://gw:8080", "http://gw:8081"),)),
    )
    assert gateway_urls(watch_args(), plan) == ("http://gw:8080",)
    assert gateway_urls(watch_args("--gateway", "gw2:8080"), plan) == ("gw2:8080",)
    assert gateway_urls(watch_args(), None) == ()
    args = watch_args("--gateway", "gw2:8080")
    args.target, args.plan = [], ["a.yaml", "b.yaml"]
    with pytest.raises(UserError, match="--gateway with several plans"):
        check_fleets(args, [plan, plan])
