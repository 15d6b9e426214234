"""Timing helpers shared by the benchmarks: thread pinning, interleaved repeats, tables, JSON.

Every benchmark times sonnx and its reference in the same process, alternating them repeat by
repeat (so a burst of load from another process hits both sides alike), after warm-up calls,
and reports the median. The ratio is always ``sonnx time / reference time``: below 1 means
sonnx is faster.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch


def add_common_args(parser: argparse.ArgumentParser, repeats: int = 7, warmup: int = 2) -> None:
    """The flags every benchmark takes: repeats, warm-up, threads, JSON output."""
    parser.add_argument(
        "--repeats", type=int, default=repeats, help="timed calls per side (median is reported)"
    )
    parser.add_argument(
        "--warmup", type=int, default=warmup, help="untimed calls per side before timing"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="intra-op threads for both sides (default: the cores this process may use)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")


def available_cores() -> int:
    """Cores this process may run on (the affinity mask, which containers often narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def pin_threads(threads: int | None) -> int:
    """Give torch ``threads`` intra-op threads (default: every available core); returns it.

    onnxruntime sessions must be created with the same number (see :func:`ort_session`).
    """
    n = threads or available_cores()
    torch.set_num_threads(n)
    return n


def machine_facts(threads: int) -> dict[str, Any]:
    """What the numbers depend on: cores, thread count, library versions."""
    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "available_cores": available_cores(),
        "threads": threads,
        "torch": torch.__version__,
        "torch_parallel": _parallel_backend(),
    }
    try:
        import onnxruntime

        facts["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        facts["onnxruntime"] = None
    import onnx

    facts["onnx"] = onnx.__version__
    facts["load_average"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    return facts


def _parallel_backend() -> str:
    for line in torch.__config__.parallel_info().splitlines():
        if line.startswith("ATen parallel backend"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def ort_session(model_bytes: bytes, threads: int, spinning: bool = False) -> Any:
    """An onnxruntime CPU session with the same intra-op thread count as torch.

    onnxruntime's pool threads keep spinning after ``run`` returns (by default), which would
    steal the cores from the torch call timed next; ``spinning=False`` makes them sleep, as
    torch's OpenMP threads soon do.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


@dataclass
class Timing:
    """Seconds per call of one side: every timed repeat (wall clock and this process's CPU
    time, summed over its threads), and their medians.

    On a shared or virtual machine, time stolen by other tenants inflates the wall clock but
    not the CPU time, so a CPU-time ratio that agrees with the wall-clock ratio is a sign the
    measurement was not disturbed.
    """

    samples: list[float]
    cpu_samples: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu_samples) if self.cpu_samples else float("nan")

    @property
    def spread(self) -> float:
        """Relative half-range of the middle half of the samples: a rough noise figure."""
        if len(self.samples) < 4:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.samples, n=4)
        return (q3 - q1) / 2 / self.median


def time_sides(fns: Sequence[Callable[[], Any]], repeats: int, warmup: int) -> list[Timing]:
    """Warm up every function, then time them in turn ``repeats`` times each.

    The order rotates every repeat, so no side always runs right after the same other one
    (on caches it just cooled, or beside threads it left spinning).
    """
    for _ in range(warmup):
        for fn in fns:
            fn()
    timings = [Timing([]) for _ in fns]
    for i in range(repeats):
        for k in range(len(fns)):
            j = (i + k) % len(fns)
            start, cpu_start = time.perf_counter(), time.process_time()
            fns[j]()
            timings[j].cpu_samples.append(time.process_time() - cpu_start)
            timings[j].samples.append(time.perf_counter() - start)
    return timings


def checked_rows(
    sides: Mapping[str, Callable[[], np.ndarray]],
    label: str,
    repeats: int,
    warmup: int,
    reference: str = "onnxruntime",
) -> tuple[list[Row], list[str]]:
    """Each side's result checked against the reference side's, then every side timed in
    turn (:func:`time_sides`).

    :param sides: the functions by name, the reference among them.
    :param label: the case, in each row's name (``"{side}, M=1"``: ``{side}`` is the side's
        name) and, without ``{side}`` and its separator, before each note.
    :returns: one row per side but the reference, and one note per side giving its largest
        difference from the reference's result.
    """
    expected = sides[reference]()
    prefix = label.replace("{side}", "").strip(", ")
    notes = [
        f"{prefix} {name}: max |difference| from {reference} "
        f"{float(np.abs(fn() - expected).max()):.2e}"
        for name, fn in sides.items()
    ]
    timings = dict(zip(sides, time_sides(list(sides.values()), repeats, warmup), strict=True))
    rows = [
        row_from(label.format(side=name), reference, (timings[name], timings[reference]))
        for name in sides
        if name != reference
    ]
    return rows, notes


def time_pair(
    sonnx_fn: Callable[[], Any], reference_fn: Callable[[], Any], repeats: int, warmup: int
) -> tuple[Timing, Timing]:
    """:func:`time_sides` for sonnx and its reference."""
    ours, theirs = time_sides([sonnx_fn, reference_fn], repeats, warmup)
    return ours, theirs


def time_once(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()``'s result and how long it took in seconds (one-off costs such as set-up)."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


@dataclass
class Row:
    """One benchmark case: sonnx's and the reference's median seconds and their ratio."""

    case: str
    sonnx_s: float
    reference_s: float
    reference: str
    sonnx_spread: float = 0.0
    reference_spread: float = 0.0
    sonnx_cpu_s: float = float("nan")
    reference_cpu_s: float = float("nan")
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.sonnx_s / self.reference_s

    @property
    def cpu_ratio(self) -> float:
        return self.sonnx_cpu_s / self.reference_cpu_s

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "cpu_ratio": self.cpu_ratio}


def row_from(case: str, reference: str, timings: tuple[Timing, Timing], **extra: Any) -> Row:
    ours, theirs = timings
    return Row(
        case,
        ours.median,
        theirs.median,
        reference,
        ours.spread,
        theirs.spread,
        ours.cpu_median,
        theirs.cpu_median,
        extra,
    )


def format_table(rows: Sequence[Row], extra_columns: Sequence[str] = ()) -> str:
    """A fixed-width table: case, both medians in ms (with noise), the wall-clock and CPU-time
    ratios, the reference's name, then the extra columns."""
    head = (
        f"{'case':<34} {'sonnx ms':>12} {'reference ms':>13} {'ratio':>6} {'cpu':>6}  "
        f"{'reference':<22}" + "".join(f" {c:>14}" for c in extra_columns)
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.case:<34} {_ms(r.sonnx_s, r.sonnx_spread):>12} "
            f"{_ms(r.reference_s, r.reference_spread):>13} {r.ratio:>6.3f} "
            f"{_cell(r.cpu_ratio):>6}  {r.reference:<22}"
            + "".join(f" {_cell(r.extra.get(c)):>14}" for c in extra_columns)
        )
    return "\n".join(lines)


def _ms(seconds: float, spread: float) -> str:
    return f"{seconds * 1e3:.1f}±{spread * 100:.0f}%"


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.3f}" if 0.01 <= abs(value) < 100 else f"{value:.3g}"
    return str(value)


def format_facts(facts: dict[str, Any]) -> str:
    return "\n".join(f"  {k:<16} {v}" for k, v in facts.items())


def emit(
    title: str,
    facts: dict[str, Any],
    settings: dict[str, Any],
    rows: Sequence[Row],
    as_json: bool,
    extra_columns: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> None:
    """Print the report as a table (with machine facts and settings) or as one JSON object."""
    if as_json:
        report = {
            "benchmark": title,
            "machine": facts,
            "settings": settings,
            "rows": [r.as_dict() for r in rows],
            "notes": list(notes),
        }
        print(json.dumps(report))
        return
    print(f"== {title} ==")
    print("machine:")
    print(format_facts(facts))
    print("settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    print(
        "ratio = sonnx time / reference time (< 1: sonnx is faster); ms are wall-clock medians "
        "± IQR/2; cpu = the same ratio of process CPU time (robust to time stolen by other "
        "tenants)"
    )
    print(format_table(rows, extra_columns))
    for note in notes:
        print(f"note: {note}")
    sys.stdout.flush()
