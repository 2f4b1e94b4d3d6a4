"""Real vLLM pages for tests, and a way to move one forward in time by a known load.

The captures are the project's own test data, in tests/fixtures/vllm (its README says
where each came from).
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "tests" / "fixtures" / "vllm"

V032_IDLE = "vllm-0.32.0-cpu_tiny-llama_idle-after-load.txt"
V032_SMALL_KV = "vllm-0.32.0-cpu_tiny-llama_small-kv.txt"
V010 = "vllm-0.10.0_glm45_production-stack-617.txt"
V08_MODEL_NAME_ONLY = "vllm-0.7-0.8.1_v1-model_name-only_production-stack-318.txt"
V08_CACHE_CONFIG = "vllm-0.8.2-0.8.4_cache_config_info_vllm-16560.txt"
ALL_SAMPLES = (V032_IDLE, V032_SMALL_KV, V010, V08_MODEL_NAME_ONLY, V08_CACHE_CONFIG)


def sample_text(name: str) -> str:
    return (SAMPLES / name).read_text()


EXCERPT_BREAK = "# ---- (non-contiguous"


def whole_window(name: str) -> str:
    """A page as far as it is whole: an excerpt posted in an issue up to its first gap.

    The 0.10 excerpt's second window starts inside a histogram (no +Inf bucket, no _count):
    read as one page it is a page cut short, which capcon refuses.
    """
    text = sample_text(name)
    return text.split(EXCERPT_BREAK)[0] if EXCERPT_BREAK in text else text


_LINE = re.compile(r"^(?P<series>(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?) (?P<value>\S+)$", re.M)


def _le(labels: str) -> float | None:
    found = re.search(r'le="([^"]+)"', labels or "")
    return float(found.group(1)) if found else None


def advance(
    text: str,
    counters: dict[str, float] | None = None,
    observations: dict[str, list[float]] | None = None,
    gauges: dict[str, float] | None = None,
    where: str = "",
) -> str:
    """The page after a known load: counters increased, histogram observations added, gauges set.

    `counters` maps a sample name (e.g. "vllm:prompt_tokens_total") to an increase;
    `observations` maps a histogram family to the values observed; `gauges` sets a
    gauge's value. Only series whose label text contains `where` change.
    """
    counters = counters or {}
    observations = observations or {}
    gauges = gauges or {}

    def change(match: re.Match) -> str:
        name, labels, value = match["name"], match["labels"] or "", float(match["value"])
        if where not in labels:
            return match[0]
        if name in counters:
            value += counters[name]
        elif name in gauges:
            value = gauges[name]
        else:
            for family, values in observations.items():
                if name == family + "_bucket":
                    value += sum(1 for v in values if v <= _le(labels))
                elif name == family + "_count":
                    value += len(values)
                elif name == family + "_sum":
                    value += sum(values)
        return f"{match['series']} {value!r}"

    return _LINE.sub(change, text)


def data_parallel(text: str, engines: int) -> str:
    """The page a data-parallel server with `engines` engines shows: every engine-0 series repeated per engine."""
    lines = []
    for line in text.splitlines():
        lines.append(line)
        if not line.startswith("#") and 'engine="0"' in line:
            lines.extend(line.replace('engine="0"', f'engine="{engine}"') for engine in range(1, engines))
    return "\n".join(lines) + "\n"


def relabel(text: str, family: str, where: str = "", **labels: str) -> str:
    """The page with label values of `family`'s series set (the label added if absent), where the label text contains `where`."""

    def change(match: re.Match) -> str:
        if match["name"] != family or where not in (match["labels"] or ""):
            return match[0]
        current = match["labels"] or ""
        for key, value in labels.items():
            pair = f'{key}="{value}"'
            current, found = re.subn(rf'(?<![\w]){key}="[^"]*"', pair, current)
            if not found:
                current = f"{current},{pair}" if current else pair
        return f"{family}{{{current}}} {match['value']}"

    return _LINE.sub(change, text)
