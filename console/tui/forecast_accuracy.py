"""The console's quote of how wrong its forecast has been: the backtest of the history file, on a worker thread.

At start and then every REFRESH_SECONDS, one thread worker reads the file the console records to (read-only: the
recorder's writer is never waited on) and backtests each fleet's last week (console.live.forecast_accuracy); a
`ForecastAccuracyMeasured` per fleet carries the figures to the app. The polls go on meanwhile on the event loop.
Nothing runs without a history file, or on a replay (its file is the past, not the fleet's record up to now).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from console.tui.drivers import LiveDriver
from console.tui.messages import ForecastAccuracyMeasured

if TYPE_CHECKING:
    from console.tui.app import ConsoleApp

REFRESH_SECONDS = 600.0  # a week's error moves little in ten minutes; the walk costs about 0.9 s of CPU


class ForecastAccuracyWatch:
    def __init__(self, app: ConsoleApp) -> None:
        self.app = app
        self.measurements = 0  # finished walks (tests wait on it)
        self._running = False

    @property
    def path(self) -> str | None:
        path = getattr(self.app.recorder, "path", None)  # None: not recording
        return str(path) if path else None

    def start(self) -> None:
        if self.path is None or not isinstance(self.app.driver, LiveDriver):
            return
        self.measure()
        self.app.set_interval(REFRESH_SECONDS, self.measure)

    def measure(self) -> None:
        """One walk on a thread; skipped while the last one still runs (a slow disk must not stack them)."""
        path = self.path
        if path is None or self._running:
            return
        self._running = True
        fleets = [(session.name, session.plan) for session in self.app.sessions]
        now = self.app.clock()

        def walk() -> None:
            from console.live.forecast_accuracy import forecast_accuracy  # noqa: PLC0415 - the store, when first used

            try:
                found = forecast_accuracy(path, fleets, now)
                for index, accuracy in enumerate(found):
                    self.app.post_message(ForecastAccuracyMeasured(index, accuracy))
            finally:
                self._running = False
                self.measurements += 1

        self.app.run_worker(walk, name="forecast-accuracy", group="forecast-accuracy", thread=True, exit_on_error=False)
