"""`watch --once` on a terminal: the table fits its width by leaving out the least urgent columns."""

import pytest

from console.commands.watch_output import render_table
from console.fleet.columns import ONCE_COLUMNS as COLUMNS
from console.metrics.figures import Figures, FleetFigures


def _figures(name: str) -> Figures:
    return Figures(
        name=name,
        url=f"http://{name}/metrics",
        state="up",
        requests_per_second=4.21,
        prompt_tokens_per_second=8123.0,
        generation_tokens_per_second=2950.0,
        running=128,
        waiting=3,
        kv_usage=0.63,
        preemptions_per_second=0.0,
        prefix_hit_share=0.12,
        ttft_p50_seconds=0.081,
        ttft_p95_seconds=0.412,
        ttft_p99_seconds=0.9,
        itl_p95_seconds=0.021,
        tpot_p95_seconds=0.034,
        e2e_p95_seconds=11.5,
        queue_p95_seconds=0.285,
        mean_input_tokens=1190.0,
        mean_output_tokens=347.0,
        data_age_seconds=0.4,
    )


FLEET = FleetFigures(
    window_seconds=2.0,
    source="scrape",
    at=0.0,
    replicas=(_figures("10.0.0.11:8000"), _figures("10.0.0.12:8000")),
    fleet=_figures("fleet"),
)


def _table_lines(text: str) -> list[str]:
    return text.splitlines()[1:5]  # header, two replicas, rule (the title and notes are prose)


def test_without_a_width_every_column_is_printed():
    header = _table_lines(render_table(FLEET))[0].split()
    assert header[:2] == ["NAME", "STATE"] and "TTFT99" in header and "AGE" in header
    assert len(_table_lines(render_table(FLEET))[0]) > 120


@pytest.mark.parametrize("width", [80, 100, 120])
def test_the_table_fits_the_terminal_and_keeps_what_matters_in_a_peak(width):
    text = render_table(FLEET, width)
    lines = _table_lines(text)
    assert all(len(line) <= width for line in lines), text
    header = lines[0].split()
    for kept in ("NAME", "STATE", "REQ/S", "WAIT", "KV", "TTFT95", "TPOT95"):
        assert kept in header
    assert "TTFT99" not in header  # the first to go
    assert len(header) < len(COLUMNS)


def test_wider_terminals_keep_more_columns():
    counts = [len(_table_lines(render_table(FLEET, w))[0].split()) for w in (80, 120, 200)]
    assert counts == sorted(counts) and counts[0] < counts[-1]
