"""The one switch (console/live/switch.py), called directly, by `capcon overflow set` and by key m in the console.

A real command actuator (a Python script that writes down what it was given), a real plan file, real history
files. The plan keeps prompts in (data.prompts_may_leave: false): hosted is refused before the command runs,
in the same words from the three callers, and each attempt is in the history once.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from console.cli import main
from console.live.actuators import CommandActuator
from console.live.audit import EVENT_KIND, FileAudit, StoreAudit
from console.live.switch import INTERRUPTED, plan_rules, switch
from console.overflow.switch import request
from console.plan.schema import load_plan
from console.store.database import Store
from console.store.paths import default_history_path

REPO = Path(__file__).resolve().parents[2]
PLAN = REPO / "plans" / "internal-assistant-18rps.yaml"
REFUSED = (
    "hosted is refused: the plan's data.prompts_may_leave is false, so prompts may not be sent to a hosted endpoint"
)

pytestmark = pytest.mark.timeout(120)


def command_plan(tmp_path: Path) -> tuple[Path, Path]:
    """The repository's plan (prompts stay in) with a command actuator that appends each body it reads to a file."""
    got = tmp_path / "got.jsonl"
    script = tmp_path / "apply.py"
    script.write_text(
        "import sys\n"
        f"with open({str(got)!r}, 'a') as out:\n"
        "    out.write(sys.stdin.read().strip() + '\\n')\n"
        "print('switched', file=sys.stderr)\n"
    )
    text = PLAN.read_text()
    assert "  prompts_may_leave: false\n" in text
    text = text.replace(
        "  max_wait_seconds: 3\n",
        f"  max_wait_seconds: 3\n  actuators:\n    - command: {{argv: [{sys.executable}, {script}], timeout_seconds: 20}}\n",
        1,
    )
    path = tmp_path / "plan.yaml"
    path.write_text(text + "\nfleet:\n  targets: [http://127.0.0.1:9]\n")
    return path, got


def attempts(path: Path, reason: str) -> list:
    store = Store.open(path, read_only=True)
    try:
        return [e for e in store.events() if e.kind == EVENT_KIND and e.detail.get("reason") == reason]
    finally:
        store.close()


def sent(got: Path) -> list[dict]:
    return [json.loads(line) for line in got.read_text().splitlines()] if got.exists() else []


async def test_hosted_is_refused_by_the_plan_before_any_actuator_and_recorded_once(tmp_path):
    plan_path, got = command_plan(tmp_path)
    plan = load_plan(str(plan_path))
    built = []

    def actuators():
        built.append(1)
        return [CommandActuator(spec.argv, spec.timeout_seconds) for spec in plan.overflow.actuators]

    db = tmp_path / "h.sqlite"
    outcome = await switch(
        request("hosted", "try hosted", "alice"),
        fleet=plan.name,
        rules=plan_rules(plan),
        actuators=actuators,
        audit=FileAudit(db),
        clock=lambda: 1_700_000_000.0,
    )
    assert outcome.refused == REFUSED and outcome.answers == () and not outcome.ok
    assert built == [] and sent(got) == []  # nothing was asked of any actuator
    (attempt,) = attempts(db, "try hosted")
    assert attempt.at == 1_700_000_000.0 and attempt.subject == "-> hosted: refused by the plan"
    assert attempt.detail["refused"] == REFUSED and attempt.detail["answers"] == []

    # The same plan, bounded_queue: the command gets the body and the attempt is recorded once, applied.
    outcome = await switch(
        request("bounded_queue", "queue it", "alice", "30m", max_queue=12),
        fleet=plan.name,
        rules=plan_rules(plan),
        actuators=actuators,
        audit=FileAudit(db),
    )
    assert outcome.ok and outcome.words() == "1 of 1 applied"
    assert outcome.answers[0].detail == "applied (exit 0): switched"
    assert sent(got) == [
        {"mode": "bounded_queue", "reason": "queue it", "actor": "alice", "for": 1800.0, "max_queue": 12}
    ]
    (attempt,) = attempts(db, "queue it")
    assert attempt.subject == "-> bounded_queue: applied" and attempt.detail["applied"] == 1


async def test_an_interrupted_switch_is_recorded_with_its_outcome_unknown(tmp_path):
    import asyncio

    started = tmp_path / "started"
    script = tmp_path / "slow.py"
    script.write_text(
        f"import pathlib, sys, time\nsys.stdin.read()\npathlib.Path({str(started)!r}).write_text('x')\ntime.sleep(60)\n"
    )
    store = Store.open(tmp_path / "h.sqlite")
    try:
        task = asyncio.ensure_future(
            switch(
                request("pass", "stopped", "alice"),
                fleet="f",
                rules=plan_rules(None),
                actuators=lambda: [CommandActuator([sys.executable, str(script)], 60)],
                audit=StoreAudit(store),
            )
        )
        for _ in range(600):
            if started.exists():
                break
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        store.close()
    (attempt,) = attempts(tmp_path / "h.sqlite", "stopped")
    (answer,) = attempt.detail["answers"]
    assert not answer["ok"] and answer["detail"] == INTERRUPTED


async def test_an_unwritable_history_is_said_and_the_answers_kept(tmp_path):
    plan_path, got = command_plan(tmp_path)
    plan = load_plan(str(plan_path))
    outcome = await switch(
        request("pass", "no file", "alice"),
        fleet=plan.name,
        rules=plan_rules(plan),
        actuators=lambda: [CommandActuator(s.argv, s.timeout_seconds) for s in plan.overflow.actuators],
        audit=FileAudit(tmp_path),  # a folder: not a history file
    )
    assert outcome.ok and outcome.unrecorded and len(sent(got)) == 1


def test_the_cli_refuses_hosted_in_the_same_words_and_records_it_once(capsys, tmp_path):
    plan_path, got = command_plan(tmp_path)
    db = tmp_path / "cli.sqlite"
    code = main(["overflow", "set", "hosted", str(plan_path), "--reason", "cli hosted", "--db", str(db)])
    err = capsys.readouterr().err
    assert code == 2 and REFUSED in err and len(err.strip().splitlines()) == 1, err
    assert sent(got) == []
    (attempt,) = attempts(db, "cli hosted")
    assert attempt.detail["refused"] == REFUSED


@pytest.mark.parametrize("demo", [False, True], ids=["watch", "demo-without-db"])
async def test_the_console_refuses_hosted_in_the_same_words_and_records_it_once(tmp_path, demo):
    """Recorded in the user's history though no poll is; a demo without --db keeps it on its timeline only."""
    from console.live.handle import FleetHandle
    from console.tui.app import ConsoleApp
    from console.tui.screens.switch_screen import SwitchScreen
    from tests.tui.conftest import settle, shown
    from tests.tui.fakes import PLAN_NOW, FakeClock, FakeWatcher, normal_fleet

    plan_path, got = command_plan(tmp_path)
    clock = FakeClock()
    handle = FleetHandle(
        "assistant", load_plan(str(plan_path)), FakeWatcher(normal_fleet(), clock=clock), lambda now: PLAN_NOW
    )
    # Not recording its polls; `capcon demo` without --db passes no history for its switches.
    options = {"switch_history": None} if demo else {}
    history = default_history_path()
    before = len(attempts(history, "console hosted")) if history.exists() else 0
    app = ConsoleApp([handle], clock=clock, interval=60.0, actor="alice", **options)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("m")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, SwitchScreen)
        await pilot.press("3", "tab", "tab", "tab", "tab", "tab", *"console hosted", "enter", "enter")
        for _ in range(500):
            if dialog.answers is not None:
                break
            await pilot.pause(0.02)
        result = shown(dialog.query_one("#switch-result"))
        assert dialog.outcome is not None and dialog.outcome.refused == REFUSED
        assert REFUSED in result.replace("\n", " "), result
        await pilot.press("escape")
        await pilot.pause()
        assert "hosted by alice: console hosted (refused by the plan)" in shown(app.screen.query_one("#flags"))
        assert len(app.sessions[0].switches) == 1  # on the timeline once
    assert sent(got) == []
    after = attempts(history, "console hosted") if history.exists() else []
    if demo:
        assert len(after) == before  # the user's own history untouched
        return
    assert len(after) == before + 1  # recorded though no poll was
    attempt = after[-1]
    assert attempt.detail["refused"] == REFUSED and attempt.fleet == "assistant"
