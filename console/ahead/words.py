"""The forecast in words, one line: what `watch --once` prints and the console's plan panel shows.

    forecast: 5 min 12.3 rps (11-14) · 15 min 13.1 rps (10-16) · 30 min 14.0 rps (9.8-18) · saturation in 7 min (a replica takes 10)

Unknown figures read "–", never 0.
"""

from __future__ import annotations

import math

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


def horizon_words(forecast: Forecast) -> list[str]:
    """ "5 min 12.3 rps (11-14)" per horizon."""
    return [
        f"{h} min {rps_words(rps)} rps{band_words(low, high)}"
        for h, rps, low, high in zip(forecast.horizon_minutes, forecast.rps, forecast.rps_low, forecast.rps_high)
    ]


def forecast_line(forecast: Forecast) -> str:
    return "forecast: " + " · ".join([*horizon_words(forecast), saturation_words(forecast)])
