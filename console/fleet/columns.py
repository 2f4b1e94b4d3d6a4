"""The columns of a fleet table, for both tables that show one: the console's and `watch --once`'s.

Each column says once what it shows (a value of the Figures, or of the replica's GPU counters
(console.fleet.gpus), its unit and so how it is written) and where: its title and priority in the console (or None: not there), its heading and drop rank
in the --once table (or None). Units stay SI in the values; `show` writes them as format.py does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from console.fleet import format as fmt
from console.fleet.gpus import ReplicaGpu
from console.metrics.figures import Figures

Unit = Literal["text", "state", "rps", "tps", "count", "share", "seconds", "per_second", "tokens", "age", "bytes"]
CellValue = str | float | None  # what a column reads from the figures: text (a name, a state), a number, or unknown


def _text(value: object) -> str:
    return fmt.UNKNOWN if value is None else str(value)


def _bytes(value: float | None) -> str:
    shown = fmt.compact(value)
    return shown if shown == fmt.UNKNOWN else f"{shown}B"


FORMATS: dict[str, Callable[[Any], str]] = {
    "text": _text,  # anyone's text (a replica name): each surface escapes it its own way before showing it
    "state": fmt.state,
    "rps": fmt.rate,
    "tps": fmt.compact,
    "count": fmt.count,
    "share": fmt.share,
    "seconds": fmt.seconds,
    "per_second": fmt.rate,
    "tokens": fmt.tokens,
    "age": fmt.age,
    "bytes": _bytes,
}


@dataclass(frozen=True)
class InConsole:
    title: str
    priority: int  # lower shows first; the narrowest layout keeps priority <= 1
    place: int  # left to right in the console's table


@dataclass(frozen=True)
class InOnce:
    heading: str
    drop: int | None = None  # given up in this rank (1 first) when the terminal is too narrow; None: always kept


@dataclass(frozen=True)
class Column:
    key: str  # the console's name for it in sort and filter expressions
    value: Callable[[Figures], CellValue]
    unit: Unit
    console: InConsole | None
    once: InOnce | None
    # A GPU column reads the replica's GPU counters instead of its figures (None: no GPU pages, unknown).
    from_gpu: Callable[[ReplicaGpu], CellValue] | None = None

    @property
    def is_text(self) -> bool:
        """Words, not numbers: compared as text in a filter, aligned left."""
        return self.unit in ("text", "state")

    @property
    def is_gpu(self) -> bool:
        return self.from_gpu is not None

    def read(self, figures: Figures, gpu: ReplicaGpu | None = None) -> CellValue:
        if self.from_gpu is not None:
            return self.from_gpu(gpu) if gpu is not None else None
        return self.value(figures)

    def show(self, figures: Figures, gpu: ReplicaGpu | None = None) -> str:
        return FORMATS[self.unit](self.read(figures, gpu))


def _no_figure(figures: Figures) -> None:
    return None  # a GPU column: its value comes from the GPU counters (Column.read)


def tpot_or_itl(f: Figures) -> float | None:
    # The console has no ITL column: a server without a TPOT histogram shows its inter-token p95 there.
    return f.tpot_p95_seconds if f.tpot_p95_seconds is not None else f.itl_p95_seconds


# In the --once table's order; the console orders its own by `place`. The --once table drops the
# least urgent figures during a peak first: state, load, queue, KV and latency stay.
COLUMNS: tuple[Column, ...] = (
    Column("name", lambda f: f.name, "text", InConsole("replica", 0, 0), InOnce("NAME")),
    Column("state", lambda f: f.state, "state", InConsole("state", 0, 1), InOnce("STATE")),
    Column("rps", lambda f: f.requests_per_second, "rps", InConsole("req/s", 0, 2), InOnce("REQ/S")),
    Column("prompt", lambda f: f.prompt_tokens_per_second, "tps", InConsole("in t/s", 2, 3), InOnce("IN TOK/S", 8)),
    Column("gen", lambda f: f.generation_tokens_per_second, "tps", InConsole("out t/s", 1, 4), InOnce("OUT TOK/S")),
    Column("run", lambda f: f.running, "count", InConsole("run", 1, 5), InOnce("RUN", 12)),
    Column("wait", lambda f: f.waiting, "count", InConsole("wait", 0, 6), InOnce("WAIT")),
    Column("kv", lambda f: f.kv_usage, "share", InConsole("KV", 0, 7), InOnce("KV")),
    Column(
        "preempt", lambda f: f.preemptions_per_second, "per_second", InConsole("pre/s", 1, 8), InOnce("PREEMPT/S", 11)
    ),
    Column("prefix", lambda f: f.prefix_hit_share, "share", InConsole("prefix", 3, 14), InOnce("HIT", 5)),
    Column("ttft50", lambda f: f.ttft_p50_seconds, "seconds", InConsole("TTFT50", 3, 9), InOnce("TTFT50", 7)),
    Column("ttft", lambda f: f.ttft_p95_seconds, "seconds", InConsole("TTFT95", 0, 10), InOnce("TTFT95")),
    Column("ttft99", lambda f: f.ttft_p99_seconds, "seconds", None, InOnce("TTFT99", 1)),
    Column("itl", lambda f: f.itl_p95_seconds, "seconds", None, InOnce("ITL95", 6)),
    Column("tpot", tpot_or_itl, "seconds", InConsole("TPOT95", 0, 11), None),
    # TPOT alone: --once prints ITL95 beside it.
    Column("tpot_only", lambda f: f.tpot_p95_seconds, "seconds", None, InOnce("TPOT95")),
    Column("e2e", lambda f: f.e2e_p95_seconds, "seconds", InConsole("E2E95", 2, 12), InOnce("E2E95", 10)),
    Column("queue", lambda f: f.queue_p95_seconds, "seconds", InConsole("queue95", 2, 13), InOnce("QUEUE95", 9)),
    Column("input", lambda f: f.mean_input_tokens, "tokens", None, InOnce("IN/REQ", 3)),
    Column("output", lambda f: f.mean_output_tokens, "tokens", None, InOnce("OUT/REQ", 4)),
    Column("age", lambda f: f.data_age_seconds, "age", None, InOnce("AGE", 2)),
    # The GPUs' own counters (dcgm-exporter), shown only for a fleet with GPU pages. On a narrow console they go
    # after the prefix and TTFT50 columns and before the rest; in --once, where the operator asked for them, last.
    Column("sm", _no_figure, "share", InConsole("SM", 2, 15), InOnce("SM", 15), lambda g: g.sm_active),
    Column("tensor", _no_figure, "share", InConsole("tensor", 2, 16), InOnce("TENSOR", 14), lambda g: g.tensor_active),
    Column("dram", _no_figure, "share", InConsole("DRAM", 2, 17), InOnce("DRAM", 16), lambda g: g.dram_active),
    Column("fb", _no_figure, "bytes", InConsole("FB", 2, 18), InOnce("FB", 13), lambda g: g.fb_used_bytes),
)

_BY_PLACE = {c.console.place: c for c in COLUMNS if c.console}
CONSOLE_COLUMNS: tuple[Column, ...] = tuple(_BY_PLACE[place] for place in sorted(_BY_PLACE))
CONSOLE_BY_KEY: dict[str, Column] = {c.key: c for c in CONSOLE_COLUMNS}


def name_form(name: str) -> str:
    """How a filter's column name is compared: any case, runs of spaces as one ("Out  T/S" is "out t/s")."""
    return " ".join(name.lower().split())


# What a filter may call a console column: its title as the table's header shows it, or its key (the older
# name, as `ttft` for TTFT95). Each name reads one column only.
CONSOLE_NAMES: dict[str, str] = {
    name_form(name): c.key for c in CONSOLE_COLUMNS if c.console for name in (c.console.title, c.key)
}
ONCE_COLUMNS: tuple[Column, ...] = tuple(c for c in COLUMNS if c.once)

assert len({c.key for c in COLUMNS}) == len(COLUMNS)
assert sorted(_BY_PLACE) == list(range(sum(1 for c in COLUMNS if c.console)))  # each place once, none skipped
assert len({c.once.heading for c in COLUMNS if c.once}) == len(ONCE_COLUMNS)
assert all(
    CONSOLE_NAMES[name_form(name)] == c.key for c in CONSOLE_COLUMNS if c.console for name in (c.console.title, c.key)
)  # no title is another column's key
