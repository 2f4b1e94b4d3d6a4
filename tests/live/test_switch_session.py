"""A watched fleet's session keeps each switch on the timeline once: asked here, or seen on the gateways."""

from __future__ import annotations

from console.live.gateways import GatewayView
from console.live.session import FleetSession
from console.live.switch import SwitchOutcome
from console.metrics.gateway import GatewayFigures, PolicyInForce
from console.overflow.switch import request
from console.plan.model import Plan


class Handle:
    name = "assistant"
    plan: Plan | None = None
    gateways = ("http://10.0.0.2:8080",)


def read(mode: str, actor: str, set_at: float, from_plan: bool = False) -> GatewayView:
    policy = PolicyInForce(mode, actor, from_plan, set_at, None)
    return GatewayView(GatewayFigures("gw", set_at, 1, 1, policy=policy, modes=(mode,)), ("gw",))


def applied(req, at: float, ok: bool = True) -> SwitchOutcome:
    from console.live.actuators import ActuatorAnswer

    return SwitchOutcome(req, at, (ActuatorAnswer("gateway g", ok, "applied" if ok else "refused", 0.1),))


def test_a_switch_asked_here_is_noted_once_whether_the_gateways_show_it_before_or_after_its_answer():
    for gateways_first in (True, False):
        session = FleetSession(0, Handle())
        session.gateways_read(read("bounded_queue", "plan", 100.0, from_plan=True))
        req = request("pass", "spike", "alice")
        session.asked(req)
        if gateways_first:
            session.gateways_read(read("pass", "alice", 5000.0))  # the gateway's clock: any time at all
            session.switched(applied(req, 200.0))
        else:
            session.switched(applied(req, 200.0))
            session.gateways_read(read("pass", "alice", 5000.0))
        assert [(n.mode, n.actor, n.reason, n.outcome) for n in session.switches] == [
            ("pass", "alice", "spike", "1 of 1 applied")
        ]
        # Someone else's switch later, and the plan's policy back at expiry: each noted as seen.
        session.gateways_read(read("pass", "bob", 6000.0))
        session.gateways_read(read("bounded_queue", "plan", 7000.0, from_plan=True))
        assert [n.actor for n in session.switches] == ["plan (expiry)", "bob", "alice"]


def test_a_switch_no_gateway_took_does_not_hide_a_later_identical_one():
    session = FleetSession(0, Handle())
    session.gateways_read(read("bounded_queue", "plan", 100.0, from_plan=True))
    req = request("pass", "spike", "alice")
    session.asked(req)
    session.switched(applied(req, 200.0, ok=False))
    session.gateways_read(read("pass", "alice", 900.0))  # alice switched from a runbook meanwhile
    assert [(n.actor, n.outcome) for n in session.switches] == [("alice", ""), ("alice", "0 of 1 applied")]


def test_a_poll_clears_the_error_and_the_header_words_follow_the_gateways():
    session = FleetSession(0, Handle())
    session.failed("poll failed: refused")
    assert session.error == "poll failed: refused"
    assert session.overflow_words(None, str) == "? (no gateway answering)" and session.overflow_mode(None) is None
    session.gateways_read(read("hosted", "alice", 100.0))
    assert session.overflow_mode(None) == "hosted" and session.overflow_words(None, lambda at: "10:00").startswith(
        "hosted by alice 10:00"
    )
