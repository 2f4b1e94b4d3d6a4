"""The replica set on its own (console/gateway/replicas.py): leases, names, a set that changes under held leases."""

from __future__ import annotations

from console.gateway.replicas import Replica, ReplicaSet
from console.overflow.admission import ReplicaLoad

A, B, C = "http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"


def watched(urls=()):
    said: list[tuple[str, str]] = []
    pool = ReplicaSet(urls, lambda n: said.append(("added", n)), lambda n: said.append(("removed", n)))
    return pool, said


def test_leases_count_in_flight_and_the_load_admission_reads():
    pool, _ = watched([A, B, A])  # a target named twice is one replica
    assert [r.name for r in pool.replicas] == ["10.0.0.1:8000", "10.0.0.2:8000"]
    first = pool.lease("10.0.0.1:8000")
    pool.lease("10.0.0.1:8000")
    pool.replicas[1].healthy = False
    assert pool.in_flight() == 2
    assert pool.load() == (ReplicaLoad("10.0.0.1:8000", 2, True), ReplicaLoad("10.0.0.2:8000", 0, False))
    pool.end_lease(first)
    assert first.in_flight == 1 and pool.in_flight() == 1


def test_a_replica_that_leaves_with_leases_retires_until_its_last_one_ends():
    pool, said = watched([A, B])
    holder = pool.lease("10.0.0.1:8000")
    kept = pool.replicas[1]
    joined, left = pool.set_replicas([B, C])
    assert (joined, left) == (["10.0.0.3:8000"], ["10.0.0.1:8000"])
    assert pool.replicas[0] is kept  # the same object, leases and all
    assert holder.retiring and pool.retiring == [holder] and holder not in pool.replicas
    assert pool.in_flight() == 1  # its lease still counts until it ends
    assert ("removed", "10.0.0.1:8000") not in said  # its series stay while it serves
    pool.end_lease(holder)
    assert pool.retiring == [] and "10.0.0.1:8000" not in pool.by_name
    assert said[-1] == ("removed", "10.0.0.1:8000")


def test_a_retiring_replica_named_again_rejoins_as_the_same_object():
    pool, _ = watched([A])
    holder = pool.lease("10.0.0.1:8000")
    pool.set_replicas([B])
    joined, left = pool.set_replicas([A, B])
    assert joined == ["10.0.0.1:8000"] and left == []
    assert pool.replicas[0] is holder and not holder.retiring and pool.retiring == []


def test_a_replica_without_leases_is_forgotten_at_once_and_models_follow_the_set():
    pool, said = watched([A, B])
    pool.replicas[0].models = frozenset({"m1"})
    pool.replicas[1].models = frozenset({"m2"})
    pool.refresh_models()
    assert pool.models == {"m1", "m2"}
    pool.set_replicas([B])
    assert pool.retiring == [] and said[-1] == ("removed", "10.0.0.1:8000") and pool.models == {"m2"}


def test_checked_newcomers_join_with_what_their_check_found():
    pool, _ = watched([A])
    newcomer = Replica(B)
    newcomer.healthy, newcomer.problem = False, "ConnectionRefusedError"
    pool.set_replicas([A, B], {B: newcomer})
    assert pool.replicas[1] is newcomer and pool.by_name["10.0.0.2:8000"] is newcomer


def test_addresses_alike_but_for_a_secret_get_numbered_names_that_hide_it():
    pool, said = watched(["http://u:one@10.0.0.1:8000", "http://u:two@10.0.0.1:8000"])
    names = [r.name for r in pool.replicas]
    assert len(set(names)) == 2 and names[1].endswith("#2")
    assert not any("one" in n or "two" in n for n in names)
    assert [n for _, n in said] == names
