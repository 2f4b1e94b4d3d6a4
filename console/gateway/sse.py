"""Passing a replica's event stream on whole events at a time, so a break never leaves half an event.

A replica's chunks are written through as they come; only the part after the last blank line (an event
not yet complete) is held back until its end arrives. If the replica breaks off, the client has seen whole
events only, and the gateway's error event that follows is read as an event of its own, not glued to a
half-written JSON line. An event that grows past `hold_limit` without ending is written through anyway
(no replica's token chunk comes near it): the bound on what one stream may hold in the gateway.
"""

from __future__ import annotations

HOLD_LIMIT = 64 * 1024
_ENDS = (b"\n\n", b"\r\n\r\n", b"\r\r")  # SSE's blank line, in each of the line endings it allows


def _last_end(data: bytes) -> int:
    """The index just past the last blank line in `data`, or -1."""
    best = -1
    for end in _ENDS:
        at = data.rfind(end)
        if at >= 0:
            best = max(best, at + len(end))
    return best


class EventRelay:
    __slots__ = ("done", "hold_limit", "mid_event", "pending")

    def __init__(self, hold_limit: int = HOLD_LIMIT) -> None:
        self.hold_limit = hold_limit
        self.pending = b""
        self.done = False  # the last event written was `data: [DONE]`
        self.mid_event = False  # an unfinished event was written through (past the hold limit)

    def feed(self, chunk: bytes) -> bytes:
        """What of the stream so far may go to the client now (whole events), holding back the rest."""
        data = self.pending + chunk if self.pending else chunk
        cut = _last_end(data)
        if cut < 0:
            if len(data) <= self.hold_limit:
                self.pending = data
                return b""
            self.pending = b""
            self.mid_event = True
            self.done = False
            return data
        self.pending = data[cut:]
        out = data[:cut]
        self.done = out.rstrip().endswith(b"[DONE]")
        self.mid_event = False
        return out

    def rest(self) -> bytes:
        """What is held at the stream's clean end (a last event without its blank line), written as it is."""
        rest, self.pending = self.pending, b""
        if rest.strip():
            self.done = rest.rstrip().endswith(b"[DONE]")
        return rest

    def before_error(self) -> bytes:
        """Bytes that end an event written through unfinished, so the error event stands on its own."""
        return b"\n\n" if self.mid_event else b""
