"""The fleet's GPUs, watched beside its replicas: each poll reads its dcgm-exporter pages once.

The pages are read directly (console.sources.dcgm: concurrent, each within the poll's timeout,
size-capped), or, for a fleet watched through Prometheus, as series from that same Prometheus
(console.sources.dcgm_prometheus, `--dcgm-selector`), with the replicas' pod labels beside
them. A page or query that fails leaves its GPUs out of this poll (the replicas they serve read
unknown) and is named in the view, never failing the poll. The pairing of GPUs with replicas
is the pure view's (console.fleet.gpu_view); this side only reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from console.errors import UserError
from console.fleet.gpu_view import GpuPages
from console.sources.dcgm import DcgmSource
from console.targets import TARGET_EXPECTED, checked_url, masked_target

if TYPE_CHECKING:
    from console.sources.dcgm_prometheus import DcgmPrometheusSource  # loaded only for a fleet read through Prometheus


def dcgm_url(text: str, named: str = "--dcgm") -> str:
    """A dcgm-exporter page's URL: host:port (its /metrics) or a full URL, by the one address rule."""
    try:
        url = checked_url(text)
    except ValueError as problem:
        raise UserError(f"{named} {masked_target(text)!r}: {problem}; expected {TARGET_EXPECTED}") from None
    scheme, _, rest = url.partition("://")
    return url if "/" in rest else f"{scheme}://{rest}/metrics"


class GpuWatch:
    def __init__(
        self,
        urls: Sequence[str],
        timeout: float = 2.0,
        pods: Mapping[str, tuple[str, str | None]] | None = None,
        through: DcgmPrometheusSource | None = None,
        clock: Callable[[], float] = time.time,
        gpu_indices: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        # `through`: the fleet's Prometheus holds the GPUs' series (the URLs are then not read).
        self.through = through
        self.source: DcgmSource | DcgmPrometheusSource = (
            through if through is not None else DcgmSource([dcgm_url(u) for u in urls], timeout=timeout)
        )
        self.pods = dict(pods or {})  # replica name -> (pod, namespace), where the caller knows it
        self.gpu_indices = dict(gpu_indices or {})  # replica name -> its GPUs on its host, where the plan names them
        self.clock = clock  # the instant a Prometheus query is evaluated at

    async def poll(self) -> GpuPages:
        if self.through is not None:
            read = await self.through.fetch(self.clock())
            return GpuPages(
                gpus=read.gpus,
                pages=read.exporters,
                errors=read.errors,
                pods={**read.pods, **self.pods},  # what the caller knows wins over the labels
                gpu_indices=self.gpu_indices,
            )
        assert isinstance(self.source, DcgmSource)
        results = await self.source.fetch()
        return GpuPages(
            gpus=tuple(g for r in results for g in r.gpus),
            pages=len(results),
            errors=tuple(f"{r.url}: {r.error}" for r in results if r.error),
            pods=self.pods,
            gpu_indices=self.gpu_indices,
        )

    async def aclose(self) -> None:
        await self.source.aclose()


def through_prometheus(
    source: object,
    selector: str,
    pods: Mapping[str, tuple[str, str | None]] | None = None,
    gpu_indices: Mapping[str, tuple[str, ...]] | None = None,
) -> GpuWatch:
    """The GPUs' series read from the fleet's own Prometheus source (`--dcgm-selector`), matched by `selector`."""
    from console.sources.dcgm_prometheus import DcgmPrometheusSource  # noqa: PLC0415 - only a Prometheus fleet
    from console.sources.prometheus import PrometheusSource  # noqa: PLC0415

    if not isinstance(source, PrometheusSource):
        raise UserError(
            "--dcgm-selector: the GPUs' series are read through the fleet's Prometheus; "
            "expected --source prometheus (or --dcgm URL to read dcgm-exporter directly)"
        )
    return GpuWatch((), pods=pods, through=DcgmPrometheusSource(source, selector), gpu_indices=gpu_indices)
