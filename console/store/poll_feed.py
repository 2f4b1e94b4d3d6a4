"""One fleet's polls turned into views and history records: the step the console, `capcon record` and
`capcon watch --once --db` all take, so flag changes (raised, cleared) are recorded the same way everywhere.

It keeps the previous view per fleet (trends and flags carry over); without a recorder it only builds views.
"""

from __future__ import annotations

from console.fleet.view import FleetView, advance
from console.metrics.figures import FleetFigures
from console.store.records import poll_record


class PollFeed:
    def __init__(self, handle, recorder, interval_seconds: float) -> None:
        self.handle = handle  # console.fleet_handle.FleetHandle
        self.recorder = recorder
        self.interval_seconds = interval_seconds
        self.previous: FleetView | None = None

    def add(self, figures: FleetFigures, now: float) -> FleetView:
        """The view of this poll (as the console builds it at `now`), handed to the recorder."""
        handle = self.handle
        view = advance(self.previous, handle.name, figures, handle.plan_at(now), now)
        if self.recorder is not None:
            self.recorder.submit(
                poll_record(handle.name, handle.watcher, self.previous, view, handle.plan, self.interval_seconds, handle.plan_time(view.now))
            )
        self.previous = view
        return view
