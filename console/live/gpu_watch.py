"""The fleet's GPUs, watched beside its replicas: each poll reads its dcgm-exporter pages once.

The pages are read directly (console.sources.dcgm: concurrent, each within the poll's timeout,
size-capped); a page that fails leaves its GPUs out of this poll (the replicas they serve read
unknown) and is named in the view, never failing the poll. The pairing of GPUs with replicas
is the pure view's (console.fleet.gpu_view); this side only reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from console.errors import UserError
from console.fleet.gpu_view import GpuPages
from console.sources.dcgm import DcgmSource
from console.targets import TARGET_EXPECTED, checked_url, masked_target


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
    ) -> None:
        self.source = DcgmSource([dcgm_url(u) for u in urls], timeout=timeout)
        self.pods = dict(pods or {})  # replica name -> (pod, namespace), where the caller knows it

    async def poll(self) -> GpuPages:
        results = await self.source.fetch()
        return GpuPages(
            gpus=tuple(g for r in results for g in r.gpus),
            pages=len(results),
            errors=tuple(f"{r.url}: {r.error}" for r in results if r.error),
            pods=self.pods,
        )

    async def aclose(self) -> None:
        await self.source.aclose()
