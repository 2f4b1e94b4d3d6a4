"""Checks of the options every command that opens the console takes (watch, demo, replay)."""

from __future__ import annotations

from console.errors import UserError
from console.live.defaults import MIN_CONSOLE_INTERVAL_SECONDS, MIN_ONCE_INTERVAL_SECONDS


def check_theme(name: str | None) -> None:
    """A theme Textual does not know is a bad argument, found before any fleet or server starts."""
    if name is None:
        return
    from textual.theme import BUILTIN_THEMES

    if name not in BUILTIN_THEMES:
        raise UserError(f"--theme {name!r}: unknown theme; expected one of {', '.join(sorted(BUILTIN_THEMES))}")


def check_console_interval(interval: float) -> None:
    if interval < MIN_CONSOLE_INTERVAL_SECONDS:
        raise UserError(
            f"--interval {interval:g}: the console refreshes at most once a second; "
            f"expected at least {MIN_CONSOLE_INTERVAL_SECONDS:g} ({MIN_ONCE_INTERVAL_SECONDS:g} is allowed only with --once)"
        )
