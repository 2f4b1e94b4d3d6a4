"""A simulated fleet: N replica servers of a plan on loopback, the plan's traffic, spikes and faults.

    async with SimFleet(plan, replicas=5, seed=1) as fleet:
        print(fleet.urls)            # scrape targets: http://127.0.0.1:PORT (+ /metrics)
        fleet.spike(3.0, 30)         # three times the load for 30 s
        await fleet.fault(2, "down") # and back with fleet.clear_fault(2, "down")

Traffic modes: "inprocess" puts requests straight into the engines (the HTTP
servers still serve the API and /metrics): a 5-replica fleet at demo load stays
far below one core, because no request is serialised, sent or streamed. This is
what `capcon demo` uses. "http" sends every request as a real
`/v1/completions` call through aiohttp, for tests of the API path; "off" sends
nothing (an external load generator drives the fleet).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from console.fleet.gpus import ReplicaAddress
from console.plan.model import Plan
from console.sim.faults import DEFAULT_SLOW_FACTOR, check_kind
from console.sim.gpu import NAMESPACE, pod_name
from console.sim.server import HOST, ReplicaServer
from console.sim.shape import ReplicaShape, replica_shape
from console.sim.traffic import HttpTarget, LengthSampler, Target, TrafficGenerator, week_label
from console.targets import target_name

if TYPE_CHECKING:
    import aiohttp

TRAFFIC_MODES = ("inprocess", "http", "off")
# A simulated day lasts five minutes by default.
DEFAULT_TIME_SCALE = 288.0


class SimFleet:
    def __init__(
        self,
        plan: Plan,
        replicas: int,
        base_port: int = 0,
        speed: float = DEFAULT_TIME_SCALE,
        seed: int = 0,
        rps_scale: float = 1.0,
        traffic: str = "inprocess",
        burstiness: float | None = None,
        start_week_seconds: float = 7 * 3600.0,
        gpu_pages: bool = True,
    ):
        if replicas < 1:
            raise ValueError(f"a fleet needs at least one replica, got {replicas}")
        if traffic not in TRAFFIC_MODES:
            raise ValueError(f"unknown traffic mode {traffic!r}: expected one of {', '.join(TRAFFIC_MODES)}")
        if not plan.workloads:
            raise ValueError("the plan has no workloads to simulate")
        self.plan = plan
        self.shape: ReplicaShape = replica_shape(plan)
        if self.shape.num_blocks < 1:
            raise ValueError(f"plan {plan.name!r}: the weights leave no memory for a KV cache")
        self.seed = seed
        self.mode = traffic
        kv_dtype = "fp8" if plan.model.kv_precision == "fp8" else "auto"
        answers = LengthSampler(plan.workloads[0].tokens, self.shape.max_model_len)
        self.replicas = [
            ReplicaServer(
                self.shape,
                index=i,
                port=(base_port + i) if base_port else 0,
                seed=seed * 1000 + i,
                answer_sampler=answers,
                kv_dtype=kv_dtype,
                # Each replica's GPUs on a dcgm-exporter page of their own: after the replicas' ports when given.
                gpu_port=((base_port + replicas + i) if base_port else 0) if gpu_pages else None,
                gpu_name=plan.gpu.name,
            )
            for i in range(replicas)
        ]
        self.speed = speed
        self.rps_scale = rps_scale
        self.burstiness = burstiness
        self.start_week_seconds = start_week_seconds
        self.traffic: TrafficGenerator | None = None
        self._traffic_task: asyncio.Task | None = None
        self._session: aiohttp.ClientSession | None = None
        self._http_targets: list[HttpTarget] = []

    # ---- addresses ----

    @property
    def urls(self) -> list[str]:
        """Base URLs of the replicas (scrape targets take `<url>/metrics`)."""
        return [replica.url for replica in self.replicas]

    @property
    def gpu_urls(self) -> list[str | None]:
        """Each replica's dcgm-exporter page (its GPUs' own counters), in replica order; None where not served."""
        return [replica.gpu_url for replica in self.replicas]

    def replica_addresses(self) -> list[ReplicaAddress]:
        """The replicas as the GPU pairing takes them: each with the pod its GPU page names (`capcon-sim-N`).

        All replicas share 127.0.0.1, so pairing by host cannot tell them apart; the pod label can.
        """
        return [
            ReplicaAddress(target_name(replica.url), HOST, pod=pod_name(replica.index), namespace=NAMESPACE)
            for replica in self.replicas
        ]

    @property
    def metrics_urls(self) -> list[str]:
        return [f"{replica.url}/metrics" for replica in self.replicas]

    # ---- life cycle ----

    async def __aenter__(self) -> SimFleet:
        try:
            for replica in self.replicas:
                await replica.start()
            targets = await self._targets()
            self.traffic = self._generator(targets)
            if self.mode != "off":
                self._traffic_task = asyncio.create_task(self.traffic.run(), name="sim-traffic")
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def send_traffic_to(self, url: str) -> None:
        """Send the plan's traffic as HTTP requests to `url` (a gateway in front of this fleet) from now on.

        For a fleet started with traffic="off": the replicas must be up before a gateway can front them, and
        the traffic must wait for the gateway. The week's clock starts here.
        """
        import aiohttp  # noqa: PLC0415 - only the HTTP mode needs a client

        if self._traffic_task is not None:
            raise RuntimeError("the fleet already sends its traffic")
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=600),
            # No pool limit of its own (aiohttp's default is 100 connections): the generator bounds what is in
            # flight (MAX_HTTP_IN_FLIGHT per target), and a spike must reach the fleet whole.
            connector=aiohttp.TCPConnector(limit=0),
        )
        self._http_targets = [HttpTarget(url, self._session, model=self.shape.model_name)]
        self.traffic = self._generator(self._http_targets)
        self.mode = "http"
        self._traffic_task = asyncio.create_task(self.traffic.run(), name="sim-traffic")

    def _generator(self, targets: Sequence[Target]) -> TrafficGenerator:
        """The plan's traffic onto `targets`, at this fleet's speed, scale, burstiness and start."""
        return TrafficGenerator(
            self.plan.workloads,
            targets,
            min(self.shape.max_model_len, self.shape.kv_capacity_tokens),
            time_scale=self.speed,
            rps_scale=self.rps_scale,
            burstiness=self.burstiness,
            start_week_seconds=self.start_week_seconds,
            seed=self.seed,
        )

    async def _targets(self) -> Sequence[Target]:
        if self.mode != "http":
            return self.replicas
        import aiohttp  # noqa: PLC0415 - only the HTTP mode needs a client

        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=600),
            # No pool limit of its own (aiohttp's default is 100 connections): the generator bounds what is in
            # flight (MAX_HTTP_IN_FLIGHT per target), and a spike must reach the fleet whole.
            connector=aiohttp.TCPConnector(limit=0),
        )
        self._http_targets = [HttpTarget(r.url, self._session) for r in self.replicas]
        return self._http_targets

    async def close(self) -> None:
        """Stop traffic, then every server; safe to call twice.

        Every replica's engine is halted first, at once, so none steps on while the others close;
        then they close together (each waits at most its runner's shutdown timeout, not in turn).
        """
        for replica in self.replicas:
            replica.halt()
        await self.stop_traffic()
        await asyncio.gather(*(replica.stop() for replica in self.replicas))
        await asyncio.gather(*(replica.stop_gpu_page() for replica in self.replicas))

    async def stop_traffic(self) -> None:
        """Send nothing more, and give up what is in flight (a gateway in front sees its clients leave)."""
        if self._traffic_task is not None:
            self._traffic_task.cancel()
            try:
                await self._traffic_task
            except asyncio.CancelledError:
                pass
            self._traffic_task = None
        for target in self._http_targets:
            await target.close()
        self._http_targets = []
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ---- controls ----

    def spike(self, factor: float, seconds: float) -> None:
        if self.traffic is None:
            raise RuntimeError("the fleet sends no traffic before it starts")
        self.traffic.spike(factor, seconds)

    def _replica(self, index: int) -> ReplicaServer:
        if not 0 <= index < len(self.replicas):
            raise ValueError(f"no replica {index}: the fleet has replicas 0 to {len(self.replicas) - 1}")
        return self.replicas[index]

    async def fault(self, index: int, kind: str, factor: float = DEFAULT_SLOW_FACTOR) -> None:
        await self._replica(index).apply_fault(check_kind(kind), factor=factor)

    async def clear_fault(self, index: int, kind: str) -> None:
        await self._replica(index).clear_fault(check_kind(kind))

    async def clear_all_faults(self) -> None:
        for replica in self.replicas:
            for kind in ("down", "slow", "metrics_error", "metrics_hang", "metrics_garbage"):
                await replica.clear_fault(kind)

    def status(self) -> dict:
        """What the fleet is doing now, for a status line: profile time, offered rate, replicas.

        With no traffic running (mode "off": another load generator drives the fleet) it offers
        nothing, whatever rate the plan's profile has at this moment.
        """
        traffic = self.traffic if self._traffic_task is not None else None
        return {
            "traffic": self.mode if traffic is not None else "off",
            "week_time": week_label(traffic.week_seconds()) if traffic else "",
            "offered_rps": traffic.total_rate() if traffic else 0.0,
            "spike": traffic.spike_factor(traffic.now()) if traffic else 1.0,
            "sent": traffic.stats.sent if traffic else 0,
            "dropped": traffic.stats.dropped if traffic else 0,
            "replicas": [replica.snapshot() for replica in self.replicas],
        }
