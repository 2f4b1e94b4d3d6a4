"""One table of columns for the console and `watch --once`; replica states as words; one drift threshold."""

from __future__ import annotations

import json

from console.fleet.columns import COLUMNS, CONSOLE_BY_KEY, CONSOLE_COLUMNS, ONCE_COLUMNS
from console.fleet.flags import Thresholds
from console.fleet.view import advance
from console.fleet.view_json import FIGURE_FIELDS, figures_json
from console.metrics.figures import ANSWERING, FAILED, SERVING, Figures, ReplicaState
from console.store import json_out
from tests.fleet.builders import fleet, plan_now, replica


def test_every_column_is_shown_somewhere_and_ranks_are_whole():
    assert all(c.console or c.once for c in COLUMNS)
    assert [c.console.place for c in CONSOLE_COLUMNS] == list(range(len(CONSOLE_COLUMNS)))
    drops = sorted(c.once.drop for c in ONCE_COLUMNS if c.once.drop is not None)
    assert drops == list(range(1, len(drops) + 1))
    assert all(c.once.drop is None for c in ONCE_COLUMNS if c.key in ("name", "state", "rps", "wait", "kv", "ttft"))


def test_the_console_shows_itl_where_tpot_is_unknown_and_once_prints_each_apart():
    itl_only = replica("r1", itl_p95_seconds=0.021)
    assert CONSOLE_BY_KEY["tpot"].show(itl_only) == "21ms"
    once = {c.once.heading: c.show(itl_only) for c in ONCE_COLUMNS}
    assert once["TPOT95"] == "–" and once["ITL95"] == "21ms"


def test_a_state_is_its_word_in_json_and_in_the_groups():
    assert json_out.dumps({"state": ReplicaState.BAD_PAYLOAD}) == '{"state": "bad_payload"}'
    assert "restarted" in ANSWERING and "restarted" in SERVING and "stale" not in SERVING and "timeout" in FAILED
    assert [] not in ANSWERING  # a damaged recording's state is in no group, and no error
    figures = Figures(name="r1", url="u", state=ReplicaState.RESTARTED)
    stored = json.loads(json.dumps(json_out.stored(figures.to_json())))
    assert stored["state"] == "restarted" and Figures.from_json(stored) == figures
    assert list(figures_json(figures))[: len(FIGURE_FIELDS)] == list(FIGURE_FIELDS)


def test_the_token_comparison_warns_where_the_workload_drift_flag_rises():
    figures = fleet(replica("r1"), mean_input_tokens=2600.0)  # 30 % over the plan's 2000

    def status(thresholds):
        view = advance(None, "f", figures, plan_now(), 1000.0, thresholds)
        return next(c.status for c in view.comparisons if c.label == "mean input")

    assert status(None) == "ok"  # the default rises at 50 % off
    assert status(Thresholds(workload_raise=0.25)) == "warning"
