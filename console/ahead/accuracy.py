"""How wrong the live forecast has been on this fleet, as the console quotes it beside the forecast.

The figure is the backtest's (console.ahead.backtest) mean absolute error of the forecast at each horizon, over
the fleet's recorded arrivals of the last REACH_SECONDS. A week bounds the cost: the backtest walks every
recorded minute once (about 0.9 s of CPU for a week of minutes on a 2-core machine), whatever the file keeps.

Pure: the backtest's result in, the figures out.
"""

from __future__ import annotations

from dataclasses import dataclass

from console.ahead.backtest import Backtest, needed_minutes
from console.ahead.forecast import HORIZONS_MINUTES

REACH_SECONDS = 7 * 86400.0  # the history a backtest reads: the last week recorded, never more


@dataclass(frozen=True)
class ForecastAccuracy:
    horizon_minutes: tuple[int, ...]
    # The forecast's MAE at each horizon (req/s); every one None while the history is too short for the backtest.
    mae_rps: tuple[float | None, ...]
    minutes: int  # recorded minutes with a known rate in the reach
    needed_minutes: int  # what one scored forecast at every horizon needs (the backtest's own minimum)

    @property
    def known(self) -> bool:
        return any(v is not None for v in self.mae_rps)

    def mae_at(self, horizon_minutes: int) -> float | None:
        for h, mae in zip(self.horizon_minutes, self.mae_rps):
            if h == horizon_minutes:
                return mae
        return None


def accuracy_of(result: Backtest) -> ForecastAccuracy:
    """The backtest's forecast error per horizon; all unknown unless every horizon was scored (`complete`)."""
    horizons = tuple(e.horizon_minutes for e in result.forecast) or HORIZONS_MINUTES
    mae = tuple(e.mae_rps for e in result.forecast) if result.complete else (None,) * len(horizons)
    return ForecastAccuracy(horizons, mae, result.minutes, needed_minutes(horizons))
