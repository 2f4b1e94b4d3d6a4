"""The plan: the week's schedule with now marked, and the `capcon plan` report."""

from __future__ import annotations

import os

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Static

from console.ahead.accuracy import ForecastAccuracy
from console.ahead.forecast import Forecast
from console.ahead.words import accuracy_legend, forecast_line
from console.live.session import FleetSession
from console.plan.model import DAYS, Plan
from console.plan.report import render
from console.plan.schedule import schedule
from console.plan.sizing import size
from console.text import printable
from console.tui.screens.base import ConsoleScreen, console_app
from console.tui.widgets.console_header import ConsoleHeader
from console.tui.widgets.scroll import ConsoleScroll
from console.tui.widgets.sparkline import spark


def week_grid(replicas_by_hour: tuple[tuple[int, ...], ...], now: tuple[int, int] | None) -> Text:
    """Replicas scheduled per day and hour; the current hour in reverse video and named below."""
    text = Text(no_wrap=True)
    text.append("replicas scheduled, by hour\n", style="bold")
    text.append("     " + "".join(f"{h:>3}" for h in range(24)) + "\n")
    for day, row in enumerate(replicas_by_hour):
        text.append(f"{DAYS[day]:<5}")
        for hour, count in enumerate(row):
            text.append(f"{count:>3}", style="reverse bold" if now == (day, hour) else "")
        text.append("\n")
    if now is not None:
        day, hour = now
        text.append(f"now: {DAYS[day]} {hour:02d}:00, {replicas_by_hour[day][hour]} replicas scheduled")
    return text


def forecast_text(forecast: Forecast | None, accuracy: ForecastAccuracy | None = None) -> Text:
    """The arrivals ahead in words (as `watch --once` prints them), and a sparkline of the next half hour
    against the capacity of the replicas up (a full bar is that capacity, or the forecast's top above it).
    With a history file (`accuracy`), each horizon's past error on this fleet and a line saying what ± is."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if forecast is None:
        text.append("forecast: waiting for the first poll\n")
        return text
    text.append(forecast_line(forecast, accuracy))
    known = [v for v in forecast.by_minute if v is not None]
    if known:
        top = max([*known, forecast.capacity_rps or 0.0])
        text.append(f"\nnext {len(forecast.by_minute) - 1} min  ")
        text.append(spark(forecast.by_minute, len(forecast.by_minute), top))
        text.append(f"  full bar {top:.1f} rps")
        if forecast.capacity_rps is not None:
            text.append(f"; the replicas up carry {forecast.capacity_rps:.1f}")
    legend = accuracy_legend(accuracy)
    if legend:
        text.append("\n" + legend, style="dim")
    text.append("\n")
    return text


class PlanScreen(ConsoleScreen):
    BINDINGS = [Binding("escape", "app.pop_screen", "back", id="back-from-plan")]

    def __init__(self, session: FleetSession, plan: Plan) -> None:
        super().__init__()
        self.session = session
        self.index = session.index
        self.plan = plan
        self._report: str | None = None
        self._shown_now: tuple[int, int] | bool | None = False
        self._shown_forecast: tuple[Forecast | None, ForecastAccuracy | None] | None = None

    def compose(self) -> ComposeResult:
        yield ConsoleHeader()
        with ConsoleScroll():
            yield Static(id="forecast", markup=False)
            yield Static(id="week")
            yield Static(id="report", markup=False)
        yield Footer()

    def draw(self) -> None:
        self.query_one(ConsoleHeader).show(console_app(self).header_info(self.session))
        view = self.session.view
        now = (view.plan.weekday, view.plan.hour) if view and view.plan else None
        forecast = (view.forecast if view is not None else None, self.session.forecast_accuracy)
        if forecast != self._shown_forecast:
            self._shown_forecast = forecast
            self.query_one("#forecast", Static).update(forecast_text(*forecast))
        if now != self._shown_now:
            self._shown_now = now
            self.query_one("#week", Static).update(week_grid(schedule(self.plan).replicas_by_hour, now))
        if self._report is None:
            self._report = printable_report(
                render(size(self.plan), schedule(self.plan), shown_path(self.plan.source_path))
            )
            self.query_one("#report", Static).update(Text(self._report))


def shown_path(path: str) -> str:
    """The plan file relative to where capcon runs, as the operator typed it; absolute only outside it."""
    if not path:
        return ""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def printable_report(report: str) -> str:
    """The report keeps its line breaks; anything else unprintable from the plan file is shown escaped."""
    return "\n".join(printable(line) for line in report.split("\n"))
