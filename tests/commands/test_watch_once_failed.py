"""`capcon watch --once` on a fleet whose poll fails as a whole: one bounded line naming the fleet and why, exit 1,
and the other fleets still printed."""

from __future__ import annotations

import json

import pytest

from console.cli import main
from console.commands import watch as watch_command
from console.live.handle import FleetHandle
from console.text import PIECE_CHARACTERS
from tests.commands.test_watch_once import _plan_with_fleet
from tests.sources.servers import closed_port


class FailingWatcher:
    source_name = "scrape"
    window_seconds = 60.0
    interval_seconds = 1.0

    async def poll(self):
        raise ConnectionError("engines: " + ", ".join(f"engine-{i}" for i in range(6_000)))  # about 59 KB

    async def aclose(self) -> None:
        pass


def test_a_fleet_whose_poll_fails_as_a_whole_is_one_bounded_line_and_exit_1(monkeypatch, capsys):
    monkeypatch.setattr(
        watch_command, "fleet_handles", lambda args, plans: [FleetHandle("stuck", None, FailingWatcher())]
    )
    code = main(["watch", "--target", "127.0.0.1:9", "--once", "--interval", "0.2", "--no-record"])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and len(err) < PIECE_CHARACTERS + 60  # the fleet's name and the words around it
    assert err.startswith("capcon watch: stuck: poll failed: ConnectionError: engines: engine-0, engine-1")
    assert "more characters)" in err


@pytest.mark.parametrize("as_json", [False, True])
def test_one_failed_fleet_of_two_still_prints_the_other_and_exits_1(monkeypatch, capsys, tmp_path, as_json):
    up = _plan_with_fleet(tmp_path, "fleet-up", {"targets": [f"127.0.0.1:{closed_port()}"]})
    stuck = _plan_with_fleet(tmp_path, "fleet-stuck", {"targets": [f"127.0.0.1:{closed_port()}"]})
    real_handles = watch_command.fleet_handles

    def handles(args, plans):
        made = real_handles(args, plans)
        return [made[0], FleetHandle(made[1].name, made[1].plan, FailingWatcher())]

    monkeypatch.setattr(watch_command, "fleet_handles", handles)
    argv = ["watch", str(up), str(stuck), "--once", "--interval", "0.2", "--no-record"]
    code = main(argv + (["--json"] if as_json else []))
    out, err = capsys.readouterr()
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("capcon watch: fleet-stuck: poll failed: ConnectionError"), err
    if as_json:
        assert [fleet["plan"] for fleet in json.loads(out)["fleets"]] == ["fleet-up"]
    else:
        assert out.startswith("plan fleet-up (") and "fleet-stuck" not in out
