"""`capcon whatif` against a running `capcon sim`, on the plan alone, and with bad input."""

import json
import subprocess
import sys

import pytest

from tests.sim.running import REPO, start_sim

PLAN = REPO / "plans" / "internal-assistant-18rps.yaml"
pytestmark = pytest.mark.timeout(120)


def _whatif(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "console", "whatif", *args], cwd=REPO, capture_output=True, text=True, timeout=110
    )


@pytest.fixture(scope="module")
def fleet():
    process, urls, _ = start_sim(str(PLAN), "--replicas", "2", "--start", "mon 10:00", "--status-every", "0")
    try:
        yield urls
    finally:
        process.terminate()
        process.wait(timeout=20)


def test_against_a_simulated_fleet_prints_the_table_and_the_json(fleet):
    targets = [word for url in fleet for word in ("--target", url)]
    table = _whatif(str(PLAN), *targets, "--interval", "2", "--minutes", "2", "--replicas", "+1")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith("what-if for internal-assistant-18rps over the next 2 min")
    assert "2 replicas" in lines[0]
    assert lines[2].startswith("correction:")
    table = lines[: next(i for i, line in enumerate(lines) if line.startswith("targets:"))]
    names = [line.split()[0] for line in table if line.startswith(("now", "+1"))]
    assert names == ["now", "+1"]
    assert any(line.startswith("+1 replica: the new replica serves after 10 min (the lead time)") for line in lines)
    answer = _whatif(str(PLAN), *targets, "--interval", "2", "--minutes", "2", "--mode", "bounded_queue", "--json")
    assert answer.returncode == 0, answer.stderr
    report = json.loads(answer.stdout)
    assert report["minutes"] == 2
    assert report["observed"]["replicas"] == 2
    assert [s["name"] for s in report["scenarios"]] == ["now", "bounded queue 64"]
    for scenario in report["scenarios"]:
        for key in ("replicas", "mode", "ttft_p95_seconds", "tpot_p95_seconds", "refused_share", "hosted_share"):
            assert key in scenario
        assert scenario["deferred_share"] == 0.0 and scenario["gpu_hours"] == pytest.approx(2 * 2 / 60, abs=0.001)
    assert report["correction"]["factor"] > 0


def test_the_plan_alone_at_a_rate():
    answer = _whatif(str(PLAN), "--rps", "10", "--minutes", "1", "--json")
    assert answer.returncode == 0, answer.stderr
    report = json.loads(answer.stdout)
    assert [s["name"] for s in report["scenarios"]] == [
        "now",
        "+1 replica",
        "bounded queue 32",
        "hosted after 16",
        "defer batch",
    ]
    assert report["correction"]["factor"] == 1.0
    assert report["arrivals"]["rps_by_minute"] == [10.0]


def test_a_fleet_that_cannot_be_read_is_one_line_and_exit_1():
    answer = _whatif(str(PLAN), "--target", "127.0.0.1:9", "--interval", "0.5", "--minutes", "1")
    assert answer.returncode == 1
    assert answer.stdout == ""
    assert len(answer.stderr.strip().splitlines()) == 1 and "could not be read" in answer.stderr


@pytest.mark.parametrize(
    "args, said",
    [
        (["--replicas", "-99"], "--replicas"),
        (["--mode", "sideways"], "unknown mode"),
        (["--minutes", "0"], "--minutes 0"),
        (["--rps", "-1"], "--rps"),
        (["--max-queue", "5"], "--mode"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, said):
    answer = _whatif(str(PLAN), "--rps", "5", *args) if "--rps" not in args else _whatif(str(PLAN), *args)
    assert answer.returncode == 2, answer.stdout
    assert len(answer.stderr.strip().splitlines()) == 1
    assert said in answer.stderr and "Traceback" not in answer.stderr


def test_a_quiet_window_s_mean_length_leans_on_the_plan():
    from console.ahead.whatif_report import LENGTH_PRIOR_REQUESTS, blended_mean

    assert blended_mean(45.0, 2.0, 60.0) == pytest.approx(59.06, abs=0.01)  # two answers say little
    assert blended_mean(45.0, 3000.0, 60.0) == pytest.approx(45.0, abs=0.2)  # thousands say it all
    assert blended_mean(45.0, LENGTH_PRIOR_REQUESTS, 60.0) == pytest.approx(52.5)
    assert blended_mean(None, 100.0, 60.0) == blended_mean(45.0, 0.0, 60.0) == 60.0


@pytest.mark.parametrize(
    "gateway, said, expected",
    [(False, None, "pass"), (True, None, "bounded_queue"), (True, "pass", "pass"), (True, "MIXED", "bounded_queue")],
)
def test_now_runs_the_mode_the_gateway_says_it_enforces(gateway, said, expected):
    from console.ahead.whatif_report import Situation, now_policy_of
    from console.overflow.policy import Policy

    plan_policy = Policy(mode="bounded_queue", max_queue=64, max_wait_seconds=3.0)
    situation = Situation("f", 2, 1.0, (1.0,), "--rps", 100, 10, gateway, None, None, "replicas", gateway_mode=said)
    now = now_policy_of(plan_policy, situation)
    assert now.mode == expected
    if gateway:
        assert now.max_queue == 64  # the plan's bounds: the gateway's page does not say its own


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    from tests.replay.recording import T0, record_synthetic

    path = tmp_path_factory.mktemp("whatif") / "history.sqlite"
    record_synthetic(path, 900.0, fleet="internal-assistant-18rps", keep_views=False)
    return path, T0


def test_on_a_recording_the_arrivals_are_those_that_came_after_the_moment(recording):
    path, start = recording
    at = start + 780.0
    answer = _whatif(str(PLAN), "--db", str(path), "--at", str(at), "--minutes", "2", "--replicas", "+1", "--json")
    assert answer.returncode == 0, answer.stderr
    report = json.loads(answer.stdout)
    assert report["arrivals"]["basis"] == "recorded arrivals after --at"
    # Four synthetic replicas answer 2-5 requests each per 5 s poll: 1.6-4 rps in all.
    assert all(1.6 <= rps <= 4.0 for rps in report["arrivals"]["rps_by_minute"]), report["arrivals"]
    assert report["observed"]["replicas"] == 4
    assert [s["name"] for s in report["scenarios"]] == ["now", "+1 replica"]
    assert report["correction"]["observed_tpot_p95_seconds"] is not None


@pytest.mark.parametrize(
    "args, said",
    [
        (["--db", "x.sqlite"], "--db and --at go together"),
        (["--at", "10:40"], "--db and --at go together"),
        (["--db", "x.sqlite", "--at", "10:40", "--target", "127.0.0.1:9"], "--db reads a recording"),
    ],
)
def test_a_recording_asked_for_wrongly_is_one_line_and_exit_2(args, said):
    answer = _whatif(str(PLAN), *args)
    assert answer.returncode == 2, answer.stdout
    assert len(answer.stderr.strip().splitlines()) == 1 and said in answer.stderr


def test_a_moment_the_recording_does_not_hold_is_one_line(recording):
    path, start = recording
    answer = _whatif(str(PLAN), "--db", str(path), "--at", str(start - 7200.0), "--minutes", "1")
    assert answer.returncode == 2, answer.stdout
    assert len(answer.stderr.strip().splitlines()) == 1 and "no polls" in answer.stderr, answer.stderr
    assert "--fleet" not in answer.stderr
