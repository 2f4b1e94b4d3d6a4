"""Credentials in URLs: used to connect, never shown, printed or stored.

The rule (console.redact) on its own, as properties, then end to end against real loopback
servers: a target's `user:password@` goes out as HTTP Basic auth, a Prometheus URL's as well,
and neither the password nor a secret query value reaches stdout, stderr, the console's
screen, or any table or byte of the history file.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import sqlite3
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.live.watcher import Watcher
from console.redact import redact, redact_url, secret_name, url_secrets
from console.sources.prometheus import PrometheusSource
from console.sources.scrape import ScrapeSource
from console.targets import targets_from
from tests.cpu_time import HANG_CPU_SECONDS, cpu_seconds
from tests.metrics.pages import REPO, V032_SMALL_KV, sample_text
from tests.sources.servers import closed_port, serve

PASSWORD = "S3cretPa55"
KEY = "K3yValue77"
SECRETS = (PASSWORD, KEY)


# --- the rule ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, shown",
    [
        ("http://admin:hunter2@10.0.0.5:8000/metrics", "http://admin:***@10.0.0.5:8000/metrics"),
        ("https://tok3n@vllm.internal/metrics", "https://***@vllm.internal/metrics"),
        ("admin:hunter2@10.0.0.5:8000", "admin:***@10.0.0.5:8000"),
        (
            "http://h:1/m?api_key=a&apikey=b&APIKEY=c&token=d&access_token=e&secret=f&password=g&pass=h&auth=i",
            "http://h:1/m?api_key=***&apikey=***&APIKEY=***&token=***&access_token=***&secret=***&password=***&pass=***&auth=***",
        ),
        (
            "http://s3/b?X-Amz-Credential=a&X-Amz-Signature=b&sig=c&signature=d&x=1",
            "http://s3/b?X-Amz-Credential=***&X-Amz-Signature=***&sig=***&signature=***&x=1",
        ),
        ("http://h/m?replica=3&model=llama&keyword=x", "http://h/m?replica=3&model=llama&keyword=x"),
        ("http://h/cb#access_token=abc&state=1", "http://h/cb#access_token=***&state=1"),
        ("http://10.0.0.5:8000/metrics", "http://10.0.0.5:8000/metrics"),
    ],
)
def test_redact_url(url, shown):
    assert redact_url(url) == shown
    assert redact_url(shown) == shown  # idempotent


@pytest.mark.parametrize(
    "name",
    [
        "token",
        "Token",
        "key",
        "api_key",
        "api-key",
        "apiKey",
        "APIKEY",
        "secret",
        "client_secret",
        "password",
        "passwd",
        "pass",
        "pwd",
        "auth",
        "authorization",
        "access_token",
        "sessionToken",
        "signature",
        "sig",
        "X-Amz-Date",
        "x-amz-security-token",
        "X-Goog-Signature",
        "private_key",
    ],
)
def test_secret_names(name):
    assert secret_name(name)


@pytest.mark.parametrize(
    "name", ["replica", "model", "keyword", "monkey", "job", "q", "instance", "engine", "format", ""]
)
def test_names_that_are_not_secret(name):
    assert not secret_name(name)


def test_free_text_masks_urls_bare_credentials_params_and_known_secrets():
    text = (
        "GET http://u:pw1@h:9/x?token=t1 failed; proxy u2:pw2@h2:1 said api_key=k3 "
        f"and echoed {PASSWORD} as {quote(PASSWORD)}"
    )
    out = redact(text, [PASSWORD])
    for secret in ("pw1", "t1", "pw2", "k3", PASSWORD):
        assert secret not in out
    assert "http://u:***@h:9/x?token=***" in out and "u2:***@h2:1" in out and "api_key=***" in out
    assert redact(out, [PASSWORD]) == out


USERINFO_CHARS = st.characters(whitelist_categories=("Ll", "Lu", "Nd"), whitelist_characters="-._~!$&'()*+,;=")
HOSTS = st.sampled_from(["10.0.0.5", "vllm-0.svc.cluster.local", "[::1]", "localhost"])
PLAIN = st.sampled_from(["replica", "model", "job", "format"])
SECRET_PARAMS = st.sampled_from(
    ["token", "api_key", "APIKEY", "access_token", "X-Amz-Signature", "sig", "password", "Auth"]
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    scheme=st.sampled_from(["http://", "https://", ""]),
    user=st.text(USERINFO_CHARS.filter(lambda c: c != ":"), max_size=8),
    password=st.text(USERINFO_CHARS, max_size=12),
    raw_password=st.text(max_size=12),
    encoded=st.booleans(),
    host=HOSTS,
    port=st.none() | st.integers(1, 65535),
    path=st.sampled_from(["", "/", "/metrics", "/prom/"]),
    params=st.lists(
        st.tuples(st.booleans(), PLAIN, SECRET_PARAMS, st.text(USERINFO_CHARS, min_size=1, max_size=8)), max_size=4
    ),
)
def test_no_secret_survives_redaction(scheme, user, password, raw_password, encoded, host, port, path, params):
    secret = "Zq9" + (quote(raw_password, safe="") if encoded else password)
    query = "&".join(
        f"{name}=Zq9{value}" if is_secret else f"{plain}={value}" for is_secret, plain, name, value in params
    )
    url = f"{scheme}{user}:{secret}@{host}{'' if port is None else f':{port}'}{path}{'?' + query if query else ''}"
    shown = redact_url(url)
    assert "Zq9" not in shown
    assert redact_url(shown) == shown
    assert f"{host}{'' if port is None else f':{port}'}" in shown  # where it points stays readable
    for is_secret, plain, _name, value in params:
        if not is_secret:
            assert f"{plain}={value}" in shown
    # In an error message, quoted or not, with or without the secrets the caller holds.
    for text in (f"cannot connect to {url}: refused", f"Invalid URL {url!r}", f"({url})"):
        assert "Zq9" not in redact(text, url_secrets(url))
        assert "Zq9" not in redact(text)


# --- end to end: a target with credentials ---------------------------------------------------


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def received(request: web.Request) -> str:
    """What a careless server echoes back: the credentials it was sent, decoded, and the query."""
    try:
        sent = base64.b64decode(request.headers.get("Authorization", "Basic ").split(" ", 1)[1]).decode()
    except ValueError:
        sent = ""
    return f"{sent} {request.query_string}"


def guarded(page: str, user: str = "admin", password: str = PASSWORD, key: str | None = KEY, seen: list | None = None):
    """A /metrics handler serving `page` only with the right Basic auth (and api_key when given)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        if seen is not None:
            seen.append((request.headers.get("Authorization"), dict(request.query)))
        if request.headers.get("Authorization") != basic(user, password) or (
            key and request.query.get("api_key") != key
        ):
            return web.Response(
                status=401, reason=f"Who Are You {received(request)}", text=f"who are you? {received(request)}"
            )
        return web.Response(text=page, content_type="text/plain")

    return handler


async def test_a_target_s_credentials_go_out_as_basic_auth_and_nowhere_else():
    seen: list = []
    async with serve(guarded(sample_text(V032_SMALL_KV), password="p@ss:w/rd", key=None, seen=seen)) as base:
        url = base.replace("http://", f"http://admin:{quote('p@ss:w/rd', safe='')}@")
        source = ScrapeSource(targets_from([url]), timeout=5)
        [result] = await source.fetch(0.0)
        await source.aclose()
    assert result.state == "up", result.error
    assert seen[0][0] == basic("admin", "p@ss:w/rd")  # percent-decoded, as curl sends it
    assert (
        result.name == base.removeprefix("http://")
        and result.url == base.replace("http://", "http://admin:***@") + "/metrics"
    )


async def test_the_target_s_own_credentials_win_over_token_env():
    seen: list = []
    async with serve(guarded(sample_text(V032_SMALL_KV), key=None, seen=seen)) as base:
        source = ScrapeSource(
            targets_from([base.replace("http://", f"http://admin:{PASSWORD}@")]), timeout=5, token="b3arer"
        )
        [result] = await source.fetch(0.0)
        await source.aclose()
    assert result.state == "up" and seen == [(basic("admin", PASSWORD), {})]


async def test_a_refused_target_s_error_holds_no_secret():
    async with serve(guarded(sample_text(V032_SMALL_KV))) as base:
        wrong = base.replace("http://", f"http://admin:{PASSWORD}@") + f"/metrics?api_key={KEY}x"
        source = ScrapeSource(
            targets_from([wrong, f"http://admin:{PASSWORD}@127.0.0.1:{closed_port()}/metrics?api_key={KEY}"]), timeout=5
        )
        results = await source.fetch(0.0)
        await source.aclose()
    assert [r.state for r in results] == ["down", "down"]
    for result in results:
        assert not any(secret in f"{result.name} {result.url} {result.error}" for secret in SECRETS), result


async def capcon(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "console",
        *args,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    return process.returncode, out.decode(), err.decode()


def history_text(path: Path) -> str:
    """Every value of every table of a history file, as text."""
    with sqlite3.connect(path) as connection:
        tables = [name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        assert {"replicas", "polls", "samples"} <= set(tables)
        return "\n".join(repr(row) for table in tables for row in connection.execute(f'SELECT * FROM "{table}"'))


def assert_nowhere(path: Path, *texts: str) -> None:
    blob = history_text(path)
    raw = b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))
    for secret in SECRETS:
        for form in {secret, quote(secret)}:
            assert form not in blob and form.encode() not in raw
            for text in texts:
                assert form not in text


async def test_watch_once_records_and_prints_a_credentialed_target_without_its_secrets(tmp_path):
    page = sample_text(V032_SMALL_KV)
    db = tmp_path / "history.db"
    async with serve(guarded(page)) as base:
        good = base.replace("http://", f"http://admin:{PASSWORD}@") + f"/metrics?api_key={KEY}"
        dead = f"http://admin:{PASSWORD}@127.0.0.1:{closed_port()}/metrics?api_key={KEY}"
        code, out, err = await capcon(
            "watch", "--target", good, "--target", dead, "--once", "--interval", "0.3", "--db", str(db)
        )
        json_code, json_out, json_err = await capcon(
            "watch", "--target", good, "--once", "--json", "--interval", "0.3", "--db", str(db)
        )
    assert code == 0 and json_code == 0, err + json_err
    report = json.loads(json_out)
    assert report["replicas"][0]["state"] == "up"
    assert report["replicas"][0]["url"] == base.replace("http://", "http://admin:***@") + "/metrics?api_key=***"
    assert base.removeprefix("http://") in out and "DOWN" in out
    with sqlite3.connect(db) as connection:
        urls = sorted(url for (url,) in connection.execute("SELECT url FROM replicas"))
    assert urls and all("admin:***@" in url and "api_key=***" in url for url in urls)
    assert_nowhere(db, out, err, json_out, json_err)


# --- end to end: Prometheus with credentials -----------------------------------------------------


EMPTY = {"status": "success", "data": {"resultType": "vector", "result": []}}


@pytest.fixture
async def guarded_prometheus():
    """/api/v1/query answering only with Basic auth admin:PASSWORD and api_key=KEY; else 401 echoing the password."""
    seen: list = []

    async def query(request: web.Request) -> web.Response:
        seen.append((request.headers.get("Authorization"), request.query.get("api_key")))
        if request.headers.get("Authorization") != basic("admin", PASSWORD) or request.query.get("api_key") != KEY:
            return web.json_response(
                {"status": "error", "errorType": "auth", "error": f"bad password {received(request)}"}, status=401
            )
        return web.json_response(EMPTY)

    async with serve(query, path="/prom/api/v1/query") as base:
        yield base, seen


async def test_prometheus_credentials_go_out_as_basic_auth_and_its_errors_hold_no_secret(guarded_prometheus, tmp_path):
    base, seen = guarded_prometheus
    good = base.replace("http://", f"http://admin:{PASSWORD}@") + f"/prom?api_key={KEY}"
    source = PrometheusSource(good, 'job="vllm"', 10, timeout=5)
    figures = await source.collect(1_800_000_000.0)
    await source.aclose()
    assert figures.source_error == "" and seen[-1] == (basic("admin", PASSWORD), KEY)
    assert source.url == base.replace("http://", "http://admin:***@") + "/prom?api_key=***"

    wrong = base.replace("http://", f"http://admin:{PASSWORD}@") + f"/prom?api_key={KEY}x"
    db = tmp_path / "history.db"
    code, out, err = await capcon(
        "watch", "--once", "--source", "prometheus", "--prometheus", wrong, "--db", str(db), "--timeout", "5"
    )
    json_code, json_out, json_err = await capcon(
        "watch", "--once", "--json", "--source", "prometheus", "--prometheus", wrong, "--timeout", "5"
    )
    assert code == json_code == 1
    assert out.count("\n") == 1 and "query refused (HTTP 401): bad password admin:*** " in out, out
    assert json.loads(json_out)["source_error"].startswith(
        f"Prometheus at {base.replace('http://', 'http://admin:***@')}/prom?api_key=***: "
    )
    assert_nowhere(db, out, err, json_out, json_err)


# --- the console's screen ---------------------------------------------------------------------


async def test_the_console_never_shows_a_secret(guarded_prometheus):
    from console.live.handle import FleetHandle
    from console.tui.app import ConsoleApp

    base, _seen = guarded_prometheus
    page = sample_text(V032_SMALL_KV)
    async with serve(guarded(page)) as target:
        good = target.replace("http://", f"http://admin:{PASSWORD}@") + f"/metrics?api_key={KEY}"
        refused = target.replace("http://", f"http://admin:{PASSWORD}@") + f"/metrics?api_key={KEY}9"
        scrape = Watcher(ScrapeSource(targets_from([good, refused]), timeout=5), 10, interval_seconds=1)
        prometheus = Watcher(
            PrometheusSource(
                base.replace("http://", f"http://admin:{PASSWORD}@") + f"/prom?api_key={KEY}0", "", 10, timeout=5
            ),
            10,
        )
        app = ConsoleApp([FleetHandle("scrape", None, scrape), FleetHandle("prom", None, prometheus)], interval=60)
        screens = []
        async with app.run_test(size=(160, 50)) as pilot:
            for _ in range(300):
                if all(view is not None for view in app.views):
                    break
                await pilot.pause(0.02)
            assert all(view is not None for view in app.views)
            await pilot.press("enter")  # the overview: open the first fleet
            await pilot.pause(0.1)
            screens.append(app.export_screenshot())
            await pilot.press("enter")  # the replica's every figure, with its full URL
            await pilot.pause(0.1)
            screens.append(app.export_screenshot())
            await pilot.press("escape", "o", "down", "enter")  # the Prometheus fleet, its source error in the header
            await pilot.pause(0.1)
            screens.append(app.export_screenshot())
    shown = "\n".join(screens)
    text = re.sub(r"<[^>]+>", "", shown).replace("&#160;", " ")
    assert (
        f"http://admin:***@{target.removeprefix('http://')}/metrics?api_key=***#2" in text
    )  # the row, and the detail screen
    assert "DOWN" in text and "query refused (HTTP 401): bad password admin:***" in text  # the Prometheus fleet's flag
    for secret in SECRETS:
        assert secret not in shown and quote(secret) not in shown


async def test_a_plan_whose_targets_hold_credentials_is_recorded_without_them(tmp_path):
    import yaml

    plan = yaml.safe_load((REPO / "plans" / "chat-8b-l40s.yaml").read_text())
    plan["fleet"] = {"targets": [f"http://admin:{PASSWORD}@127.0.0.1:{closed_port()}/metrics?api_key={KEY}"]}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    db = tmp_path / "history.db"
    code, out, err = await capcon("watch", str(path), "--once", "--interval", "0.2", "--db", str(db))
    assert code == 1, err
    assert_nowhere(db, out, err)


@given(
    st.text(alphabet="abcxyz019+.-", min_size=1, max_size=8),
    st.integers(20_000, 100_000),
    st.sampled_from(["http://u:pw@h:1/x?token=t", "://", " ftp://a@b", "host:80"]),
)
@settings(max_examples=20, deadline=None)
def test_a_long_run_of_scheme_characters_is_read_in_linear_time(piece, length, tail):
    """A URL after tens of KB of letters (a hostile gateway's reason, echoed back): each character is not tried as
    the start of a scheme in turn (100 KB took 14 s of CPU, which a refusal or a status line must never take)."""
    run = (piece * (length // len(piece) + 1))[:length]
    started = cpu_seconds()
    out = redact(run + tail, ["pw-secret-value"])
    assert cpu_seconds() - started < HANG_CPU_SECONDS / 10
    assert "pw@" not in out
