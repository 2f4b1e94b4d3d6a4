"""Keys and the filter syntax."""

from __future__ import annotations

from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Static

from console.tui.widgets.scroll import ConsoleScroll

HELP = """\
capcon console: keys (the footer shows the main ones)
q          quit                    ?      this help (Esc closes)
p          pause / resume polling  + / -  slower / faster (1 s floor)
s          sort by the next column r      reverse the sort
/          filter rows             Esc    clear the filter
up / down  choose a replica        Enter  its every figure
o          overview of all fleets  w      save an SVG screenshot
n          poll now                P      the plan: week schedule, report
x          demo only: traffic x3 for 60 s
f          demo only: fault menu for the chosen replica (d down,
           r restart, s slow, e /metrics 500, h hang, g garbage; again
           clears; c clear the replica, a clear all). In --read-only,
           x and f are dimmed and only say so: nothing changes the fleet.
Filters: a column, an operator and a value, or any text to match a name,
state or URL:  kv>0.9   kv>=90%   wait>=1   state=down   name~gpu-3
Columns: name state rps prompt gen run wait kv preempt ttft50 ttft tpot
e2e queue prefix. An unknown value (shown as –) matches no comparison.
Severity reads as a word and a symbol as well as a colour:
  ✖ CRIT  ▲ WARN  ● info  ✓ ok  ? unknown  … pending (not yet a flag)
"""


class HelpScreen(ModalScreen):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "close", id="close-help"),
        Binding("question_mark", "app.pop_screen", "close", show=False),
    ]

    def compose(self):
        with ConsoleScroll(id="help"):
            yield Static(HELP, markup=False)
