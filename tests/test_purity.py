"""The pure core imports no UI, network or storage library (DESIGN.md: the one-way pipeline)."""

import subprocess
import sys

import pytest

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


@pytest.mark.parametrize("module", _pure_modules())
def test_pure_module_imports_nothing_impure(module):
    code = (
        f"import sys, importlib; importlib.import_module({module!r}); "
        f"print(','.join(m for m in {FORBIDDEN!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{module} pulls in {out.stdout.strip()}"
