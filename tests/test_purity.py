"""The pure core imports no UI, network or storage library (DESIGN.md: the one-way pipeline)."""

import json
import subprocess
import sys

PURE_PACKAGES = [
    "console.plan",
    "console.metrics",
    "console.fleet",
    "console.overflow",
    "console.ahead",
    "console.engines",
]
FORBIDDEN = ["textual", "rich", "httpx", "sqlite3", "sqlite_utils", "aiohttp", "prometheus_api_client", "requests"]


def _pure_modules() -> list[str]:
    import importlib
    import pkgutil

    names = []
    for package in PURE_PACKAGES:
        module = importlib.import_module(package)
        names.append(package)
        for info in pkgutil.iter_modules(module.__path__):
            names.append(f"{package}.{info.name}")
    return names


# One fresh interpreter imports the pure modules one after another and names, for each, what it brought in that
# the ones before it had not: a forbidden module is blamed on the first pure module that loads it, as a separate
# interpreter per module would find (one interpreter instead of fifty: a few seconds of the suite's CPU).
PROBE = """
import importlib, json, sys
forbidden, found = json.loads(sys.argv[1]), {}
for name in json.loads(sys.argv[2]):
    importlib.import_module(name)
    pulled = [m for m in forbidden if m in sys.modules and not any(m in seen for seen in found.values())]
    found[name] = pulled
print(json.dumps(found))
"""


def test_no_pure_module_imports_anything_impure():
    modules = _pure_modules()
    out = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(FORBIDDEN), json.dumps(modules)],
        capture_output=True,
        text=True,
        check=True,
    )
    found = json.loads(out.stdout)
    assert list(found) == modules  # every module was imported
    assert {name: pulled for name, pulled in found.items() if pulled} == {}


def test_the_probe_names_the_module_that_pulls_one_in():
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE,
            json.dumps(["sqlite3"]),
            json.dumps(["console.plan.model", "console.store.schema"]),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout) == {"console.plan.model": [], "console.store.schema": ["sqlite3"]}
