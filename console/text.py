"""Text from the network or the command line, made safe to print: the one rule every output follows.

A replica's labels, an error from a server, an argument: anyone's text. Whatever is not printable
(control and format characters, separators other than the space) is shown as a visible escape
(`\\x1b`, `\\t`, `\\u2028`), so nothing can style the terminal, move its cursor or clear it.
"""

from __future__ import annotations

from collections.abc import Sequence


def printable(value: object) -> str:
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(value))


# An error line a person reads: never a page echoed back. Anyone's text inside it (an answer, an error from the
# network) is held to PIECE_CHARACTERS where it is quoted; the whole line, paths and advice included, to this.
LINE_CHARACTERS = 1000
PIECE_CHARACTERS = 400


def bounded_line(value: object, limit: int = LINE_CHARACTERS) -> str:
    """`printable(value)` on one line of at most about `limit` characters: a longer text keeps its start and
    says how much was left out, so a 59 KB engine list echoed back in an error reads as one line."""
    text = printable(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 40]}… ({len(text) - (limit - 40):,} more characters)"


def listed(items: Sequence[str], most: int = 8) -> str:
    """Names in a line, a long list summarised with a count: '0, 1, 2, 3, 4, 5, 6, 7 and 5,992 more'."""
    if len(items) <= most:
        return ", ".join(items)
    return f"{', '.join(items[:most])} and {len(items) - most:,} more"
