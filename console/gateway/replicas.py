"""The replicas a gateway fronts: each one's address, leases and health as last seen, and the set they form.

No network here: the health checks (health.py) and the relay (replica_client.py) act on these objects,
and admission reads their load. A lease is taken in the same synchronous step as the decision that
grants it, so no two arrivals see the same free slot.

The set may change at run time (a Prometheus-sourced fleet): in one synchronous step, so a decision sees
the old set or the new, never half of each; a replica that leaves keeps the leases it holds until they
end and takes no new one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from console.gateway import credentials
from console.overflow.admission import ReplicaLoad
from console.redact import redact_url


class Replica:
    """One replica as the gateway sees it: address, leases held, health, models served."""

    __slots__ = (
        "answered",
        "authorization",
        "base",
        "checks",
        "healthy",
        "in_flight",
        "models",
        "name",
        "problem",
        "refused",
        "retiring",
        "url",
    )

    def __init__(self, url: str) -> None:
        self.url = url
        # As shown in logs, /admin/state and /metrics labels: never a `user:password@` or a `?token=`.
        self.name = redact_url(url).split("://", 1)[-1]
        # Requests go to the bare address with the target's credentials as a header (credentials.py).
        self.base, self.authorization = credentials.split(url)
        self.in_flight = 0
        self.healthy = True  # until a check or a refused connection says otherwise
        self.models: frozenset[str] = frozenset()
        self.checks = 0
        self.answered = 0
        self.refused = 0
        self.problem = ""
        self.retiring = False  # gone from the fleet's list: no new leases, the ones held run out


def _ignore(name: str) -> None:
    return None


class ReplicaSet:
    """The replicas in rotation, those retiring with leases still held, and every one of them by name.

    `on_added` and `on_removed` hear of each name as it comes and goes (the telemetry's per-replica series).
    """

    def __init__(
        self,
        urls: Iterable[str] = (),
        on_added: Callable[[str], None] = _ignore,
        on_removed: Callable[[str], None] = _ignore,
    ) -> None:
        self._on_added = on_added
        self._on_removed = on_removed
        self.replicas: list[Replica] = []
        # Replicas gone from the list with leases still held: kept until their last answer ends.
        self.retiring: list[Replica] = []
        self.by_name: dict[str, Replica] = {}
        self.models: frozenset[str] = frozenset()  # served by any replica in rotation, as last listed
        for url in dict.fromkeys(urls):
            self.named(Replica(url))
        self.replicas = list(self.by_name.values())

    # --- leases -----------------------------------------------------------------------

    def in_flight(self) -> int:
        return sum(r.in_flight for r in self.replicas) + sum(r.in_flight for r in self.retiring)

    def load(self) -> tuple[ReplicaLoad, ...]:
        """The replicas in rotation as admission reads them."""
        return tuple(ReplicaLoad(r.name, r.in_flight, r.healthy) for r in self.replicas)

    def lease(self, name: str) -> Replica:
        replica = self.by_name[name]
        replica.in_flight += 1
        return replica

    def end_lease(self, replica: Replica) -> None:
        """One lease ends; a retiring replica whose last lease this was is forgotten."""
        replica.in_flight -= 1
        if replica.retiring and replica.in_flight == 0:
            self.forget(replica)

    # --- the set ------------------------------------------------------------------------

    def named(self, replica: Replica) -> Replica:
        """Give `replica` a name no other replica (current or retiring) has, and index it by that name."""
        base = replica.name
        number = 1
        # Two addresses that differ only by a secret read alike once redacted: number them, as the sources do.
        while replica.name in self.by_name:
            number += 1
            replica.name = f"{base}#{number}"
        self.by_name[replica.name] = replica
        self._on_added(replica.name)
        return replica

    def forget(self, replica: Replica) -> None:
        if replica in self.retiring:
            self.retiring.remove(replica)
        if self.by_name.get(replica.name) is replica:
            del self.by_name[replica.name]
            self._on_removed(replica.name)

    def set_replicas(
        self, urls: list[str], checked: Mapping[str, Replica] | None = None
    ) -> tuple[list[str], list[str]]:
        """Make `urls` the fleet: new ones join the rotation, missing ones retire. Names (joined, left).

        Synchronous, so no arrival sees half a change. A replica kept is the same object, leases and
        all; one that retires stays reachable by the handlers holding its leases (they end them on the
        object) and takes no new lease, since admission only sees `replicas`. `checked`: newcomers
        already health-checked, by URL.
        """
        wanted = list(dict.fromkeys(urls))
        current = {r.url: r for r in self.replicas}
        retiring = {r.url: r for r in self.retiring}
        joined, left = [], []
        replicas = []
        for url in wanted:
            replica = current.get(url) or retiring.get(url)
            if replica is None:
                replica = self.named((checked or {}).get(url) or Replica(url))
                joined.append(replica.name)
            elif replica.retiring:
                replica.retiring = False
                self.retiring.remove(replica)
                joined.append(replica.name)
            replicas.append(replica)
        keep = set(wanted)
        for replica in self.replicas:
            if replica.url in keep:
                continue
            left.append(replica.name)
            replica.retiring = True
            if replica.in_flight > 0:
                self.retiring.append(replica)
            else:
                self.forget(replica)
        self.replicas = replicas
        self.refresh_models()
        return joined, left

    def refresh_models(self) -> None:
        self.models = frozenset().union(*(r.models for r in self.replicas))
