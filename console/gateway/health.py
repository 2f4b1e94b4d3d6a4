"""The replicas' health as the gateway checks it: GET /health, and now and then GET /v1/models.

A replica that fails a check (or refuses a connection, replica_client.py) is skipped until a check finds
it answering again; its coming back is said to the gateway (`on_back`), which hands it waiting requests.
Every answer is read within the --max-response-bytes bound and a bounded JSON depth.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import aiohttp

from console.gateway import bounded_json
from console.gateway.relay_io import auth_header, problem_of
from console.gateway.replicas import Replica

log = logging.getLogger("capcon.gateway")

MODELS_EVERY_CHECKS = 12  # a healthy replica's model list is read again every this many health checks


class HealthChecks:
    def __init__(
        self,
        session: Callable[[], aiohttp.ClientSession],
        interval: float,
        timeout: float,
        max_response_bytes: int,
        on_back: Callable[[], None],
    ) -> None:
        self._session = session  # the gateway's session to its replicas, opened at start
        self.interval = interval
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self._on_back = on_back

    async def check(self, replica: Replica, quiet: bool = False) -> None:
        """One check; `quiet`: a newcomer, not yet in the rotation, whose state is set without a word."""
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        head = auth_header(replica.authorization)
        limit = self.max_response_bytes
        session = self._session()
        problem = ""
        try:
            async with session.get(replica.base + "/health", timeout=timeout, headers=head) as response:
                await bounded_json.read_body(response, limit)
                if response.status != 200:
                    problem = f"/health answered {response.status}"
            if not problem and (not replica.models or replica.checks % MODELS_EVERY_CHECKS == 0):
                async with session.get(replica.base + "/v1/models", timeout=timeout, headers=head) as response:
                    if response.status == 200:
                        listing = bounded_json.loads(await bounded_json.read_body(response, limit))
                        cards = listing.get("data") if isinstance(listing, dict) else None
                        replica.models = frozenset(
                            c["id"]
                            for c in (cards if isinstance(cards, list) else ())
                            if isinstance(c, dict) and isinstance(c.get("id"), str)
                        )
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as error:  # Unreadable is a ValueError
            problem = problem_of(error)
        replica.checks += 1
        if quiet:
            replica.healthy, replica.problem = not problem, problem
            return
        self.set_health(replica, not problem, problem)

    def set_health(self, replica: Replica, healthy: bool, problem: str) -> None:
        """Record what a check (or a request) found; a change is logged once, and a replica back is said."""
        replica.problem = problem
        if healthy == replica.healthy:
            return
        replica.healthy = healthy
        if healthy:
            log.info("replica %s is back: requests go to it again", replica.name)
            self._on_back()
        else:
            log.warning(
                "replica %s is skipped: %s (checked again every %g s)",
                replica.name,
                problem,
                self.interval,
            )
