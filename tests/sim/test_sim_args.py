"""`capcon sim` arguments: scales, the replica cap and start-up failures, refused in one line before or while starting."""

import asyncio
import errno
from argparse import Namespace

import pytest

from console.cli import main
from console.commands.sim import _start
from console.errors import UserError


@pytest.mark.parametrize("option", ["--time-scale", "--rps-scale"])
@pytest.mark.parametrize("value", ["inf", "nan", "0", "-2"])
def test_non_finite_or_non_positive_scales_exit_2(capsys, option, value):
    with pytest.raises(SystemExit) as exited:
        main(["sim", "plans/internal-assistant-18rps.yaml", option, value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    wanted = {"inf": "expected at most", "nan": "expected a number, at most"}.get(
        value, "expected a number greater than 0, at most"
    )
    assert f"argument {option}: '{value}': {wanted}" in err
    assert err.count("\n") == 1
    assert "Traceback" not in err


def test_replicas_are_capped_with_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["sim", "plans/internal-assistant-18rps.yaml", "--replicas", "100000"])
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert (
        err
        == "capcon sim: argument --replicas: '100000': at most 256 replicas on one machine (see capcon sim --help)\n"
    )


def test_help_states_the_replica_cap(capsys):
    with pytest.raises(SystemExit):
        main(["sim", "--help"])
    assert "1 to 256" in " ".join(capsys.readouterr().out.split())


@pytest.mark.timeout(60)
def test_running_out_of_files_while_starting_exits_2_and_leaves_nothing(tmp_path):
    """Too few file descriptors for the replicas: one line, exit 2, the process gone (no hang, no half fleet)."""
    import resource
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]

    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (96, 96))

    finished = subprocess.run(
        [sys.executable, "-m", "console", "sim", "plans/internal-assistant-18rps.yaml", "--replicas", "200"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=45,
        preexec_fn=few_files,
    )
    assert finished.returncode == 2, finished.stderr
    assert finished.stdout == ""
    assert finished.stderr == (
        "capcon sim: --replicas 200: too many open files for this many servers; "
        "expected fewer replicas, or a higher open-file limit (ulimit -n)\n"
    )


class _Fleet:
    """A fleet whose start blocks or fails as asked, recording whether it was closed."""

    def __init__(self, failure: BaseException | None = None):
        self.failure = failure
        self.closed = 0

    async def __aenter__(self):
        if self.failure is not None:
            raise self.failure
        await asyncio.Event().wait()  # a start that never ends by itself

    async def close(self) -> None:
        self.closed += 1


async def test_a_stop_signal_while_starting_stops_the_start_and_closes():
    fleet, stop = _Fleet(), asyncio.Event()
    asyncio.get_running_loop().call_later(0.05, stop.set)
    assert await asyncio.wait_for(_start(fleet, stop, Namespace(port=0), 30000), 10) is False
    assert fleet.closed >= 1


@pytest.mark.parametrize(
    "failure, port, message",
    [
        (OSError(errno.EMFILE, "Too many open files"), 0, "--replicas 3: too many open files"),
        (OSError("cannot listen on 127.0.0.1:8000: Address already in use"), 8000, "--port 8000: cannot listen on"),
        (ValueError("no KV cache left after the weights"), 0, "the simulated fleet could not start: no KV cache left"),
    ],
)
async def test_a_failed_start_closes_what_opened_and_is_a_user_error(failure, port, message):
    fleet = _Fleet(failure)
    with pytest.raises(UserError) as caught:
        await _start(fleet, asyncio.Event(), Namespace(port=port), 3)
    assert str(caught.value).startswith(message)
    assert fleet.closed >= 1
