"""A real Prometheus server (Debian's `prometheus` binary) on loopback, scraping given targets.

Own config file, storage in a temporary folder, listening on a free loopback
port; stopped with SIGTERM to its process group.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .processes import Unavailable, free_port, stop_group, wait_until_ready

SCRAPE_INTERVAL_SECONDS = 1.0
JOB = "vllm"
# The same target again under names other vLLM versions and scrapers produce, rewritten at
# scrape time: `vllm_` for `vllm:` (an OpenMetrics scrape, REFERENCE.md 2.3), and the
# pre-0.12 names of KV usage, prefix cache and inter-token latency on top of that.
ESCAPED_JOB = "vllm-escaped"
LEGACY_JOB = "vllm-legacy"
_ESCAPE = [(r"vllm:(.*)", "vllm_${1}")]
_LEGACY = [
    (r"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    (r"vllm:prefix_cache_(hits|queries)_total", "vllm:gpu_prefix_cache_${1}_total"),
    (r"vllm:inter_token_latency_seconds_(bucket|sum|count)", "vllm:time_per_output_token_seconds_${1}"),
    *_ESCAPE,
]


def _job(name: str, targets: list[str], renames: list[tuple[str, str]]) -> str:
    listed = ", ".join(f'"{t}"' for t in targets)
    text = (
        f"  - job_name: {name}\n"
        "    static_configs:\n"
        f"      - targets: [{listed}]\n"
        "        labels:\n"
        "          fleet: capcon-test\n"
    )
    if renames:
        text += "    metric_relabel_configs:\n"
        for regex, replacement in renames:
            text += (
                "      - source_labels: [__name__]\n"
                f"        regex: '{regex}'\n"
                "        target_label: __name__\n"
                f"        replacement: '{replacement}'\n"
            )
    return text


def config_text(
    targets: list[str], interval_seconds: float = SCRAPE_INTERVAL_SECONDS, rule_files: tuple[Path, ...] = ()
) -> str:
    interval = f"{int(interval_seconds * 1000)}ms"
    rules = "rule_files:\n" + "".join(f"  - '{path}'\n" for path in rule_files) if rule_files else ""
    return (
        "global:\n"
        f"  scrape_interval: {interval}\n"
        f"  scrape_timeout: {interval}\n"
        f"  evaluation_interval: {interval}\n"
        + rules
        + "scrape_configs:\n"
        + _job(JOB, targets, [])
        + _job(ESCAPED_JOB, targets, _ESCAPE)
        + _job(LEGACY_JOB, targets, _LEGACY)
    )


@dataclass
class PrometheusServer:
    process: subprocess.Popen
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        stop_group(self.process)


def start_prometheus(
    targets: list[str],
    scratch: Path,
    startup_seconds: float = 60.0,
    rule_files: tuple[Path, ...] = (),
    config: str | None = None,
) -> PrometheusServer:
    """Prometheus scraping `targets` (as three jobs, see above), evaluating `rule_files` every scrape interval;
    or run on `config`, a whole configuration file's text, when given."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise Unavailable("no `prometheus` binary on PATH (Debian: apt-get install prometheus)")
    scratch.mkdir(parents=True, exist_ok=True)
    config_path = scratch / "prometheus.yml"
    config_path.write_text(config if config is not None else config_text(targets, rule_files=rule_files))
    port = free_port()
    log = scratch / "prometheus.log"
    command = [
        binary,
        f"--config.file={config_path}",
        f"--storage.tsdb.path={scratch / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=scratch, start_new_session=True)
    server = PrometheusServer(process, port, log)
    try:
        wait_until_ready(process, server.url + "/-/ready", startup_seconds, log, "Prometheus")
    except BaseException:
        server.stop()
        raise
    return server
