"""--write-plan: the capacity spliced into the plan's own text; every other byte as it was; the loader reads it."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.bench.planfile import PlanWriteError, spliced, write_capacity
from console.errors import UserError
from console.plan.schema import load_plan, parse_plan

PLANS = sorted((Path(__file__).resolve().parents[2] / "plans").glob("*.yaml"))
NEW = {"rps_per_replica": 4.256, "source": "capcon bench", "note": "measured 2026-12-02 against host:8000"}


def changed_lines(old: str, new: str) -> list[str]:
    return [line for line in difflib.ndiff(old.splitlines(), new.splitlines()) if line[:1] in "+-"]


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.name)
def test_shipped_plans_change_in_their_capacity_lines_only(path):
    text = path.read_text()
    new = spliced(text, str(path), NEW)
    changed = changed_lines(text, new)
    assert len(changed) == 6, changed  # three lines out, three in
    assert all(line[2:].lstrip().split(":")[0] in ("rps_per_replica", "source", "note") for line in changed)
    plan = parse_plan(new, str(path))
    assert (plan.capacity.rps_per_replica, plan.capacity.source, plan.capacity.note) == (4.256, *list(NEW.values())[1:])


def test_inline_comments_stay_in_their_column_and_quotes_are_replaced_whole():
    text = "capacity:\n  rps_per_replica: 5          # by hand\n  source: 'manual'   # who\n"
    new = spliced(text, "p.yaml", NEW)
    assert new.splitlines()[1] == "  rps_per_replica: 4.256      # by hand"
    assert new.splitlines()[2] == "  source: capcon bench   # who"
    assert new.splitlines()[3] == '  note: "measured 2026-12-02 against host:8000"'


def test_a_multi_line_note_is_replaced_and_what_follows_kept():
    text = (
        "capacity:\n  rps_per_replica: 5\n  source: manual\n  note: >\n    two\n    lines\n\n# after\nredundancy: 1\n"
    )
    new = spliced(text, "p.yaml", NEW)
    assert new.endswith('  note: "measured 2026-12-02 against host:8000"\n\n# after\nredundancy: 1\n')


def test_a_plan_without_capacity_gets_the_block_at_its_end():
    assert spliced("name: x\n", "p.yaml", NEW).startswith("name: x\n\ncapacity:\n  rps_per_replica: 4.256\n")
    assert "capacity:\n  rps_per_replica: 4.256" in spliced("name: x\ncapacity:\nother: 1\n", "p.yaml", NEW)


def test_a_flow_mapping_capacity_is_refused_with_its_line():
    with pytest.raises(PlanWriteError, match=r"p.yaml:2: capacity is not a block mapping"):
        spliced("name: x\ncapacity: {rps_per_replica: 5, source: manual}\n", "p.yaml", NEW)


def test_write_capacity_replaces_the_file_keeping_its_mode(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLANS[0].read_text())
    os.chmod(plan, 0o640)
    write_capacity(plan, 3.5, "capcon bench", "measured today")
    assert load_plan(plan).capacity.rps_per_replica == 3.5
    assert os.stat(plan).st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["plan.yaml"]  # no temporary left


def test_write_capacity_refuses_a_file_that_is_no_plan(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: [unclosed\n")
    with pytest.raises(UserError, match=r"plan\.yaml:"):
        write_capacity(plan, 3.5, "capcon bench", "x")
    assert plan.read_text() == "name: [unclosed\n"


@settings(max_examples=100, deadline=None)
@given(
    rps=st.floats(min_value=0.001, max_value=10_000, allow_nan=False),
    note=st.text(min_size=1, max_size=80).filter(lambda t: t.strip() and all(c.isprintable() for c in t)),
)
def test_any_capacity_and_note_read_back_as_written(rps, note):
    text = PLANS[0].read_text()
    try:
        new = spliced(text, "p.yaml", {"rps_per_replica": rps, "source": "capcon bench", "note": note})
        plan = parse_plan(new, "p.yaml")
    except UserError as error:  # only a fleet too large for one plan (tiny rps) may be refused
        assert "replicas" in str(error)
        return
    assert plan.capacity.note == note
    assert plan.capacity.rps_per_replica == pytest.approx(rps, rel=1e-3)
