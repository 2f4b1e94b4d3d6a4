"""The recorder: writes polls to the history file on a thread of its own, so the console never waits on disk.

CONTRACT (implementation to follow):

    recorder = Recorder(path, retention=Retention())   # raises HistoryError when `path` is not a history file
    recorder.start()                                     # starts the writer thread
    recorder.submit(record)                              # never blocks; queued for the thread
    recorder.event(at, kind, fleet=None, subject=None, detail=None)
    recorder.status                                      # RecorderStatus, read by the header every second
    recorder.close(timeout=5.0)                          # writes what is queued (bounded), stops the thread
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

RecorderState = Literal["recording", "locked", "read-only", "full", "error", "stopped"]


@dataclass(frozen=True)
class RecorderStatus:
    state: RecorderState
    detail: str = ""  # words for the header when the state is not "recording"
    written: int = 0  # polls committed to the file
    waiting: int = 0  # polls queued, not yet written
    dropped: int = 0  # polls given up because the queue was full for too long
    path: str = ""
