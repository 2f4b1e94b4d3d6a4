"""Fits the simulator's GPU counter model to a reading of a real GPU, and with --write keeps it.

    python scripts/gpu_calibration.py READING.json                 # the fit, phase by phase, and its caveats
    python scripts/gpu_calibration.py READING.json --json          # the same as JSON
    python scripts/gpu_calibration.py READING.json --write         # also rewrite console/sim/gpu_calibration.py
    python scripts/gpu_calibration.py READING.json --bandwidth-tbps 3.35 --tflops 989   # a GPU not in the catalog

READING is the JSON the reading script writes on a GPU machine (docs/sim.md, 'Calibrating the GPU counters'):
its counters at known workloads and what each workload achieved. The datasheet figures come from the plan's
GPU catalog by the device's name unless given. The fitting is console/sim/gpu_fit.py's; this reads and writes.

Exit codes: 0 fitted (a factor without a reading stays ideal, and the report says why); 1 --write refused
(nothing fitted, or the target holds no calibrated block); 2 a missing or unreadable file, one that is not JSON
or not the reading's shape (one line saying what, where, and what was expected), or a bad option.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from console.sim.gpu_fit import (
    ReadingError,
    datasheet_for,
    fit_reading,
    parse_reading,
    report_json,
    report_lines,
    with_calibrated,
)

MODULE = ROOT / "console" / "sim" / "gpu_calibration.py"


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}")
    return value


def day(text: str) -> str:
    try:
        return datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC).date().isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a date YYYY-MM-DD, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu_calibration.py",
        description="Fit the simulator's GPU counter model (DRAM, tensor and SM active) to a reading of a real GPU.",
    )
    parser.add_argument("reading", metavar="FILE", help="the reading script's JSON")
    parser.add_argument(
        "--bandwidth-tbps", type=positive, metavar="TBPS", help="datasheet memory bandwidth, TB/s (else the catalog's)"
    )
    parser.add_argument(
        "--tflops", type=positive, metavar="TFLOPS", help="datasheet dense bf16 TFLOP/s (else the catalog's)"
    )
    parser.add_argument("--json", action="store_true", help="print the fit as JSON")
    parser.add_argument("--write", action="store_true", help="keep the fitted model in the simulator")
    parser.add_argument(
        "--into",
        type=Path,
        default=MODULE,
        metavar="PATH",
        help="the module --write rewrites (default: the simulator's own)",
    )
    parser.add_argument(
        "--read-on",
        type=day,
        metavar="YYYY-MM-DD",
        help="the day the reading was taken, for the provenance (default today)",
    )
    return parser


def load(path: str) -> object:
    """The file's JSON; ReadingError with one line when it cannot be had."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ReadingError("no such file; expected the reading script's JSON") from None
    except IsADirectoryError:
        raise ReadingError("a directory; expected the reading script's JSON") from None
    except OSError as error:
        raise ReadingError(f"cannot be read ({error.strerror}); expected the reading script's JSON") from None
    if not data.strip():
        raise ReadingError("empty; expected the reading script's JSON")
    try:
        return json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise ReadingError("not UTF-8 text; expected the reading script's JSON") from None
    except json.JSONDecodeError as error:
        raise ReadingError(
            f"not JSON (line {error.lineno} column {error.colno}: {error.msg}); expected the reading script's JSON"
        ) from None
    except ValueError as error:  # a number Python will not convert (an integer of thousands of digits)
        raise ReadingError(f"not JSON this program reads ({str(error).split(':')[0]})") from None
    except RecursionError:
        raise ReadingError("not JSON this program reads (nested too deeply)") from None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        reading = parse_reading(load(args.reading))
        datasheet = datasheet_for(reading.device, args.bandwidth_tbps, args.tflops)
    except ReadingError as error:
        print(f"{args.reading}: {error}", file=sys.stderr)
        return 2
    fit = fit_reading(reading, datasheet)
    read_on = args.read_on or datetime.now(UTC).date().isoformat()
    if args.json:
        print(json.dumps(report_json(fit, read_on), indent=2))
    else:
        print("\n".join(report_lines(fit, read_on)))
    if not args.write:
        return 0
    if not any(factor.fitted for factor in fit.factors):
        print("not written: no factor was fitted, so the model stays as it is", file=sys.stderr)
        return 1
    model = fit.model(read_on)
    try:
        current = args.into.read_text(encoding="utf-8")
        updated = with_calibrated(current, model)
    except OSError as error:
        print(f"not written: {args.into}: cannot be read ({error.strerror})", file=sys.stderr)
        return 1
    except ValueError as error:
        print(f"not written: {args.into}: {error}", file=sys.stderr)
        return 1
    args.into.write_text(updated, encoding="utf-8")
    print(f"written: {args.into.name} now holds this model", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
