"""The plan's arrivals profile for the minutes ahead, read from its week of rps_by_hour.

The plan's 7 x 24 table is in its own time zone; `plan_clock` is a moment on that clock (the UTC
offset already folded in, as console.live.handle.FleetHandle.plan_time gives it), read as UTC here,
the way console.fleet.plan_now reads the hour. Each hour's figure is taken at the middle of its hour
and joined to its neighbours by straight lines, as the simulated fleet (console.sim.traffic) draws
its traffic: a forecast for 08:55 then already leans toward the 09:00 hour rather than jumping.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from console.ahead.forecast import Profile
from console.plan.model import Plan

HOUR = 3600.0


def planned_rps(plan: Plan, plan_clock: float) -> float:
    """The interactive rps the plan's week has for the hour holding `plan_clock` (interactive workloads,
    or every workload when none is marked interactive, as console.fleet.plan_now counts them)."""
    moment = datetime.fromtimestamp(plan_clock, UTC)
    day, hour = moment.weekday(), moment.hour
    return float(sum(w.rps_by_hour[day][hour] for w in plan.interactive or plan.workloads))


def plan_profile(plan: Plan, plan_clock: float, minutes: float = 30.0) -> Profile:
    """Knots at the middle of each hour from the one before `plan_clock` to the one after `minutes` ahead."""
    if not math.isfinite(plan_clock) or not math.isfinite(minutes):
        return Profile(())
    first = math.floor((plan_clock - HOUR / 2) / HOUR) * HOUR + HOUR / 2
    knots = []
    middle = first
    while True:
        knots.append(((middle - plan_clock) / 60.0, planned_rps(plan, middle)))
        if middle > plan_clock + minutes * 60.0:
            break
        middle += HOUR
    return Profile(tuple(knots))
