"""The top line: which fleet and plan, where the figures come from, how old they are, and the console's mode."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.text import Text

from console.fleet import format as fmt
from console.fleet.format import middle_cut
from console.fleet.overflow import mode_words
from console.text import printable
from console.tui.widgets.diff_text import DiffText

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from console.tui.widgets.options import WidgetOptions


@dataclass(frozen=True)
class HeaderInfo:
    fleet: str
    plan: str | None
    source: str | None  # "scrape" or "prometheus"; None before the first poll
    window_seconds: float | None
    age_seconds: float | None
    interval_seconds: float
    paused: bool
    read_only: bool
    # The overflow mode in words (the gateways' policy: "hosted by alice 14:02 until 14:32"), or the plan's mode
    # (bounded_queue, hosted, defer); None without either.
    overflow: str | None = None
    overflow_mode: str | None = None  # the mode alone (bounded_queue, ...), for a narrow header; None: unknown
    plan_at: str | None = None  # the plan's day and hour now, in its time zone: "Tue 09:00"
    demo_faults: int = 0  # faults the demo's fault menu has on
    error: str = ""
    stale: str = ""  # "stale 7s: poll failed: ..." when no fresh poll came for two intervals: replaces `● live`
    recording: str | None = None  # "rec" while recording, "rec locked: ..." when the file refuses writes; None: off
    replay: str | None = None  # in replay: the recorded moment shown, speed and play state


OVERFLOW_WORDS = {"bounded_queue": "bounded queue", "hosted": "hosted", "defer": "defer"}


# The mode's shortest form, for a narrow header: the mode stays named, in fewer cells.
OVERFLOW_SHORT = {"bounded_queue": "bq"}


@dataclass(frozen=True)
class Part:
    """One part of the header: its forms, longest first, and when each gives way as the width runs out.

    `gives_way[i]` is the rank at which `forms[i]` gives way to the next form, or (for the last form) to nothing:
    lower ranks give way first. A part with one rank fewer than forms is never dropped, only shortened.
    """

    forms: tuple[str, ...]
    gives_way: tuple[int, ...] = ()
    lead: str = " · "  # what stands between it and the part before, only while both are shown
    style: str = ""


def fit_parts(parts: list[Part], width: int) -> list[tuple[Part, str]]:
    """Each part in the form that fits `width` cells: the lowest-ranked step (shorten or drop) is taken first,
    one at a time, until the line fits or nothing more may give way (then the end is cut)."""
    chosen = [0] * len(parts)

    def cells() -> int:
        return sum(cell_len(p.lead + p.forms[i]) for p, i in zip(parts, chosen) if i < len(p.forms))

    while cells() > width:
        steps = [(p.gives_way[i], n) for n, (p, i) in enumerate(zip(parts, chosen)) if i < len(p.gives_way)]
        if not steps:
            break
        chosen[min(steps)[1]] += 1
    return [(p, p.forms[i]) for p, i in zip(parts, chosen) if i < len(p.forms)]


def part(first: str, *steps: tuple[int, str | None], lead: str = " · ", style: str = "") -> Part:
    """A part from its longest form and its steps as the width runs out: (rank, a shorter form), or (rank, None)
    to drop it. A step to a form no shorter than the one before is no step and is left out."""
    forms, ranks = [first], []
    for rank, form in steps:
        if form is None:
            ranks.append(rank)
            break
        if cell_len(form) < cell_len(forms[-1]):
            forms.append(form)
            ranks.append(rank)
    return Part(tuple(forms), tuple(ranks), lead, style)


# The header's rule, as ranks: the lowest step is taken first, one at a time, until the line fits. What the
# console says elsewhere goes first (the source; the interval, said when +/- change it; the plan's name, on the
# plan screen); then the overflow mode is abbreviated (`bounded queue` to `bq`), before anything an operator
# reads here alone is dropped; it is never dropped itself.
DROP_SOURCE = 10
DROP_INTERVAL = 20
DROP_PLAN_NAME = 30
OVERFLOW_SHORT_MODE = 40  # "bounded queue by alice 14:02" to "bq by alice 14:02"
DROP_WINDOW = 50
DROP_REC = 55
OVERFLOW_MODE_ONLY = 60  # "bq by alice 14:02 until 14:32" to "bq"
DROP_PLAN = 70
CUT_FLEET = 80
CUT_FLEET_MORE = 90


def header_parts(info: HeaderInfo) -> list[Part]:
    """The header's parts, left to right, most urgent first, each with its steps as the width runs out (the
    ranks above). The state (live, paused, replay), read-only, faults, the data age, a history that refuses
    writes and an error always stay; the fleet's name is cut in the middle last."""
    fleet = printable(info.fleet)
    parts = [
        part(
            f" {fleet} ",
            (CUT_FLEET, f" {middle_cut(fleet, 24)} "),
            (CUT_FLEET_MORE, f" {middle_cut(fleet, 16)} "),
            lead="",
            style="bold",
        )
    ]
    if info.replay:
        # "REPLAY 2026-11-30 14:03:22 ×4 ▶": the recorded moment shown, the speed, playing or paused.
        parts.append(part(f"REPLAY {printable(info.replay)}", lead="", style="bold reverse"))
    elif info.stale:
        # Figures that stopped coming must never read as live: the age and the reason, in the place of `● live`.
        parts.append(part(f"✖ {printable(info.stale)}", lead="", style="bold reverse"))
    else:
        parts.append(
            part("‖ PAUSED" if info.paused else "● live", lead="", style="bold reverse" if info.paused else "")
        )
    if info.recording == "rec":
        # Plain text: a record glyph (U+23FA) is missing from many terminal fonts, or drawn two cells wide.
        parts.append(part("rec"))  # whether what is seen is kept: never dropped, three cells
    if info.read_only:
        parts.append(part("READ-ONLY", lead=" ", style="bold"))
    if info.demo_faults:
        parts.append(part(f"⚡ {info.demo_faults} FAULT{'S' if info.demo_faults > 1 else ''}", lead=" ", style="bold"))
    # The data age before the recording's troubles: stale figures matter more than a stalled history.
    if not info.stale:  # a stale header says the age already
        parts.append(part(f"age {fmt.age(info.age_seconds)}"))
    if info.recording and info.recording.startswith(("rec off", "rec partial")):
        # Another capcon already records this fleet into the file: nothing is lost, so no alarm.
        parts.append(part(printable(info.recording), (DROP_REC, None)))
    elif info.recording and info.recording != "rec":
        # A file that refuses writes is news: the watching goes on, the history does not.
        parts.append(part(f"✖ {printable(info.recording)}", style="bold"))
    if not info.replay:  # in a replay the recorded pace is the speed's ×1
        parts.append(part(f"every {info.interval_seconds:g}s", (DROP_INTERVAL, None)))
    if info.source or info.plan:
        # A fleet named after its plan (one plan watched) need not repeat the name: 80 columns go fast.
        named = "" if info.plan == info.fleet else f" {printable(info.plan) if info.plan else 'none'}"
        at = f" at {info.plan_at}" if info.plan_at else ""
        parts.append(part(f"plan{named}{at}", (DROP_PLAN_NAME, f"plan{at}" if at else None), (DROP_PLAN, None)))
    if info.overflow:
        words = printable(OVERFLOW_WORDS.get(info.overflow, info.overflow))
        mode = info.overflow_mode
        if mode is None:  # no mode known apart from the words ("? (no gateway answering)"): they stay whole
            parts.append(part(f"overflow {words}"))
        else:
            said, short = mode_words(mode), OVERFLOW_SHORT.get(mode, mode_words(mode))
            # Who set it and until when follow the mode's words: abbreviated, the mode keeps them.
            rest = words[len(said) :] if words.startswith(said) else ""
            parts.append(
                part(
                    f"overflow {words}",
                    (OVERFLOW_SHORT_MODE, f"overflow {short}{rest}"),
                    (OVERFLOW_MODE_ONLY, f"overflow {short}"),
                )
            )
    if info.window_seconds:
        # The window the rates and percentiles are computed over, not how often figures are read.
        parts.append(part(f"window {fmt.window(info.window_seconds)}", (DROP_WINDOW, None)))
    if info.source:
        parts.append(part(printable(info.source), (DROP_SOURCE, None)))
    if info.error and info.error not in info.stale:  # said once: a stale header names its reason
        parts.append(part(f"✖ {printable(info.error)}", style="bold"))
    return parts


class ConsoleHeader(DiffText):
    def __init__(self, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(**kwargs)
        self._shown: tuple[HeaderInfo, int] | None = None

    def on_resize(self) -> None:
        # The parts are fitted to the width: a new width fits them anew.
        if self._shown is not None:
            info, self._shown = self._shown[0], None
            self.show(info)

    def show(self, info: HeaderInfo) -> None:
        width = self.size.width
        if (info, width) == self._shown:
            return
        self._shown = (info, width)
        self.set_class(info.paused, "-paused")
        self.set_class(bool(info.error), "-error")
        text = Text(no_wrap=True, overflow="ellipsis")
        # Before the first layout the width is unknown (0): every part, as at a wide terminal.
        for shown, form in fit_parts(header_parts(info), width or 10_000):
            text.append(shown.lead)
            text.append(form, style=shown.style)
        self.show_text(text)
