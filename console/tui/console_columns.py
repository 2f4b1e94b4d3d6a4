"""The console's place for a table column (its title, priority and place), looked up by the column's key."""

from __future__ import annotations

from console.fleet.columns import CONSOLE_BY_KEY, InConsole


def in_console(key: str) -> InConsole:
    """Where the console shows column `key`: every column in CONSOLE_BY_KEY has a place there by construction."""
    place = CONSOLE_BY_KEY[key].console
    if place is None:
        raise KeyError(f"column {key!r} is not one the console shows")
    return place
