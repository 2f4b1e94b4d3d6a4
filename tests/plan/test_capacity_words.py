"""The report names where the plan's capacity comes from in one word, wherever it names it.

chat-8b-l40s was measured by `capcon bench` against the simulator (`source: simulated`): its report
once read `capacity ... (simulated)` above `ceil(9.00 rps / 1.50 rps per replica, measured)`, and the
hand-written 5 rps of assistant-70b read `measured` too.
"""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "plan, origin, source",
    [
        ("plans/chat-8b-l40s.yaml", "measured", "simulated"),
        ("plans/assistant-70b.yaml", "hand-written", "manual"),
        ("plans/internal-assistant-18rps.yaml", "hand-written", "manual"),
    ],
)
def test_the_capacity_line_and_the_replicas_line_say_the_same_origin(capcon, plan, origin, source):
    code, out, err = capcon("plan", plan)
    assert code == 0, err
    capacity = next(line for line in out.splitlines() if line.startswith("  capacity  "))
    assert capacity.endswith(f"per replica at the goodput target, {origin} (source: {source})")
    replicas = next(line for line in out.splitlines() if line.startswith("  replicas for the peak"))
    assert replicas.endswith(f"per replica, {origin})")
    others = {"measured", "hand-written", "estimated"} - {origin}
    assert not any(f"per replica, {word}" in out or f"{word} capacity" in out for word in others)


def test_an_estimated_capacity_says_estimated_on_both_lines(tmp_path, capcon):
    from tests.plan.test_estimate import without_capacity

    path = tmp_path / "assistant-70b.yaml"
    path.write_text(without_capacity("assistant-70b.yaml"))
    code, out, err = capcon("plan", path)
    assert code == 0, err
    assert "per replica at the goodput target: ESTIMATED, not measured:" in out
    assert "per replica, estimated)" in out and "per replica, measured" not in out
