"""One fleet's polls turned into views and history records: the step the console, `capcon record` and
`capcon watch --once --db` all take, so flag changes (raised, cleared) are recorded the same way everywhere.

It keeps the previous view (trends and flags carry over); without a recorder it only builds views.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from console.ahead.profile import plan_profile
from console.fleet.flags import changes
from console.fleet.gpu_view import GpuPages
from console.fleet.view import FleetView, advance
from console.live.gateways import GatewayView, GatewayWatch
from console.live.gpu_watch import GpuWatch, through_prometheus
from console.live.handle import FleetHandle
from console.live.watcher import Poll
from console.plan.model import Plan
from console.store.checkpoints import CHECKPOINT_POLLS
from console.store.records import FlagChange, PollRecord, PollState


class Recorder(Protocol):
    """What the feed hands its records to (console.store.recorder.Recorder): it never blocks a poll."""

    def submit(self, record: PollRecord) -> object: ...


def gateway_watch(handle: FleetHandle, timeout: float = 2.0) -> GatewayWatch | None:
    """The watch of the gateways in front of `handle`'s fleet, over the fleet's window; None without any."""
    if not handle.gateways:
        return None
    return GatewayWatch(handle.gateways, handle.watcher.window_seconds or 60.0, timeout=timeout)


def gpu_watch(handle: FleetHandle) -> GpuWatch | None:
    """The watch of the fleet's dcgm-exporter pages, bounded by the fleet's timeout (or its series in the
    fleet's Prometheus, by `dcgm_selector`); None without any."""
    pods = {name: (pod, namespace) for name, pod, namespace in handle.replica_pods}
    indices = dict(handle.replica_gpu_indices)
    if handle.dcgm_selector is not None:
        return through_prometheus(handle.watcher.source, handle.dcgm_selector, pods, indices)
    if not handle.dcgm:
        return None
    return GpuWatch(handle.dcgm, timeout=handle.dcgm_timeout, pods=pods, gpu_indices=indices)


class PollFeed:
    def __init__(
        self,
        handle: FleetHandle,
        recorder: Recorder | None = None,
        checkpoint_every: int = CHECKPOINT_POLLS,
        gateways: GatewayWatch | None = None,
        gpus: GpuWatch | None = None,
    ) -> None:
        self.handle = handle
        self.recorder = recorder
        self.previous: FleetView | None = None
        self.recorded = 0
        self.checkpoint_every = checkpoint_every
        # The gateways in front of the fleet, read in the same step as its replicas (console.live.loop), so
        # the view judges the plan's latency targets on what the clients saw over the same window.
        self.gateways = gateways
        self.gateway_view: GatewayView | None = None  # the last read of them, for the overflow panel
        # The fleet's GPU pages, read in the same step too: made from the handle's when not given.
        self.gpus = gpus if gpus is not None else gpu_watch(handle)

    async def aclose(self) -> None:
        """Closes the fleet's sources: its replicas', its gateways' and its GPU pages'."""
        try:
            await self.handle.watcher.aclose()
        finally:
            try:
                if self.gateways is not None:
                    await self.gateways.aclose()
            finally:
                if self.gpus is not None:
                    await self.gpus.aclose()

    def add(
        self, poll: Poll, now: float, gateway_view: GatewayView | None = None, gpu_pages: GpuPages | None = None
    ) -> FleetView:
        """The view of this poll (as the console builds it at `now`), handed to the recorder; `gateway_view`:
        the fleet's gateways read in the same step; `gpu_pages`: its dcgm-exporter pages, likewise.

        Every `checkpoint_every` records carry the state after the poll (flags, trends, the watcher's
        samples), which the store keeps as a replay checkpoint: a jump then computes a few polls.
        """
        handle = self.handle
        plan_clock = handle.plan_time(now)
        # What the plan expects over the next half hour, for the view's forecast (console.ahead).
        profile = plan_profile(handle.plan, plan_clock) if handle.plan is not None and plan_clock is not None else None
        self.gateway_view = gateway_view
        gateway = gateway_view.figures if gateway_view is not None else None
        view = advance(
            self.previous,
            handle.name,
            poll.figures,
            handle.plan_at(now),
            now,
            profile=profile,
            gateway=gateway,
            gpus=gpu_pages,
        )
        if self.recorder is not None:
            record = poll_record(handle.name, poll, self.previous, view, handle.plan, handle.plan_time(view.now))
            self.recorded += 1
            if self.recorded % self.checkpoint_every == 0:
                # Taken now, on the poll's own step: the watcher moves on with the next poll.
                memory = handle.watcher.memory() if poll.results is not None else None
                record = replace(record, state=PollState(view.trends, view.flag_state, memory))
            self.recorder.submit(record)
        self.previous = view
        return view


def poll_record(
    fleet: str,
    poll: Poll,
    previous: FleetView | None,
    view: FleetView,
    plan: Plan | None,
    plan_clock: float | None = None,
) -> PollRecord:
    """What to store for one poll: its raw results and `now`, and the view's flag changes.

    `previous` and `view` are the FleetViews before and after this poll.
    """
    flag_changes = []
    for change, flag in changes(previous.flag_state if previous is not None else None, view.flag_state):
        row = view.row(flag.subject)
        flag_changes.append(FlagChange(change, flag, row.figures if row is not None else None))
    return PollRecord(
        fleet=fleet,
        at=view.now,
        watched_at=poll.watched_at,
        source=view.figures.source,
        window_seconds=poll.window_seconds,
        interval_seconds=poll.interval_seconds,
        results=poll.results,
        figures=view.figures if poll.results is None else None,
        plan=plan,
        flag_changes=tuple(flag_changes),
        source_error=view.figures.source_error,
        plan_clock=plan_clock,
    )
