"""How long a call may take, in CPU seconds of this process, never in wall-clock seconds.

A loaded machine stretches wall time without bound but hardly the CPU a call burns, so "at once, never a hang" is
held to a CPU budget with a wide margin: every call bounded this way takes milliseconds to a few tenths of a
second of CPU on a quiet machine. Speed itself is measured by benchmarks/, never asserted here.
"""

from __future__ import annotations

import time

HANG_CPU_SECONDS = 5.0


def cpu_seconds() -> float:
    """This process' CPU time (every thread's, user and system): subtract two readings."""
    return time.process_time()
