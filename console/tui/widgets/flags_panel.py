"""Active flags, worst first: severity, since when, why (the figures) and what to do."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from rich.text import Text

from console.fleet import format as fmt
from console.fleet.flags import Flag, Pending, Severity, Thresholds, asks_for_overflow, flag_title
from console.fleet.judge import fixed_words
from console.text import listed, printable
from console.tui.widgets.diff_text import DiffText
from console.tui.widgets.table_row import BADGES

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from console.tui.widgets.options import WidgetOptions

# A flag or a pending rule over many replicas names this many (worst first, then oldest) and counts the rest: at
# 10,000 replicas the panel's wrapped list of every name cost half a second a refresh, for lines nobody reads.
NAMED_SUBJECTS = 12
# A grouped flag's why gives this many replicas' own figures and counts the rest: the first replica's why alone read
# as if it held for all of them.
NAMED_WHYS = 3


def title(flag: Flag) -> str:
    return flag_title(flag.kind)


def _since(flag: Flag, now: float) -> tuple[str, str]:
    """(the clock time it began, how long ago)."""
    # Local time, as the replay header, the go-to box and `--from` read it: one clock on the bastion.
    return time.strftime("%H:%M:%S", time.localtime(flag.since)), fmt.age(now - flag.since)


class FlagsPanel(DiffText):
    WRAPS = True
    COMPONENT_CLASSES = {"flags-panel--critical", "flags-panel--warning", "flags-panel--info"}

    def __init__(self, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(**kwargs)
        self._shown: tuple | None = None

    def on_resize(self) -> None:
        # Pending lines are packed phrase by phrase to the width: a new width packs them anew.
        if self._shown is not None:
            shown, self._shown = self._shown, None
            self.show(*shown[0])

    def show(
        self,
        flags: tuple[Flag, ...],
        now: float,
        pending: tuple[Pending, ...] = (),
        planned: bool = True,
        over: int = 0,
        switches: tuple[str, ...] = (),
        switch_key: str | None = None,
    ) -> None:
        """`planned`: a plan is known (without one only fixed thresholds are judged); `over`: rows with a cell
        over its limit now, so an empty list of flags is not read as all clear."""
        lines = tuple(_grouped(flags, now))
        width = self.size.width
        waiting = tuple(pending_lines(pending, now, width))
        key = (lines, waiting, planned, over, width, switches, switch_key)
        if self._shown is not None and self._shown[1] == key:
            return
        self._shown = ((flags, now, pending, planned, over, switches, switch_key), key)
        # "Within its plan" only when no rule's condition holds at all, pending or shown, and no cell is over.
        clear = not flags and not pending and not over
        self.set_class(clear, "-clear")
        text = Text()
        if clear and planned:
            text.append("✓ no flags: the fleet is within its plan", style="bold")
        elif clear:
            text.append("✓ no flags · no plan: judged only on fixed thresholds: ", style="bold")
            text.append(fixed_words(Thresholds()))
        elif not flags and not pending:
            text.append(
                f"no flags yet: {over} row{'s' if over > 1 else ''} over a limit now (cells marked !)", style="bold"
            )
        # Headlines first, one line each, so a short terminal still shows every flag; then what is
        # pending (a condition that holds, inside its minimum duration); then the details.
        headlines = []
        for severity, name, subjects, since, _why, _todo in lines:
            style = self.get_component_rich_style(f"flags-panel--{severity}", partial=True) if self.is_mounted else ""
            headline = Text()
            headline.append(BADGES[severity], style=style)
            headline.append(f" {name}", style="bold")
            headline.append(f" · {printable(subjects)} · {since[1]}")
            headlines.append(headline)
        headlines += [Text(line) for line in waiting]  # already packed to the width
        # The overflow switches, newest first: who switched to what, and why, beside the flags they answer.
        headlines += [Text(printable(line)) for line in switches]
        if text.plain and headlines:
            text.append("\n")
        text.append(Text("\n").join(headlines))
        for _severity, name, _subjects, since, why, todo in lines:
            text.append(f"\n\n{name}", style="bold")
            text.append(f" since {since[0]}")
            text.append(f"\n  why: {printable(why)}")
            text.append(f"\n  do:  {printable(todo)}")
            if switch_key and asks_for_overflow(todo):
                text.append(f" Key {switch_key} switches it here.", style="bold")
        self.show_text(text)


def pending_lines(pending: tuple[Pending, ...], now: float, width: int = 0) -> Iterator[str]:
    """One entry per kind of condition that holds but is not a flag yet: how long it has held of how long it must.

    With a `width`, each entry is packed phrase by phrase into lines of that width ("(21 s of 30 s)" never
    splits); without one it is a single line.
    """
    kinds: dict[str, list[Pending]] = {}
    for item in pending:  # worst first, then oldest
        kinds.setdefault(item.kind, []).append(item)
    for group in kinds.values():
        oldest = min(group, key=lambda p: p.since)
        held = max(now - oldest.since, 0.0)
        subjects = [printable(p.subject) for p in group[:NAMED_SUBJECTS]]
        if len(group) > NAMED_SUBJECTS:
            subjects.append(f"and {len(group) - NAMED_SUBJECTS:,} more")
        phrases = [f"… pending: {title_of(oldest.kind)}", "·"]
        phrases += [s + "," for s in subjects[:-1]] + [subjects[-1]]
        phrases.append(f"({held:.0f} s of {oldest.needed_seconds:.0f} s)")
        yield "\n".join(pack(phrases, width)) if width > 0 else " ".join(phrases)


def pack(phrases: list[str], width: int, indent: int = 2) -> list[str]:
    """Phrases joined by spaces into lines of at most `width` cells; a phrase moves whole to the next line,
    which is indented. A phrase longer than a line is cut at the width (the only split left)."""
    lines: list[str] = []
    line = ""
    for phrase in phrases:
        candidate = f"{line} {phrase}" if line else phrase
        if len(candidate) <= width or not line:
            line = candidate
        else:
            lines.append(line)
            line = " " * indent + phrase
        while len(line) > width > indent:
            lines.append(line[:width])
            line = " " * indent + line[width:]
    if line:
        lines.append(line)
    return lines


def title_of(kind: str) -> str:
    return flag_title(kind)


def _grouped(flags: tuple[Flag, ...], now: float) -> Iterator[tuple[Severity, str, str, tuple[str, str], str, str]]:
    """One entry per kind of flag: four saturated replicas read as one line naming all four."""
    kinds: dict[str, list[Flag]] = {}
    for flag in flags:  # already worst first, then oldest
        kinds.setdefault(flag.kind, []).append(flag)
    for group in kinds.values():
        first = group[0]
        subjects = listed([f.subject for f in group], NAMED_SUBJECTS)
        oldest = min(group, key=lambda f: f.since)
        yield (first.severity, title(first), subjects, _since(oldest, now), grouped_why(group), grouped_todo(group))


def _own(flag: Flag, words: str) -> str:
    """Words about one replica, led by its name unless they already start with it."""
    return words if words.startswith(flag.subject) else f"{flag.subject}: {words}"


def grouped_why(group: list[Flag]) -> str:
    """Why a flag over several replicas holds: each named replica's own figures, then how many more."""
    if len(group) == 1:
        return group[0].why
    if all(f.why == group[0].why for f in group):  # the same figures on each: said once, as true of all
        return f"all {len(group):,}: {group[0].why}"
    whys = [_own(f, f.why) for f in group[:NAMED_WHYS]]
    if len(group) > NAMED_WHYS:
        whys.append(f"+{len(group) - NAMED_WHYS:,} more")
    return "; ".join(whys)


def grouped_todo(group: list[Flag]) -> str:
    """What to do: the rule's advice when it is the same for every replica, else each advice with its replicas."""
    todos: dict[str, list[Flag]] = {}
    for flag in group:
        todos.setdefault(flag.todo, []).append(flag)
    if len(todos) == 1:
        return group[0].todo
    said = []
    for todo, flags in todos.items():
        said.append(f"{listed([f.subject for f in flags], NAMED_WHYS)}: {todo}")
    return " ".join(said)
