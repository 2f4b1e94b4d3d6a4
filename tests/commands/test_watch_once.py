"""`capcon watch --once` end to end: the real CLI against loopback servers serving real vLLM pages."""

from __future__ import annotations

import asyncio
import json
import re
import sys

import pytest

from tests.metrics.pages import REPO, V032_SMALL_KV, advance, sample_text
from tests.sources.servers import closed_port, pages_in_turn, serve

ISSUE_KEYS = {
    "name",
    "url",
    "state",
    "requests_per_second",
    "prompt_tokens_per_second",
    "generation_tokens_per_second",
    "running",
    "waiting",
    "kv_usage",
    "preemptions_per_second",
    "prefix_hit_share",
    "ttft_p50_seconds",
    "ttft_p95_seconds",
    "ttft_p99_seconds",
    "itl_p95_seconds",
    "tpot_p95_seconds",
    "e2e_p95_seconds",
    "queue_p95_seconds",
    "mean_input_tokens",
    "mean_output_tokens",
}


async def capcon(*args: str, env: dict | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "console",
        *args,
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    return process.returncode, out.decode(), err.decode()


def loaded_page(base: str, requests: int) -> str:
    later = advance(base, counters={"vllm:request_success_total": float(requests)}, where='finished_reason="stop"')
    return advance(
        later,
        counters={"vllm:prompt_tokens_total": 64.0 * requests, "vllm:generation_tokens_total": 16.0 * requests},
        observations={
            "vllm:time_to_first_token_seconds": [0.03] * requests,
            "vllm:request_prompt_tokens": [64.0] * requests,
            "vllm:request_generation_tokens": [16.0] * requests,
        },
        gauges={"vllm:num_requests_waiting": 3.0, "vllm:kv_cache_usage_perc": 0.96},
    )


async def test_once_json_against_two_replicas_and_a_dead_one():
    base = sample_text(V032_SMALL_KV)
    async with (
        serve(pages_in_turn(base, loaded_page(base, 10))) as one,
        serve(pages_in_turn(base, loaded_page(base, 30))) as two,
    ):
        dead = f"127.0.0.1:{closed_port()}"
        code, out, err = await capcon(
            "watch", "--once", "--json", "--interval", "0.5", "--target", one, "--target", two, "--target", dead
        )
    assert code == 0, err
    report = json.loads(out)
    assert report["source"] == "scrape" and report["window_seconds"] >= 0.5
    assert {"window_seconds", "source", "replicas", "fleet"} <= set(report)
    replicas = report["replicas"]
    assert [r["state"] for r in replicas] == ["up", "up", "down"]
    for figures in [*replicas, report["fleet"]]:
        assert set(figures) >= ISSUE_KEYS
    first, second, gone = replicas
    assert first["mean_input_tokens"] == pytest.approx(64.0) and first["mean_output_tokens"] == pytest.approx(16.0)
    assert first["prompt_tokens_per_second"] == pytest.approx(64 * first["requests_per_second"])
    assert second["requests_per_second"] > first["requests_per_second"] > 0
    # Every observation in (0.02, 0.04]: the median is interpolated to the middle of that bucket.
    assert first["ttft_p50_seconds"] == pytest.approx(0.03)
    assert first["waiting"] == 3.0 and first["kv_usage"] == pytest.approx(0.96)
    assert gone["running"] is None and gone["requests_per_second"] is None
    fleet = report["fleet"]
    assert fleet["waiting"] == 6.0
    assert fleet["requests_per_second"] == pytest.approx(first["requests_per_second"] + second["requests_per_second"])
    assert fleet["mean_input_tokens"] == pytest.approx(64.0)


async def test_once_table_shows_replicas_the_fleet_and_unknowns():
    base = sample_text(V032_SMALL_KV)
    async with serve(pages_in_turn(base, base)) as one:
        code, out, err = await capcon("watch", "--once", "--interval", "0.3", "--target", one)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1].split()[:3] == ["NAME", "STATE", "REQ/S"]
    row = lines[2].split()
    assert row[1] == "up" and row[2] == "0"  # nothing finished: a known 0 req/s
    assert row[10] == "–"  # ...and no TTFT to speak of: unknown, not 0
    assert lines[-1].startswith("fleet") and lines[-1].split()[1] == "up"


async def test_exit_code_is_non_zero_when_no_target_answered():
    code, out, _err = await capcon(
        "watch", "--once", "--json", "--interval", "0.2", "--target", f"127.0.0.1:{closed_port()}"
    )
    assert code == 1
    assert json.loads(out)["replicas"][0]["state"] == "down"


@pytest.mark.parametrize(
    "args,message",
    [
        (["--once"], "no targets"),
        (["--once", "--interval", "0", "--target", "h:1"], "--interval"),
        (["--json", "--target", "h:1"], "--json"),
        (["--once", "--source", "prometheus", "--target", "h:1"], "no Prometheus URL"),
        (["--once", "--target", "h:1", "--token-env", "CAPCON_SURELY_UNSET"], "CAPCON_SURELY_UNSET"),
    ],
)
async def test_bad_arguments_are_one_line_and_exit_2(args, message):
    code, _out, err = await capcon("watch", *args)
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


async def test_targets_from_the_plan_fleet_section(tmp_path):
    import yaml

    plan_file = REPO / "plans" / "chat-8b-l40s.yaml"
    if not plan_file.is_file():
        pytest.skip(f"example plan {plan_file.name} not in this checkout")
    base = sample_text(V032_SMALL_KV)
    async with serve(pages_in_turn(base, loaded_page(base, 5))) as one:
        plan = yaml.safe_load(plan_file.read_text())
        plan["fleet"] = {"targets": [one]}
        path = tmp_path / "plan.yaml"
        path.write_text(yaml.safe_dump(plan))
        code, out, err = await capcon("watch", str(path), "--once", "--json", "--interval", "0.3")
    assert code == 0, err
    [replica] = json.loads(out)["replicas"]
    assert replica["url"] == one + "/metrics" and replica["state"] == "up"
    assert replica["mean_output_tokens"] == pytest.approx(16.0)


async def test_prometheus_down_is_a_source_error_and_exit_1():
    code, out, _err = await capcon(
        "watch",
        "--once",
        "--json",
        "--source",
        "prometheus",
        "--prometheus",
        f"http://127.0.0.1:{closed_port()}",
        "--timeout",
        "2",
    )
    report = json.loads(out)
    assert code == 1 and report["source"] == "prometheus"
    assert report["source_error"] and report["fleet"]["running"] is None


def _plan_with_fleet(tmp_path, name: str, fleet: dict | None):
    """The shipped 8B plan under another name, watching `fleet` (or with no fleet section)."""
    import yaml

    plan = yaml.safe_load((REPO / "plans" / "chat-8b-l40s.yaml").read_text())
    plan["name"] = name
    plan.pop("fleet", None)
    if fleet is not None:
        plan["fleet"] = fleet
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


async def test_once_with_two_plans_keeps_the_fleets_apart(tmp_path):
    """Two plans, two fleets: one entry each with its own replicas and fleet row, never one merged fleet."""
    base = sample_text(V032_SMALL_KV)
    async with (
        serve(pages_in_turn(base, loaded_page(base, 10))) as one,
        serve(pages_in_turn(base, loaded_page(base, 40))) as two,
    ):
        # host:port, as --target takes it, in one plan; a full URL in the other.
        first = _plan_with_fleet(tmp_path, "fleet-a", {"targets": [one.removeprefix("http://")]})
        second = _plan_with_fleet(tmp_path, "fleet-b", {"targets": [two]})
        code, out, err = await capcon("watch", str(first), str(second), "--once", "--json", "--interval", "0.5")
    assert code == 0, err
    report = json.loads(out)
    assert list(report) == ["fleets"]
    a, b = report["fleets"]
    assert (a["plan"], b["plan"]) == ("fleet-a", "fleet-b")
    assert a["plan_file"] == str(first) and b["plan_file"] == str(second)
    assert [r["url"] for r in a["replicas"]] == [one + "/metrics"]
    assert [r["url"] for r in b["replicas"]] == [two + "/metrics"]
    for fleet in (a, b):
        assert fleet["source"] == "scrape" and fleet["window_seconds"] >= 0.5
        assert fleet["fleet"]["requests_per_second"] == pytest.approx(fleet["replicas"][0]["requests_per_second"])
    assert b["fleet"]["requests_per_second"] > a["fleet"]["requests_per_second"] > 0


async def test_once_table_with_two_plans_prints_one_block_per_plan(tmp_path):
    base = sample_text(V032_SMALL_KV)
    async with serve(pages_in_turn(base, base)) as one:
        up = _plan_with_fleet(tmp_path, "fleet-up", {"targets": [one]})
        dead = _plan_with_fleet(tmp_path, "fleet-dead", {"targets": [f"127.0.0.1:{closed_port()}"]})
        code, out, err = await capcon("watch", str(up), str(dead), "--once", "--interval", "0.3")
    assert code == 0, err  # one fleet answered
    blocks = out.strip().split("\n\n")
    assert len(blocks) == 2
    for block, name, path, state in ((blocks[0], "fleet-up", up, "up"), (blocks[1], "fleet-dead", dead, "DOWN")):
        lines = block.splitlines()
        assert lines[0] == f"plan {name} ({path})"
        assert lines[2].split()[:2] == ["NAME", "STATE"]
        assert lines[3].split()[1] == state
        fleet_rows = [line for line in lines if line.split()[0] == "fleet"]
        assert len(fleet_rows) == 1 and fleet_rows[0].split()[1] == state


async def test_once_with_two_plans_exits_1_only_when_no_fleet_answered(tmp_path):
    dead_a = _plan_with_fleet(tmp_path, "dead-a", {"targets": [f"127.0.0.1:{closed_port()}"]})
    dead_b = _plan_with_fleet(tmp_path, "dead-b", {"targets": [f"127.0.0.1:{closed_port()}"]})
    code, out, err = await capcon("watch", str(dead_a), str(dead_b), "--once", "--json", "--interval", "0.2")
    assert code == 1, err
    assert [f["replicas"][0]["state"] for f in json.loads(out)["fleets"]] == ["down", "down"]


@pytest.mark.parametrize("once", [["--once"], []])
async def test_a_plan_without_fleet_among_several_is_named(tmp_path, once):
    """Both for --once and the console: refused before anything is polled or drawn."""
    with_fleet = _plan_with_fleet(tmp_path, "with-fleet", {"targets": ["127.0.0.1:9"]})
    without = _plan_with_fleet(tmp_path, "no-fleet", None)
    code, out, err = await capcon("watch", str(with_fleet), str(without), *once)
    assert code == 2 and out == ""
    assert err == f"capcon watch: {without} has no fleet section; expected fleet.targets or fleet.prometheus_url\n"


async def test_the_same_plan_twice_is_refused(tmp_path):
    path = _plan_with_fleet(tmp_path, "twice", {"targets": ["127.0.0.1:9"]})
    code, out, err = await capcon("watch", str(path), str(tmp_path / ".." / tmp_path.name / "twice.yaml"), "--once")
    assert code == 2 and out == ""
    assert "given twice" in err and "expected each plan once" in err and len(err.splitlines()) == 1


# --- the plan beside the figures, the flags, and --fail-on -------------------


def _strict_json(text: str):
    """json.loads that refuses NaN and Infinity, as strict JSON readers (jq, JavaScript) do."""

    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


COMPARISON_KEYS = {"label", "planned", "actual", "unit", "status", "note"}
ACTIVE_KEYS = {"kind", "subject", "severity", "since", "since_time", "why", "todo"}
PENDING_KEYS = ACTIVE_KEYS | {"held_seconds", "needed_seconds"}


@pytest.fixture
async def troubled_fleet():
    """Three targets: one queueing (saturation pending), one whose counters go down (restarted, raised at
    once), one refusing connections (down, pending for its 10 s)."""
    base = sample_text(V032_SMALL_KV)
    loaded = loaded_page(base, 10)
    async with serve(pages_in_turn(base, loaded)) as queueing, serve(pages_in_turn(loaded, base)) as restarting:
        yield [queueing, restarting, f"127.0.0.1:{closed_port()}"]


def _targets(urls):
    return [arg for url in urls for arg in ("--target", url)]


async def test_once_json_with_a_plan_has_the_comparisons_and_the_flags(troubled_fleet):
    queueing, restarting, dead = troubled_fleet
    code, out, err = await capcon(
        "watch", "plans/chat-8b-l40s.yaml", *_targets(troubled_fleet), "--once", "--json", "--interval", "0.5"
    )
    assert code == 0, err
    report = _strict_json(out)
    assert {
        "plan",
        "plan_file",
        "plan_at",
        "comparisons",
        "flags",
        "window_seconds",
        "source",
        "replicas",
        "fleet",
    } <= set(report)
    assert report["plan"] == "chat-8b-l40s" and report["plan_file"] == "plans/chat-8b-l40s.yaml"
    assert (
        report["plan_at"]["weekday"] in ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
        and 0 <= report["plan_at"]["hour"] < 24
    )
    comparisons = report["comparisons"]
    assert comparisons and all(set(c) == COMPARISON_KEYS for c in comparisons)
    assert all(c["status"] in ("ok", "warning", "critical", "unknown") for c in comparisons)
    assert any(c["unit"] == "rps" and c["planned"] > 0 and c["actual"] is not None for c in comparisons)
    active, pending = report["flags"]["active"], report["flags"]["pending"]
    assert all(set(f) == ACTIVE_KEYS for f in active) and all(set(p) == PENDING_KEYS for p in pending)
    # A restart raises its flag at once; everything else needs longer than one --once run lasts.
    restarted = [f for f in active if f["kind"] == "replica_restarted"]
    assert [f["subject"] for f in restarted] == [restarting.removeprefix("http://")]
    assert restarted[0]["severity"] == "warning" and restarted[0]["why"] and restarted[0]["todo"]
    by_kind = {(p["kind"], p["subject"]): p for p in pending}
    down = by_kind[("replica_down", dead)]
    assert down["severity"] == "critical" and down["needed_seconds"] == 10 and 0.3 <= down["held_seconds"] < 10
    assert down["todo"] and down["since_time"].startswith("20")
    saturated = by_kind[("saturation", queueing.removeprefix("http://"))]
    assert saturated["needed_seconds"] == 30 and "waiting" in saturated["why"]


async def test_once_table_with_a_plan_lists_the_flags_one_line_each(troubled_fleet):
    code, out, err = await capcon(
        "watch", "plans/chat-8b-l40s.yaml", *_targets(troubled_fleet), "--once", "--interval", "0.5"
    )
    assert code == 0, err
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("flags: "))
    assert start > next(i for i, line in enumerate(lines) if line.startswith("fleet "))  # under the table
    summary, flags = lines[start], lines[start + 1 :]
    active, pending = (int(n) for n in re.match(r"flags: (\d+) active, (\d+) pending$", summary).groups())
    assert len(flags) == active + pending and active >= 1
    # The console's words for each kind, not the kind's key.
    assert any(line.startswith("▲ WARN replica restarted · ") for line in flags)
    assert any(line.startswith("… pending ✖ CRIT replica down · ") and " s of 10 s · " in line for line in flags)


@pytest.mark.parametrize(
    "level, code",
    [
        ("warning", 3),  # the restart is a raised warning
        ("critical", 4),  # no critical flag raised, but the dead replica's is pending
    ],
)
async def test_fail_on_says_whether_flags_are_raised_or_pending(troubled_fleet, level, code):
    got, out, err = await capcon(
        "watch", *_targets(troubled_fleet), "--once", "--json", "--interval", "0.5", "--fail-on", level
    )
    assert got == code, err
    assert _strict_json(out)["flags"]["active"]  # the report is printed as ever


async def test_fail_on_is_0_for_a_healthy_fleet_and_1_still_wins_when_nothing_answered():
    base = sample_text(V032_SMALL_KV)
    async with serve(pages_in_turn(base, base)) as healthy:
        code, out, err = await capcon("watch", "--target", healthy, "--once", "--interval", "0.3", "--fail-on", "info")
    assert code == 0, err
    assert "flags:" not in out  # no plan, nothing holding: the table as before
    code, _, err = await capcon(
        "watch", "--target", f"127.0.0.1:{closed_port()}", "--once", "--interval", "0.2", "--fail-on", "info"
    )
    assert code == 1, err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--fail-on", "warning", "--target", "h:1"], "--fail-on: only with --once"),
        (["--once", "--fail-on", "severe", "--target", "h:1"], "argument --fail-on: invalid choice: 'severe'"),
    ],
)
async def test_fail_on_bad_use_is_exit_2(args, message):
    code, out, err = await capcon("watch", *args)
    assert code == 2 and out == ""
    assert message in err and len(err.splitlines()) == 1


async def test_once_with_two_plans_gives_each_fleet_its_comparisons_and_flags(tmp_path):
    base = sample_text(V032_SMALL_KV)
    async with serve(pages_in_turn(base, loaded_page(base, 10))) as one:
        up = _plan_with_fleet(tmp_path, "fleet-up", {"targets": [one]})
        dead = _plan_with_fleet(tmp_path, "fleet-dead", {"targets": [f"127.0.0.1:{closed_port()}"]})
        code, out, err = await capcon(
            "watch", str(up), str(dead), "--once", "--json", "--interval", "0.3", "--fail-on", "critical"
        )
        text_code, text, _ = await capcon("watch", str(up), str(dead), "--once", "--interval", "0.3")
    assert code == 4, err  # the dead fleet's replica is pending down (critical); nothing critical raised
    a, b = _strict_json(out)["fleets"]
    assert (a["plan"], b["plan"]) == ("fleet-up", "fleet-dead")
    for fleet in (a, b):
        assert fleet["comparisons"] and set(fleet["flags"]) == {"active", "pending"}
    assert not any(p["kind"] == "replica_down" for p in a["flags"]["pending"])
    assert [p["kind"] for p in b["flags"]["pending"] if p["kind"] == "replica_down"] == ["replica_down"]
    assert text_code == 0
    blocks = text.strip().split("\n\n")
    assert len(blocks) == 2 and all(re.search(r"^flags: ", block, re.M) for block in blocks)
    assert "replica down" in blocks[1] and "replica down" not in blocks[0]  # the console's words for the kind


async def test_once_json_on_a_plan_without_capacity_says_the_capacity_is_estimated(troubled_fleet, tmp_path):
    text = (REPO / "plans" / "chat-8b-l40s.yaml").read_text()
    start = text.index("\ncapacity:")
    end = text.index("\nredundancy:")
    plan = tmp_path / "unmeasured.yaml"
    plan.write_text(text[:start] + text[end:])  # the same plan, its measured capacity taken out
    code, out, err = await capcon(
        "watch", str(plan), *_targets(troubled_fleet), "--once", "--json", "--interval", "0.5"
    )
    assert code == 0, err
    report = _strict_json(out)
    assert report["capacity_estimated"] is True
    (scheduled,) = [c for c in report["comparisons"] if c["label"] == "load/sched cap"]
    assert "(capacity estimated, not measured)" in scheduled["note"] and " x ~" in scheduled["note"]
