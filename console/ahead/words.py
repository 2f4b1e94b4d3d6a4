"""The forecast in words, one line: what `watch --once` prints and the console's plan panel shows.

    forecast: 5 min 12.3 rps (11-14) · 15 min 13.1 rps (10-16) · 30 min 14.0 rps (9.8-18) · saturation in 7 min (a replica takes 10)

With a history file holding enough of the fleet's minutes, each horizon also says how wrong the forecast has been
there (its backtest MAE, console.ahead.accuracy), and `accuracy_legend` says what the ± means:

    forecast: 5 min 12.3 rps (11-14) ±0.41 · 15 min 13.1 rps (10-16) ±1.2 · ...
    ± its mean error at each horizon, backtested on 2,345 minutes recorded in the last 7 days

Unknown figures read "–", never 0.
"""

from __future__ import annotations

import math

from console.ahead.accuracy import REACH_SECONDS, ForecastAccuracy
from console.ahead.forecast import Forecast

UNKNOWN = "–"


def rps_words(value: float | None) -> str:
    """A rate as the line shows it: 0.42, 3.10, 12.3, 140; unknown as "–"."""
    if value is None or not math.isfinite(value):
        return UNKNOWN
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _bound(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.1f}"


def band_words(low: float | None, high: float | None) -> str:
    """ "(11-14)", or nothing when the band is unknown."""
    if low is None or high is None or not math.isfinite(low) or not math.isfinite(high):
        return ""
    return f" ({_bound(low)}-{_bound(high)})"


def minutes_words(minutes: float) -> str:
    """ "7 min", "under 1 min", "0 min" (now)."""
    if minutes <= 0:
        return "0 min"
    if minutes < 1:
        return "under 1 min"
    return f"{minutes:.0f} min"


def saturation_words(forecast: Forecast) -> str:
    """When the forecast passes the replicas up, set against the lead time; or that it does not."""
    if forecast.capacity_rps is None:
        return "capacity unknown"
    minutes, lead = forecast.minutes_to_saturation, forecast.lead_time_minutes
    if not forecast.rps or forecast.rps[0] is None:
        return "saturation unknown"
    if minutes is None:
        return "not heading for saturation"
    said = "saturated now" if minutes <= 0 else f"saturation in {minutes_words(minutes)}"
    return said + (f" (a replica takes {lead:.0f})" if lead is not None else "")


def error_words(mae: float | None) -> str:
    """ " ±1.2" (the backtest's MAE at a horizon), or nothing when it is unknown."""
    if mae is None or not math.isfinite(mae):
        return ""
    if abs(mae) >= 10:
        return f" ±{mae:.0f}"
    return f" ±{mae:.1f}" if abs(mae) >= 1 else f" ±{mae:.2f}"


def horizon_words(forecast: Forecast, accuracy: ForecastAccuracy | None = None) -> list[str]:
    """ "5 min 12.3 rps (11-14)" per horizon, and " ±0.41" after it when the backtest has its error."""
    return [
        f"{h} min {rps_words(rps)} rps{band_words(low, high)}"
        + (error_words(accuracy.mae_at(h)) if accuracy is not None else "")
        for h, rps, low, high in zip(forecast.horizon_minutes, forecast.rps, forecast.rps_low, forecast.rps_high)
    ]


def forecast_line(forecast: Forecast, accuracy: ForecastAccuracy | None = None) -> str:
    return "forecast: " + " · ".join([*horizon_words(forecast, accuracy), saturation_words(forecast)])


def accuracy_legend(accuracy: ForecastAccuracy | None) -> str | None:
    """What the ± figures are, or how much history they wait for; None without a history file to read."""
    if accuracy is None:
        return None
    days = f"{REACH_SECONDS / 86400:.0f} days"
    recorded = f"{accuracy.minutes:,} minute{'' if accuracy.minutes == 1 else 's'}"
    if not accuracy.known:
        return (
            f"± (its past error) once {accuracy.needed_minutes} minutes in a row are recorded: "
            f"{recorded} in the last {days}"
        )
    return f"± its mean error at each horizon, backtested on {recorded} recorded in the last {days}"
