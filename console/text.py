"""Text from the network or the command line, made safe to print: the one rule every output follows.

A replica's labels, an error from a server, an argument: anyone's text. Whatever is not printable
(control and format characters, separators other than the space) is shown as a visible escape
(`\\x1b`, `\\t`, `\\u2028`), so nothing can style the terminal, move its cursor or clear it.
"""

from __future__ import annotations


def printable(value: object) -> str:
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(value))
