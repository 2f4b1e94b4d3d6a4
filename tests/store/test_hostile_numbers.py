"""Impossible numbers at the storage boundary: NaN, infinities, huge and negative figures never reach the
file as figures, and a file that holds them (written by an older capcon) never crashes a reader.

Hypothesis draws the figures of real polls (counters, gauges, per-engine maps, histogram buckets, sums
and counts, a figure source's figures, a flag's figures) and label texts with lone surrogates; each
example writes a real history file, reads it back, and runs `history --json`, `history`, `export` of
every kind in both formats and a replay over it. Strict JSON is parsed with a `parse_constant` that
fails the test on NaN or Infinity.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sqlite3
import tempfile
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.cli import main
from console.fleet.flags import Flag
from console.metrics.figures import Figures, FleetFigures
from console.metrics.vllm import Histogram, ReplicaSample
from console.replay.controller import first_view
from console.store import codec, json_out
from console.store.database import Store
from console.store.records import FlagChange, PollRecord
from console.store.schema import COUNTER_COLUMNS, HISTOGRAM_COLUMNS
from console.targets import TargetResult

T0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC
SPAN = ["--from", str(T0 - 3600), "--to", str(T0 + 3600)]
BOUNDS = (0.1, 0.25, 0.5, 1.0, 2.5, math.inf)

HOSTILE = [math.nan, math.inf, -math.inf, 1e308, -1e308, 1.7976931348623157e308, 5e-324, -0.0, -1.0, 1e-300]
FIGURE = st.one_of(st.sampled_from(HOSTILE), st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 1e6))
MAYBE = st.none() | FIGURE
LABEL = st.one_of(
    st.sampled_from(["0", "1", "stop", "model\udcffname", "\udc80", "\ud800", "é"]),
    st.text(st.characters(exclude_categories=()), max_size=6),  # surrogates too
)


def strict_loads(text: str):
    return json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in strict JSON: {text[:200]}"))


@st.composite
def histograms(draw):
    bounds = draw(st.sampled_from([BOUNDS, (*BOUNDS[:-1], math.nan, math.inf), BOUNDS[:3] + (math.inf,)]))
    counts = draw(st.lists(FIGURE, min_size=len(bounds), max_size=len(bounds)) | st.just(sorted(range(len(bounds)))))
    return Histogram(tuple(bounds), tuple(float(c) for c in counts), draw(MAYBE), draw(MAYBE))


@st.composite
def samples(draw, at: float):
    counters = {name: draw(FIGURE) for name in draw(st.sets(st.sampled_from(COUNTER_COLUMNS)))}
    hists = {name: draw(histograms()) for name in draw(st.sets(st.sampled_from(HISTOGRAM_COLUMNS), max_size=3))}
    return ReplicaSample(
        at=at,
        counters=counters,
        requests_by_reason=draw(st.dictionaries(LABEL, FIGURE, max_size=3)),
        running=draw(MAYBE),
        waiting=draw(MAYBE),
        kv_usage_by_engine=draw(st.dictionaries(LABEL, FIGURE, max_size=3)),
        kv_capacity_tokens=draw(MAYBE),
        kv_capacity_tokens_by_engine=draw(st.dictionaries(LABEL, FIGURE, max_size=2)),
        histograms=hists,
        start_time=draw(MAYBE),
    )


@st.composite
def figures(draw, name: str):
    numeric = [f.name for f in fields(Figures) if f.type in ("float | None",)]
    chosen = draw(st.sets(st.sampled_from(numeric), max_size=6))
    return Figures(
        name=name,
        url=f"http://{name}/metrics",
        state="up",
        kv_usage_by_engine=draw(st.dictionaries(LABEL, FIGURE, max_size=2)),
        **{f: draw(FIGURE) for f in chosen},
    )


@st.composite
def polls(draw):
    """A few polls of a scraped fleet (hostile samples, some replicas down) and of a figure source."""
    records = []
    replicas = draw(st.sampled_from([["r0"], ["r0", "r1\udcff"]]))
    for i in range(draw(st.integers(2, 5))):
        at = T0 + 15.0 * i
        results = []
        for name in replicas:
            sample = draw(samples(at)) if draw(st.booleans()) or i == 0 else None
            results.append(
                TargetResult(
                    name,
                    f"http://{name}.test/metrics",
                    "up" if sample else "down",
                    sample,
                    "" if sample else draw(LABEL),
                    at,
                )
            )
        changes = ()
        if draw(st.booleans()):
            flag = Flag(f"kv:{replicas[0]}", "kv", replicas[0], "warning", at, draw(LABEL), "todo")
            changes = (FlagChange("raised", flag, draw(figures(replicas[0]))),)
        records.append(PollRecord("chat", at, at, "scrape", 60.0, 15.0, tuple(results), flag_changes=changes))
        prom = FleetFigures(60.0, "prometheus", (draw(figures("p0")),), draw(figures("fleet")), at)
        records.append(PollRecord("prom", at, at, "prometheus", 60.0, 15.0, None, figures=prom))
    return records


def floats_in(value, path="") -> list[tuple[str, float]]:
    """Every float reachable in a read-back value (dataclasses, maps, sequences), with where it is."""
    found = []
    if isinstance(value, float):
        found.append((path, value))
    elif is_dataclass(value):
        for f in fields(value):
            found += floats_in(getattr(value, f.name), f"{path}.{f.name}")
    elif isinstance(value, dict):
        for key, item in value.items():
            found += floats_in(item, f"{path}[{key!r}]")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found += floats_in(item, f"{path}[{i}]")
    return found


def run(capsys, *argv) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Traceback" not in err
    out.encode("utf-8")  # valid UTF-8: a lone surrogate would fail here
    return out


def read_everything(capsys, path: Path) -> None:
    """Every reader, over every kind of row: no exception, strict JSON, no NaN or inf in csv."""
    db = ["--db", str(path)]
    document = strict_loads(run(capsys, "history", *db, *SPAN, "--json"))
    assert {f["fleet"] for f in document["fleets"]} == {"chat", "prom"}
    run(capsys, "history", *db, *SPAN)
    run(capsys, "history", *db, *SPAN, "--by", "day", "--json")
    for what in ("samples", "flags", "events", "figures"):
        for line in run(capsys, "export", *db, *SPAN, "--format", "jsonl", "--what", what).splitlines():
            strict_loads(line)
        for row in csv.DictReader(io.StringIO(run(capsys, "export", *db, *SPAN, "--format", "csv", "--what", what))):
            for column, cell in row.items():
                if cell and column not in (
                    "error",
                    "why",
                    "todo",
                    "subject",
                    "fleet",
                    "replica",
                    "url",
                    "detail",
                    "figures",
                    "kind",
                ):
                    try:
                        number = float(cell)
                    except ValueError:
                        continue
                    assert math.isfinite(number), (column, cell)
    controller, frame = first_view(path, ["chat"])
    try:
        while not frame.ended:
            frame = controller.step(1)
    finally:
        controller.replay.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(records=polls())
def test_hostile_figures_are_stored_as_unknown_and_every_reader_gives_strict_json(records, capsys):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "history.sqlite"
        store = Store.open(path)
        ids = [store.write_poll(record) for record in records]  # every poll is stored: none refused for its figures
        store.close()
        reader = Store.open(path, read_only=True)
        try:
            for poll_id in ids:
                back = reader.poll(poll_id)
                bad = [
                    (where, value)
                    for where, value in floats_in((back.results, back.figures))
                    if not math.isfinite(value)
                    and not where.endswith(".bounds[5]")
                    and not where.endswith(".bounds[3]")
                ]  # +Inf: the last bucket's bound
                assert bad == [], bad
            for event in reader.flag_events():
                assert not [v for _, v in floats_in(event.figures) if not math.isfinite(v)]
            # Each stored JSON text parsed strictly: a label may be spelt "NaN" (an engine named so), a value may not.
            texts = reader.connection.execute(
                "SELECT figures FROM polls UNION ALL SELECT figures FROM flag_events"
                " UNION ALL SELECT kv_usage_by_engine FROM samples UNION ALL SELECT requests_by_reason FROM samples"
            ).fetchall()
            for (text,) in texts:
                if text is not None:
                    strict_loads(text)
            infinite = reader.connection.execute(
                f"SELECT count(*) FROM samples WHERE {' OR '.join(f'abs({c}) > 1.8e308' for c in (*COUNTER_COLUMNS, 'running', 'waiting', 'kv_usage', 'kv_capacity_tokens', 'start_time'))}"
            ).fetchone()[0]
            assert infinite == 0
        finally:
            reader.close()
        read_everything(capsys, path)


LEGACY_VALUES = st.sampled_from([math.inf, -math.inf, math.nan, 1e308, -5.0])


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    value=LEGACY_VALUES,
    column=st.sampled_from(
        [*COUNTER_COLUMNS, "running", "waiting", "kv_usage", "kv_capacity_tokens", "start_time", "sampled_at"]
    ),
    token=st.sampled_from(["NaN", "Infinity", "-Infinity"]),
    histogram_sum=LEGACY_VALUES,
)
def test_a_file_an_older_capcon_wrote_with_nan_and_infinity_reads_without_a_crash(
    value, column, token, histogram_sum, capsys
):
    """What a capcon before the storage guard could leave: Infinity in REAL columns, NaN and Infinity in its
    JSON, non-finite sums and buckets in histogram blobs. Written here with raw SQL, as it would be found."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "history.sqlite"
        store = Store.open(path)
        sample = ReplicaSample(
            at=T0,
            counters={"requests": 5.0},
            running=1.0,
            waiting=0.0,
            kv_usage_by_engine={"0": 0.5},
            histograms={"ttft": Histogram(BOUNDS, (1, 2, 3, 4, 5, 5), 1.0, 5.0)},
        )
        for i in range(4):
            at = T0 + 15.0 * i
            results = (TargetResult("r0", "http://r0/metrics", "up", sample, "", at),)
            figures = Figures("fleet", "", "up", requests_per_second=1.0)
            flag = Flag("kv:fleet", "kv", "fleet", "warning", at, "why", "todo")
            store.write_poll(
                PollRecord(
                    "chat", at, at, "scrape", 60.0, 15.0, results, flag_changes=(FlagChange("raised", flag, figures),)
                )
            )
            prom = FleetFigures(60.0, "prometheus", (figures,), figures, at)
            store.write_poll(PollRecord("prom", at, at, "prometheus", 60.0, 15.0, None, figures=prom))
        layout = store._layout_id(BOUNDS)
        old_blob = codec.encode(
            Histogram(BOUNDS, (1.0, math.inf, math.inf, math.nan, 9.0, 9.0), histogram_sum, math.inf), layout
        )
        with store._transaction() as connection:
            connection.execute(f"UPDATE samples SET {column} = ?", (value,))
            connection.execute(
                "UPDATE samples SET ttft = ?, kv_usage_by_engine = ?, requests_by_reason = ?",
                (old_blob, f'{{"0":{token},"1":0.25}}', f'{{"stop":{token}}}'),
            )
            connection.execute(
                f"UPDATE polls SET figures = replace(figures, '\"requests_per_second\":1.0', '\"requests_per_second\":{token}')"
                " WHERE figures IS NOT NULL"
            )
            connection.execute(
                f"UPDATE flag_events SET figures = replace(figures, '\"requests_per_second\":1.0', '\"requests_per_second\":{token}')"
            )
        store.close()
        with sqlite3.connect(path) as check:
            assert check.execute("SELECT count(*) FROM polls WHERE figures LIKE ?", (f"%{token}%",)).fetchone()[0] == 4
        read_everything(capsys, path)


def test_the_strict_json_helper_never_writes_nan_or_infinity():
    document = {"a": math.nan, "b": [math.inf, {"c": -math.inf, "d": 1.5}], "e\udcff": "x\udc80", "t": (1, math.nan)}
    text = json_out.dumps(document)
    assert strict_loads(text) == {"a": None, "b": [None, {"c": None, "d": 1.5}], "e\\xff": "x\\x80", "t": [1, None]}
    assert json_out.loads('{"a": NaN, "b": [Infinity, 2], "c": {"d": -Infinity}}') == {"b": [None, 2], "c": {}}
