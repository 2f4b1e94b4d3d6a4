"""Unnamed fleets get a name from their targets: two different fleets never share a history or block each other."""

from __future__ import annotations

import argparse

from console.cli import main
from console.live.setup import fleet_name
from console.plan.schema import load_plan
from console.sources.prometheus import PrometheusSource
from console.sources.scrape import ScrapeSource
from console.store.database import Store
from console.targets import targets_from
from tests.store.recorder_polls import capcon_sim


def args(**given) -> argparse.Namespace:
    return argparse.Namespace(name=given.get("name"))


def test_the_name_comes_from_the_option_the_plan_the_targets_or_the_selector():
    one = ScrapeSource(targets_from(["10.0.0.6:8000"]))
    three = ScrapeSource(targets_from(["10.0.0.7:8000", "10.0.0.5:8000", "10.0.0.6:8000"]))
    plan = load_plan("plans/chat-8b-l40s.yaml")
    assert fleet_name(args(), None, one) == "10.0.0.6:8000"
    assert fleet_name(args(), None, three) == "10.0.0.5:8000 +2"  # sorted: the same set, the same name
    assert fleet_name(args(), plan, three) == plan.name
    assert fleet_name(args(name="chat-eu"), plan, three) == "chat-eu"
    prometheus = PrometheusSource("http://prom:9090", 'job="vllm"')
    assert fleet_name(args(), None, prometheus) == 'prometheus job="vllm"'


def test_name_is_refused_with_several_plans(capsys):
    code = main(["watch", "plans/chat-8b-l40s.yaml", "plans/assistant-70b.yaml", "--once", "--name", "x"])
    assert code == 2
    assert "--name with several plans" in capsys.readouterr().err


def test_two_unnamed_fleets_record_into_one_file_as_two_fleets(tmp_path):
    path = tmp_path / "h.sqlite"
    with capcon_sim(replicas=2) as urls:
        assert main(["watch", "--target", urls[0], "--once", "--interval", "0.3", "--db", str(path)]) == 0
        assert (
            main(["watch", "--target", urls[1], "--once", "--interval", "0.3", "--db", str(path), "--name", "second"])
            == 0
        )
    names = [f.name for f in Store.open(path, read_only=True).fleets()]
    assert len(names) == 2 and "second" in names and names[0].startswith("127.0.0.1:")
