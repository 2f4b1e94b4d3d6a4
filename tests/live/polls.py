"""Polls as a watcher hands them out, for tests that build views themselves and record them."""

from __future__ import annotations

from collections.abc import Iterable

from console.fleet.view import FleetView
from console.live.watcher import Poll, Watcher
from console.targets import TargetResult


def figure_poll(view: FleetView, interval_seconds: float, window_seconds: float = 300.0) -> Poll:
    """A figure source's poll (Prometheus): figures, no raw results, watched at the view's moment."""
    return Poll(view.figures, None, view.now, window_seconds, interval_seconds)


def replayed_poll(watcher: Watcher, results: Iterable[TargetResult], now: float) -> Poll:
    """A sample source's poll made of results fetched earlier, as the watcher computes a live one."""
    results = tuple(results)
    return Poll(watcher.replay(results, now), results, now, watcher.window_seconds, watcher.interval_seconds)
