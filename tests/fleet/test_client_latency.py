"""With a gateway in front, the plan's latency targets are judged on what the clients saw (queue wait included),
and the clients' figures are said beside the replicas' in --once's line, its JSON and the overflow panel."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from console.fleet.client import client_json, client_line, panel_client_line
from console.fleet.flags import FlagInputs, FlagState, Thresholds, evaluate
from console.fleet.overflow import panel_lines
from console.metrics.gateway import GatewayFigures
from tests.fleet.builders import fleet, plan_now, replica

T = Thresholds()
GATEWAY = GatewayFigures(
    "gw:8080",
    0.0,
    1,
    1,
    admitted_per_second=8.0,
    hosted_per_second=0.0,
    rejected_per_second=1.5,
    timed_out_per_second=0.5,
    deferred_per_second=0.0,
    errors_per_second=0.0,
    queue_length=19.0,
    queue_wait_p95_seconds=4.69,
    client_ttft_p95_seconds=4.9,
    client_e2e_p95_seconds=9.3,
    arrivals_per_second=10.0,
)


def active(ttft_replicas: float, client: GatewayFigures | None) -> dict[str, str]:
    inputs = FlagInputs(fleet(replica("r1"), ttft_p95_seconds=ttft_replicas), plan=plan_now(), client=client)
    state = FlagState()
    for now in (0, 30):
        state = evaluate(state, inputs, now, T)
    return {f.kind: f.why for f in state.active}


def test_the_ttft_target_is_judged_on_the_clients_wait_not_the_replicas_own():
    # The replicas' own p95 (393 ms) is inside the 1.5 s target; the clients waited 4.9 s in the queue.
    flags = active(0.393, GATEWAY)
    assert "slo_breach_ttft" in flags
    assert flags["slo_breach_ttft"].startswith("client p95 TTFT 4900 ms over its 1500 ms target")
    assert "the replicas' own 393 ms" in flags["slo_breach_ttft"]
    assert "slo_breach_ttft" not in active(0.393, None)  # without a gateway the replicas' figure is the clients'


def test_clients_served_fast_clear_a_breach_the_replicas_figure_alone_would_raise():
    fast = replace(GATEWAY, client_ttft_p95_seconds=0.2)
    assert "slo_breach_ttft" not in active(2.0, fast)


def test_a_gateway_without_client_figures_leaves_the_replicas_figure_in_charge():
    older = replace(GATEWAY, client_ttft_p95_seconds=None, client_e2e_p95_seconds=None)
    flags = active(2.0, older)
    assert flags["slo_breach_ttft"].startswith("p95 TTFT 2000 ms")


def test_once_line_and_json_say_the_clients_figures_and_shares():
    fleet_figures = fleet(replica("r1"), ttft_p95_seconds=0.393).fleet
    line = client_line(GATEWAY, fleet_figures)
    assert line == (
        "clients (1 gateway): TTFT p95 4.90s (replicas 393ms) · e2e p95 9.30s · refused 20% · deferred 0% · hosted 0%"
    )
    document = client_json(GATEWAY)
    assert document["ttft_p95_seconds"] == 4.9 and document["refused_share"] == 0.2
    assert document["hosted_share"] == 0.0 and document["gateways"] == 1
    assert client_json(None) is None and client_line(None, fleet_figures) is None


def test_unknown_is_null_never_zero():
    idle = GatewayFigures("gw", 0.0, 1, 1)
    document = client_json(idle)
    assert all(document[k] is None for k in ("ttft_p95_seconds", "refused_share", "hosted_share"))


def test_the_panel_leads_with_the_clients_ttft_red_over_the_target():
    lines = panel_lines(GATEWAY, plan_now(), None)
    assert lines[0].text == "clients TTFT p95 4.90s · 20% refused" and lines[0].style == "critical"
    whole_only = replace(GATEWAY, client_ttft_p95_seconds=None)  # no streamed answer: their end-to-end instead
    assert panel_lines(whole_only, plan_now(), None)[0].text == "clients e2e p95 9.30s · 20% refused"
    neither = replace(GATEWAY, client_ttft_p95_seconds=None, client_e2e_p95_seconds=None)
    assert panel_lines(neither, plan_now(), None)[0].text.startswith("admitted")


seconds = st.one_of(st.none(), st.floats(min_value=0, max_value=1e12, allow_nan=False))
rates = st.floats(min_value=0, max_value=1e9, allow_nan=False)


@given(seconds, seconds, rates, rates, rates)
def test_any_figures_fit_the_panel_and_give_shares_in_range(ttft, e2e, admitted, rejected, hosted):
    arrivals = admitted + rejected + hosted  # the outcomes are the arrivals' ends: their rates add up to them
    g = GatewayFigures(
        "gw",
        0.0,
        1,
        1,
        client_ttft_p95_seconds=ttft,
        client_e2e_p95_seconds=e2e,
        arrivals_per_second=arrivals,
        rejected_per_second=rejected,
        timed_out_per_second=0.0,
        hosted_per_second=hosted,
    )
    assert len(panel_client_line(g)) <= 40
    document = client_json(g)
    for key in ("refused_share", "hosted_share"):
        assert document[key] is None or 0 <= document[key] <= 1.0001
