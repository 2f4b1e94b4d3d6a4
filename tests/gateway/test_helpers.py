"""The gateway's small pure helpers: the drain rate, the off-peak window, addresses."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from console.gateway.config import base_url, host_port
from console.gateway.drain import DrainMeter
from console.gateway.offpeak import parse_window, seconds_to_daily_window, seconds_to_idle_window


def test_the_drain_rate_is_completions_over_the_last_30_s():
    meter = DrainMeter(started=0.0)
    assert meter.rate(10.0) is None
    for t in (1.0, 2.0, 3.0, 4.0):
        meter.completed(t)
    assert meter.rate(4.0) == pytest.approx(4 / 4.0)  # younger than the window: since start
    assert meter.rate(31.5) == pytest.approx(3 / 30.0)  # the first fell out of the window
    assert meter.rate(100.0) is None


def test_early_completions_are_not_a_huge_rate():
    meter = DrainMeter(started=0.0)
    meter.completed(0.01)
    assert meter.rate(0.02) == 1.0  # at least one second of span


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    "window, now, seconds",
    [
        ("22:00-06:00", "2026-12-01T21:00:00", 3600.0),
        ("22:00-06:00", "2026-12-01T23:00:00", 0.0),
        ("22:00-06:00", "2026-12-02T05:59:00", 0.0),
        ("22:00-06:00", "2026-12-02T06:00:00", 16 * 3600.0),
        ("01:30-03:00", "2026-12-01T01:00:00", 1800.0),
        ("22:00", "2026-12-01T12:00:00", 10 * 3600.0),
    ],
)
def test_the_next_daily_off_peak_window(window, now, seconds):
    assert seconds_to_daily_window(parse_window(window), at(now)) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["25:00", "7", "10:00-10:00", "aa:bb-cc", "10:60"])
def test_a_bad_window_is_refused(text):
    with pytest.raises(ValueError):
        parse_window(text)


def test_the_next_idle_window_of_the_plans_week():
    windows = ((0, 20, 12), (5, 0, 48))  # Monday 20:00 for 12 h; the weekend
    monday_noon = at("2026-11-30T12:00:00")  # a Monday
    assert seconds_to_idle_window(windows, monday_noon) == 8 * 3600.0
    assert seconds_to_idle_window(windows, at("2026-11-30T21:00:00")) == 0.0
    assert seconds_to_idle_window(windows, at("2026-12-04T23:00:00")) == 3600.0  # Friday night -> Saturday
    assert seconds_to_idle_window((), monday_noon) is None
    assert seconds_to_idle_window(windows, at("2026-11-30T11:00:00"), "Europe/Rome") == 8 * 3600.0


@pytest.mark.parametrize(
    "text, expected",
    [
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        (":8080", ("0.0.0.0", 8080)),
        ("[::1]:0", ("::1", 0)),
        ("gateway.internal:80", ("gateway.internal", 80)),
    ],
)
def test_listen_addresses(text, expected):
    assert host_port(text, "--listen") == expected


@pytest.mark.parametrize("text", ["8080", "host:", "host:99999", "[::1]", "[zz]:80", "bad host:80"])
def test_bad_listen_addresses(text):
    with pytest.raises(ValueError):
        host_port(text, "--listen")


def test_replica_addresses_keep_scheme_host_and_port():
    assert base_url("10.0.0.5:8000") == "http://10.0.0.5:8000"
    assert base_url("https://vllm.internal:8443/metrics") == "https://vllm.internal:8443"
    with pytest.raises(ValueError):
        base_url("ftp://x:1")


def test_a_replica_is_named_without_the_secrets_of_its_address():
    from console.gateway.server import Replica, _problem

    replica = Replica("http://ops:hunter2-secret@10.0.0.11:8000?api_key=k-123")
    assert "hunter2" not in replica.name and "k-123" not in replica.name and replica.url.endswith("k-123")
    said = _problem(OSError("cannot connect to http://ops:hunter2-secret@10.0.0.11:8000/v1"))
    assert "hunter2" not in said and "10.0.0.11:8000" in said


def test_addresses_alike_but_for_a_secret_are_two_replicas():
    from console.gateway.config import GatewayConfig
    from console.gateway.server import Gateway
    from console.overflow.policy import Policy

    urls = ("http://a:one@10.0.0.1:8000", "http://a:two@10.0.0.1:8000")
    server = Gateway(GatewayConfig(targets=urls, plan_policy=Policy(mode="pass")))
    names = [r.name for r in server.replicas]
    assert len(set(names)) == 2 and not any("one" in n or "two" in n for n in names)
