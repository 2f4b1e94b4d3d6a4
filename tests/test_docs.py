"""docs/method.md and the text that points at it.

- No user-visible text cites numbered sections ("§7") of a document the project does
  not ship: not the flags' advice, not the plan report, nowhere in console/.
- Every section the code names, written (docs/method.md, 'Section'), is a heading of
  docs/method.md, and the document's own links resolve.
- The worked examples' figures in docs/method.md are what console.plan computes for the
  shipped plans: each table column headed "capcon plan" is checked row by row.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from console.fleet.flags import FlagInputs, FlagState, Thresholds, evaluate
from console.plan.report import render
from console.plan.schedule import schedule
from console.plan.schema import load_plan
from console.plan.sizing import size
from tests.fleet.builders import fleet, plan_now, replica

ROOT = Path(__file__).resolve().parents[1]
METHOD = ROOT / "docs" / "method.md"
CONSOLE = ROOT / "console"
PLANS = ROOT / "plans"

# A pointer: docs/method.md, 'Name' (or 'Name' to 'Name', 'Name' and 'Name'). A name may hold a
# possessive ("Little's law"): a quote followed by "s" and a word boundary does not end it.
_NAME = r"'((?:[^'\n]|'(?=s\b))+)'"
POINTER = re.compile(r"docs/method\.md,((?:\s*(?:to|and|or)?\s*" + _NAME.replace("(", "(?:", 1) + r")+)")
NAME = re.compile(_NAME)
SEE_CALL = re.compile(r"_see\(" + _NAME + r"\)")  # console/fleet/flags.py builds its pointers so

# Rules whose advice is an action the method explains: their `todo` must name a section.
ADVISING = {
    "saturation", "latency_drift", "slo_breach_ttft", "slo_breach_tpot", "slo_breach_e2e", "above_plan",
    "n_plus_1_at_risk", "workload_drift_input", "workload_drift_output", "schedule_lag", "scale_up_due",
}  # fmt: skip
EVERY_RULE = ADVISING | {"replica_down", "replica_stale", "replica_restarted", "source_error"}
DO_WIDTH = 80 - len("  do:  ")  # the flags panel's "do:" line on an 80-column terminal
DO_LINES = 3


def headings() -> set[str]:
    found, fenced = set(), False
    for line in METHOD.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6} (.+?)\s*$", line)):
            found.add(match.group(1))
    return found


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def pointed_at(text: str) -> list[str]:
    return [name for group in POINTER.findall(text) for name in NAME.findall(group)]


def raised_flags():
    """Flags with every rule raised, for each overflow mode and without a plan."""
    replicas = (
        replica("r1", waiting=3.0, kv_usage=0.95, preemptions_per_second=1.0),
        replica("r2", state="down"),
        replica("r3", state="timeout"),
        replica("r4", state="stale"),
        replica("r5", state="restarted"),
    )
    figures = fleet(
        *replicas,
        source_error="Prometheus: connection refused",
        requests_per_second=100.0,
        ttft_p95_seconds=3.0,
        tpot_p95_seconds=0.05,
        e2e_p95_seconds=90.0,
        mean_input_tokens=5000.0,
        mean_output_tokens=100.0,
        generation_tokens_per_second=1000.0,
    )
    plans = [
        plan_now(overflow_mode=m, replicas_scheduled_soon=9, e2e_p95_target_seconds=60.0)
        for m in ("bounded_queue", "hosted", "defer")
    ]
    flags = []
    for plan in [*plans, None]:
        inputs = FlagInputs(figures, plan=plan, tpot_p95_before=0.03, generation_before=1000.0)
        state = FlagState()
        for now in (0.0, 300.0):
            state = evaluate(state, inputs, now, Thresholds())
        flags += state.active
    return flags


FLAGS = raised_flags()


def test_every_rule_is_raised_by_the_builders():
    assert {f.kind for f in FLAGS} == EVERY_RULE


@pytest.mark.parametrize("flag", FLAGS, ids=lambda f: f.id)
def test_advice_is_in_words_short_and_points_at_a_section(flag):
    assert "§" not in flag.todo and "METHOD" not in flag.todo
    assert len(textwrap.wrap(flag.todo, DO_WIDTH)) <= DO_LINES, flag.todo
    if flag.kind in ADVISING:
        assert pointed_at(flag.todo), f"{flag.kind}: no (docs/method.md, 'Section') in {flag.todo!r}"
    for name in pointed_at(flag.todo):
        assert name in headings(), f"{flag.kind} points at {name!r}, not a heading of docs/method.md"


@pytest.mark.parametrize("plan", sorted(PLANS.glob("*.yaml")), ids=lambda p: p.name)
def test_the_plan_report_points_at_existing_sections(plan):
    loaded = load_plan(plan)
    text = render(size(loaded), schedule(loaded), str(plan))
    assert "§" not in text
    assert "docs/method.md" in text
    assert set(pointed_at(text)) <= headings()


def sources() -> list[Path]:
    return sorted(p for p in CONSOLE.rglob("*") if p.is_file() and p.suffix in {".py", ".tcss", ".md", ".txt"})


def test_no_numbered_section_citations_in_console():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sources()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "§" in line or "METHOD" in line
    ]
    assert found == []


def test_every_section_the_code_names_is_a_heading():
    named = {}
    for path in sources():
        text = path.read_text(encoding="utf-8")
        for name in pointed_at(text) + SEE_CALL.findall(text):
            if "{" not in name:  # an f-string's template (flags' `_see`): its uses are checked instead
                named.setdefault(name, str(path.relative_to(ROOT)))
    assert named, "no pointers found: has the pointer format changed?"
    missing = {name: where for name, where in named.items() if name not in headings()}
    assert missing == {}


def test_the_documents_own_links_resolve():
    text = METHOD.read_text(encoding="utf-8")
    anchors = {slug(h) for h in headings()}
    links = re.findall(r"\]\(#([^)]+)\)", text)
    assert links and set(links) <= anchors
    assert "§" not in text and "METHOD" not in text and "/work/" not in text


# --- the worked examples' figures -------------------------------------------------------------

# Row label -> (unit the cell must show, the figure in that unit from (sizing, schedule, expected)).
FIGURES = {
    "KV per token": ("B", lambda s, w, e: s.kv_bytes_per_token),
    "KV budget": ("GB", lambda s, w, e: s.kv_budget_bytes / 1e9),
    "time in system": (" s", lambda s, w, e: s.expected_time_in_system_seconds if e else s.time_in_system_seconds),
    "concurrency": ("", lambda s, w, e: s.expected_concurrency if e else s.concurrency),
    "KV needed": ("GB", lambda s, w, e: (s.expected_kv_needed_bytes if e else s.kv_needed_bytes) / 1e9),
    "decode step": ("ms", lambda s, w, e: 1e3 * (s.expected_decode_step_seconds if e else s.decode_step_seconds)),
    "per stream": ("tok/s", lambda s, w, e: s.expected_stream_tokens_per_second if e else s.stream_tokens_per_second),
    "aggregate decode": (
        "tok/s",
        lambda s, w, e: s.expected_aggregate_decode_tokens_per_second if e else s.aggregate_decode_tokens_per_second,
    ),
    "prefill load": ("PFLOP/s", lambda s, w, e: s.prefill_flops_per_second / 1e15),
    "single-stream ceiling": ("tok/s", lambda s, w, e: s.single_stream_ceiling_tokens_per_second),
    "replicas": ("", lambda s, w, e: s.replicas_with_redundancy),
    "fleet cost": ("$", lambda s, w, e: s.fleet_cost_per_hour),
    "per M tokens, peak": ("$", lambda s, w, e: s.cost_per_million_tokens_peak),
    "per M tokens, mean": ("$", lambda s, w, e: s.cost_per_million_tokens_mean),
    "replicas for the peak": ("", lambda s, w, e: s.replicas_for_peak),
    "replicas with N+1": ("", lambda s, w, e: s.replicas_with_redundancy),
    "replicas in quiet hours": ("", lambda s, w, e: min(map(min, w.replicas_by_hour))),
    "GPU-hours a month, 24/7": ("", lambda s, w, e: w.gpu_hours_month_always_on),
    "GPU-hours a month, schedule": ("", lambda s, w, e: w.gpu_hours_month_schedule),
    "saving": ("%", lambda s, w, e: 100 * w.saving_share),
}
NUMBER = re.compile(r"-?\d[\d,]*(?:\.(\d+))?")


def example_sections() -> dict[str, str]:
    """'Worked example ...' heading -> its text, up to the next heading of the same level."""
    parts = re.split(r"^## ", METHOD.read_text(encoding="utf-8"), flags=re.M)
    return {p.splitlines()[0]: p for p in parts if p.startswith("Worked example")}


def figure_rows(section: str):
    """(label, column header, cell) for every capcon plan column of every table in the section."""
    header = None
    for line in section.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not set(line) <= set("|-: "):
            for title, cell in zip(header, cells):
                if "capcon plan" in title and cell not in ("-", ""):
                    yield cells[0], title, cell


def example_cases():
    cases = []
    for heading, text in example_sections().items():
        plan = re.search(r"`(plans/[\w.-]+\.yaml)`", text).group(1)
        cases += [(heading.split(":")[0], plan, *row) for row in figure_rows(text)]
    return cases


def test_both_worked_examples_carry_checked_figures():
    by_example = {}
    for example, plan, *_ in example_cases():
        by_example.setdefault((example, plan), 0)
        by_example[(example, plan)] += 1
    assert set(by_example) == {
        ("Worked example A", "plans/assistant-70b.yaml"),
        ("Worked example B", "plans/internal-assistant-18rps.yaml"),
    }
    assert all(count >= 5 for count in by_example.values()), by_example


@pytest.mark.parametrize("example,plan,label,column,cell", example_cases(), ids=lambda v: str(v))
def test_worked_example_figure_matches_the_planner(example, plan, label, column, cell):
    assert label in FIGURES, f"{example}: no check for the row {label!r}; add it to FIGURES"
    unit, figure = FIGURES[label]
    loaded = load_plan(ROOT / plan)
    value = figure(size(loaded), schedule(loaded), "expected" in column)
    match = NUMBER.search(cell)
    assert match and unit in cell, f"{label}: {cell!r} should be a number in {unit!r}"
    written = float(match.group(0).replace(",", ""))
    decimals = len(match.group(1) or "")
    assert abs(value - written) <= 0.5 * 10**-decimals + 1e-9, (
        f"{example}, {label} ({column}): doc {cell}, computed {value:.4g}"
    )
