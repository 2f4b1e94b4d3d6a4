"""The simulator under hostile options and load: bounded options, bounded work per wake, bounded memory,
and Ctrl+C / SIGTERM that always stop it promptly and cleanly (a real process, real ports)."""

from __future__ import annotations

import asyncio
import random
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from console.cli import main
from console.commands import sim as sim_command
from console.sim.engine import Engine, SimRequest
from console.sim.server import MAX_WAITING, ReplicaServer
from console.sim.shape import replica_shape
from console.sim.traffic import MAX_ARRIVALS_PER_CALL, Target, TrafficGenerator
from tests.cpu_time import HANG_CPU_SECONDS, cpu_seconds

from .running import start_sim
from .sim_plans import example_a, flat_week, office_assistant

REPO = Path(__file__).resolve().parents[2]
PLAN = REPO / "plans" / "internal-assistant-18rps.yaml"  # busiest hour 18 rps


def _exit(argv: list[str]) -> tuple[int, float]:
    started = cpu_seconds()
    try:
        code = main(argv)
    except SystemExit as exited:
        code = exited.code
    return code, started


@pytest.mark.parametrize(
    "argv, wanted",
    [
        (
            ["--rps-scale", "1e9"],
            "argument --rps-scale: '1e9': expected at most 10000 (ten thousand times the plan's traffic)",
        ),
        (
            ["--rps-scale", "1000"],
            "--rps-scale 1000: the plan's busiest hour of 18 rps becomes 18000 rps; expected at most 5000 "
            "requests per second from one simulator (--rps-scale at most 277.8)",
        ),
        (["--time-scale", "1e308"], "argument --time-scale: '1e308': expected at most 1000000"),
        (["--time-scale", "1e999"], "argument --time-scale: '1e999': expected at most 1000000"),
        (
            ["--seed", "9" * 400],
            "argument --seed: '" + "9" * 40 + "'… (400 characters): expected at most 9223372036854775807",
        ),
        (["--seed", "-1"], "argument --seed: '-1': expected a number at least 0"),
        (
            ["--seed", "9" * 4090],
            "argument --seed: '" + "9" * 40 + "'… (4,090 characters): expected at most 9223372036854775807",
        ),
        (
            ["--seed", "x" * 50],
            "argument --seed: '" + "x" * 40 + "'… (50 characters): expected a whole number, at most",
        ),
        (["--seed=--"], "argument 3 (--seed=...) gives '--' as the value of --seed; expected a value after '='"),
        (["--port", "99999999999999999999"], "argument --port: '99999999999999999999': expected at most 65535"),
        (["--status-every", "inf"], "argument --status-every: 'inf': expected at most 86400 seconds"),
        (["--status-every", "nan"], "argument --status-every: 'nan': expected a number, at most 86400"),
        (["--replicas", "1" + "0" * 300], "at most 256 replicas on one machine"),
        (["--replicas", "9" * 309], "'" + "9" * 40 + "'… (309 characters): at most 256 replicas on one machine"),
        (["--status-every", "1e-300"], "argument --status-every: '1e-300': expected 0 (never) or at least 0.1 seconds"),
    ],
)
def test_hostile_options_are_one_line_and_exit_2_at_once(capsys, argv, wanted):
    code, started = _exit(["sim", str(PLAN), *argv])
    seconds = cpu_seconds() - started
    out, err = capsys.readouterr()
    assert code == 2
    assert out == "" and "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("capcon sim: ")
    assert wanted in err, err
    assert seconds < HANG_CPU_SECONDS


@pytest.mark.parametrize(
    "argv, wanted",
    [
        (["--interval", "1e9"], "--interval 1e9: expected at most 3600 seconds (an hour)"),
        (["--window", "1e308"], "--window 1e308: expected at most 86400 seconds (a day)"),
        (["--time-scale", "nan"], "argument --time-scale: 'nan': expected a number"),
        (["--seed", "1e3"], "argument --seed: invalid int value: '1e3'"),
        (["--replicas", "-1"], "argument --replicas"),
    ],
)
def test_demo_options_are_bounded_too(capsys, argv, wanted):
    code, _ = _exit(["demo", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1
    assert wanted in err, err


def test_a_demo_of_a_plan_busier_than_the_simulator_is_one_line(tmp_path, capsys):
    busy = tmp_path / "busy.yaml"
    busy.write_text(PLAN.read_text().replace("16, 18, 18", "16, 18000, 18"))
    code, _ = _exit(["demo", "--plan", str(busy)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == (
        f"capcon demo: {busy}: the plan's busiest hour asks for 18000 rps; expected at most 5000 requests per "
        "second from one simulator (capcon sim PLAN --rps-scale 0.2778 runs it scaled down)\n"
    )


def test_off_traffic_is_not_held_to_the_simulator_s_pace():
    plan = office_assistant()
    sim_command.check_rps_scale(plan, 10_000, "off")  # nothing generated: any scale
    with pytest.raises(Exception, match="expected at most 5000 requests per second"):
        sim_command.check_rps_scale(plan, 10_000, "inprocess")


# Bounded work ----------------------------------------------------------------------------------------


class _Sink(Target):
    def __init__(self):
        self.sent = 0

    def send(self, prompt, answer, max_tokens, kind) -> bool:
        self.sent += 1
        return True


def test_a_flood_of_arrivals_is_cut_to_a_bounded_batch_per_call_and_counted():
    plan = office_assistant()
    workload = plan.workloads[0]
    import dataclasses

    flood = dataclasses.replace(workload, rps_by_hour=flat_week(1e6))
    sink = _Sink()
    clock = [0.0]
    generator = TrafficGenerator([flood], [sink], 8192, rps_scale=10_000, clock=lambda: clock[0])
    generator.run_due(0.0)
    started = cpu_seconds()
    for tick in range(1, 21):
        clock[0] = tick * 0.05
        assert generator.run_due(clock[0]) <= MAX_ARRIVALS_PER_CALL
    assert cpu_seconds() - started < HANG_CPU_SECONDS  # 1e10 rps asked for: 20 bounded calls
    assert sink.sent <= 20 * MAX_ARRIVALS_PER_CALL
    assert generator.stats.dropped > 10**8  # said, not silently lost


def test_an_engine_advanced_in_bounded_slices_ends_where_one_unbounded_call_does():
    shape = replica_shape(example_a())
    rng = random.Random(5)
    arrivals = [(rng.uniform(0, 5), rng.randint(100, 3000), rng.randint(10, 300)) for _ in range(400)]
    whole, sliced = Engine(shape), Engine(shape)
    for engine in (whole, sliced):
        for n, (at, prompt, answer) in enumerate(sorted(arrivals)):
            engine.submit(SimRequest(f"r{n}", prompt, answer, 400, at))
    whole.advance(60.0)
    calls = 0
    while True:
        sliced.advance(60.0, max_work=50)
        calls += 1
        if not sliced.behind(60.0):
            break
    assert calls > 10  # it did take several slices
    assert (sliced.steps, sliced.preemptions, sliced.clock) == (whole.steps, whole.preemptions, whole.clock)
    assert sliced.num_running == whole.num_running and sliced.num_waiting == whole.num_waiting


async def test_a_replica_refuses_past_its_waiting_cap():
    shape = replica_shape(office_assistant())
    replica = ReplicaServer(shape)
    await replica.start()
    try:
        accepted = sum(replica.send(1000, 100, 200, "interactive") for _ in range(MAX_WAITING + 500))
        assert accepted <= MAX_WAITING + shape.max_num_seqs
        assert replica.engine.num_waiting <= MAX_WAITING
    finally:
        await replica.stop()


def test_a_second_signal_ends_the_process_at_once(monkeypatch):
    said = []
    monkeypatch.setattr(sim_command, "_exit_now", lambda why: said.append(why))
    stop, deadlines = asyncio.Event(), []
    sim_command._on_signal(stop, deadlines)
    assert stop.is_set() and said == [] and len(deadlines) == 1 and deadlines[0].daemon
    sim_command._on_signal(stop, deadlines)
    assert said == ["a second signal"]
    for deadline in deadlines:
        deadline.cancel()


# The real process --------------------------------------------------------------------------------------


def _start(*args: str) -> tuple[subprocess.Popen, list[str], list[str]]:
    return start_sim(str(PLAN), *args, ready_seconds=60)


def _listening(url: str) -> bool:
    host, port = url.removeprefix("http://").split(":")
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((host, int(port))) == 0


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@pytest.mark.timeout(180)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.slow  # 64 replicas at full load: a long run
def test_the_heaviest_load_allowed_stops_promptly_on_a_signal_and_frees_every_port(signum):
    """64 replicas at the simulator's top pace (5,000 rps offered at the peak): CPU-bound, yet the signal
    is heard within seconds, every port closes, memory stays bounded, and no deadline had to force it."""
    process, urls, lines = _start(
        "--replicas", "64", "--rps-scale", "277", "--start", "mon 09:00", "--status-every", "1"
    )
    try:
        assert len(urls) == 64
        time.sleep(6)  # queues fill; every engine steps full batches
        assert process.poll() is None
        rss = _rss_kb(process.pid)
        assert rss < 600_000, f"{rss} kB after 6 s of overload"
        sent = time.monotonic()
        process.send_signal(signum)
        code = process.wait(timeout=60)
        took = time.monotonic() - sent
        process.reader.join(10)
    finally:
        if process.poll() is None:
            process.kill()
    stderr = process.stderr.read()
    assert code == 0, stderr
    assert "Traceback" not in stderr and "stopping at once" not in stderr, stderr
    assert took < sim_command.STOP_DEADLINE_SECONDS, f"took {took:.1f} s to stop"
    assert any(line.startswith("stopped: every replica closed its port.") for line in lines), lines[-3:]
    assert not any(_listening(url) for url in urls)
