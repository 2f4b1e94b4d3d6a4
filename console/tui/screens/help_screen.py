"""Keys and the filter syntax."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Static

from console.tui.drivers import ReplayDriver
from console.tui.screens.base import console_app
from console.tui.widgets.scroll import ConsoleScroll

HELP = """\
capcon console: keys (the footer shows the main ones)
q          quit                    ?      this help (Esc closes)
p          pause / resume polling  + / -  slower / faster (1 s floor)
s          sort menu (a key each)  r      reverse the sort
/          filter rows             Esc    clear the filter
↑ ↓ or j k choose a replica        Enter  its every figure
Tab        to the flags panel and back (there up/down PgUp PgDn scroll)
o          overview: several plans' fleets (capcon watch PLAN PLAN ...)
w          save an SVG screenshot into capcon's data folder (path in notice)
n          poll now                P      the plan: week schedule, report
m          overflow switch: mode, reason, expiry, then each gateway's answer
i          what-if, simulated      x      demo only: traffic x3 for 60 s
f          demo only: fault menu for the chosen replica (d down, r restart,
           s slow, e /metrics 500, h hang, g garbage; again clears; c clear
           the replica, a clear all). --read-only dims x and f.
Filters: a column, an operator and a value, or any text to match a name,
state or URL:  KV>=90%  TTFT95>0.3  out t/s<100  state=down  name~gpu-3
Columns: by title, as the header shows them (any case), or name rps prompt
gen preempt ttft tpot e2e queue. An unknown value (–) matches no comparison.
Rows: ✖ CRIT ▲ WARN ● info (flags) · … pend (a condition inside its minimum
duration) · ! over (a cell over its limit) · ✓ ok · ? unknown. A cell over
its target or threshold is coloured and followed by !.
Header: narrow, it leaves out the least urgent; overflow bq: bounded queue.
"""

# `capcon replay`: the replay keys instead of the live ones (poll, interval, demo keys are off).
REPLAY_HELP = """\
capcon replay: keys (the footer shows the main ones)
space / p  play / pause            ] / [  speed x2 / halved (x0.25 to x64)
. / ,      one poll forward / back > / <  1 min forward / back
} / {      10 min forward / back   g      go to a time
Home / End start / end             q      quit
Go to: 14:05 or 14:05:30 (the day replayed), 2026-11-30 14:05 (ISO), -5m,
+30s. After a jump, flags and trends are recomputed from 15 min before.
s          sort menu (a key each)  r      reverse the sort
/          filter rows             Esc    clear the filter
↑ ↓ or j k choose a replica        Enter  its every figure
Tab        to the flags panel and back
o          overview: several fleets, when the history holds them
w          save an SVG screenshot into capcon's data folder (path in notice)
P          the plan                ?      this help (Esc closes)
i          what-if at the moment shown: a lever, simulated on its figures
""" + HELP[HELP.index("Filters:") :]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "close", id="close-help"),
        Binding("question_mark", "app.pop_screen", "close", show=False),
    ]

    def compose(self) -> ComposeResult:
        replaying = isinstance(console_app(self).driver, ReplayDriver)
        # The first line titles the box: one more line of keys fits 80x24.
        title, _, keys = (REPLAY_HELP if replaying else HELP).partition("\n")
        with ConsoleScroll(id="help") as box:
            box.border_title = title
            yield Static(keys.rstrip("\n"), markup=False)
