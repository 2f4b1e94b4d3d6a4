"""The top line: which fleet and plan, where the figures come from, how old they are, and the console's mode."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from console.fleet import format as fmt
from console.text import printable
from console.tui.widgets.diff_text import DiffText


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
    overflow: str | None = None  # the plan's overflow mode (bounded_queue, hosted, defer); None without a plan
    plan_at: str | None = None  # the plan's day and hour now, in its time zone: "Tue 09:00"
    demo_faults: int = 0  # faults the demo's fault menu has on
    error: str = ""
    recording: str | None = None  # "rec" while recording, "rec locked: ..." when the file refuses writes; None: off
    replay: str | None = None  # in replay: the recorded moment shown, speed and play state


OVERFLOW_WORDS = {"bounded_queue": "bounded queue", "hosted": "hosted", "defer": "defer"}


class ConsoleHeader(DiffText):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._shown: HeaderInfo | None = None

    def show(self, info: HeaderInfo) -> None:
        if info == self._shown:
            return
        self._shown = info
        self.set_class(info.paused, "-paused")
        self.set_class(bool(info.error), "-error")
        text = Text(no_wrap=True, overflow="ellipsis")
        # Most urgent first: at 80 columns the tail is cut.
        text.append(f" {printable(info.fleet)} ", style="bold")
        if info.replay:
            # "REPLAY 2026-11-30 14:03:22 ×4 ▶": the recorded moment shown, the speed, playing or paused.
            text.append(f"REPLAY {printable(info.replay)}", style="bold reverse")
        else:
            text.append("‖ PAUSED" if info.paused else "● live", style="bold reverse" if info.paused else "")
        if info.recording == "rec":
            # Plain text: a record glyph (U+23FA) is missing from many terminal fonts, or drawn two cells wide.
            text.append(" · rec")
        if info.read_only:
            text.append(" READ-ONLY", style="bold")
        if info.demo_faults:
            text.append(f" ⚡ {info.demo_faults} FAULT{'S' if info.demo_faults > 1 else ''}", style="bold")
        # The data age before the recording's troubles: stale figures matter more than a stalled history.
        text.append(f" · age {fmt.age(info.age_seconds)}")
        if info.recording and info.recording.startswith(("rec off", "rec partial")):
            # Another capcon already records this fleet into the file: nothing is lost, so no alarm.
            text.append(f" · {printable(info.recording)}")
        elif info.recording and info.recording != "rec":
            # A file that refuses writes is news: the watching goes on, the history does not.
            text.append(f" · ✖ {printable(info.recording)}", style="bold")
        if not info.replay:
            text.append(f" · every {info.interval_seconds:g}s")  # in a replay the recorded pace is the speed's ×1
        if info.source or info.plan:
            # A fleet named after its plan (one plan watched) need not repeat the name: 80 columns go fast.
            named = "" if info.plan == info.fleet else f" {printable(info.plan) if info.plan else 'none'}"
            text.append(f" · plan{named}")
            if info.plan_at:
                text.append(f" at {info.plan_at}")
        if info.overflow:
            text.append(f" · overflow {printable(OVERFLOW_WORDS.get(info.overflow, info.overflow))}")
        if info.window_seconds:
            # The window the rates and percentiles are computed over, not how often figures are read.
            text.append(f" · window {fmt.window(info.window_seconds)}")
        if info.source:
            text.append(f" · {printable(info.source)}")
        if info.error:
            text.append(f" · ✖ {printable(info.error)}", style="bold")
        self.show_text(text)
