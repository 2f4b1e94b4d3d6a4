"""Every verb starts at once: reading the arguments loads none of what a verb needs to run.

`capcon --version`, `capcon --help` and `capcon VERB --help` build the whole parser (every verb's
`add_parser`); a verb's `run` imports the network, storage, YAML, event loop and exporters it uses.
Checked in a fresh interpreter by what is in sys.modules, not by timing (benchmarks/bench_startup.py
measures the CPU time).
"""

from __future__ import annotations

import json
import subprocess
import sys

from console.cli import VERBS

# What the parser must not load: each of these costs tens of milliseconds or more at start-up.
HEAVY = (
    "httpx",
    "httpcore",
    "aiohttp",
    "sqlite_utils",
    "textual",
    "rich",
    "prometheus_client",
    "prometheus_api_client",
    "ruamel",
    "yaml",
    "uvloop",
    "asyncio",
    "console.bench.estimate",
    "console.engines",
    "console.plan.schema",
    "console.sources",
    "console.sim",
    "console.tui",
)

# Each stage runs in the same fresh interpreter, in order; after each, the heavy modules loaded so far.
PROBE = """
import contextlib, io, json, sys
HEAVY = {heavy!r}
def loaded():
    return sorted(h for h in HEAVY if any(m == h or m.startswith(h + ".") for m in sys.modules))
seen = {{}}
import console.cli
console.cli.build_parser()
seen["build_parser"] = loaded()
for words in {argvs!r}:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            console.cli.main(words)
        except SystemExit:
            pass
    seen[" ".join(words)] = loaded()
print(json.dumps(seen))
"""


def _loaded_by_stage(argvs: list[list[str]]) -> dict[str, list[str]]:
    code = PROBE.format(heavy=HEAVY, argvs=argvs)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout)


def test_reading_the_arguments_loads_nothing_a_verb_needs_to_run():
    argvs = [["--version"], ["--help"]] + [[verb, "--help"] for verb in VERBS] + [["overflow", "status", "--help"]]
    seen = _loaded_by_stage(argvs)
    assert set(seen) == {"build_parser", *(" ".join(words) for words in argvs)}  # every stage ran
    loaded = {stage: modules for stage, modules in seen.items() if modules}
    assert loaded == {}, f"heavy modules loaded before any verb ran: {loaded}"


def test_the_probe_sees_a_heavy_module_when_one_is_loaded():
    # The check above is only worth something if the probe notices an import: a verb's run does load them.
    code = PROBE.format(heavy=HEAVY, argvs=[]).replace("seen = {}", "import yaml, asyncio\nseen = {}")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout)["build_parser"] == ["asyncio", "yaml"]
