"""Cold start: a new process's first graph-mode run of a model an earlier process compiled.

    python bench/cold_start.py --threads 1        # resnet50 mobilenetv3 yolov8 dbnet bert-int8
    python bench/cold_start.py --models yolov8 --store /tmp/graphs   # keep the store

For each zoo stand-in (``bench/infer.py``'s, at its first size), two processes run one after
the other with the same ``SONNX_CACHE_DIR`` (a new temporary directory unless ``--store``):
each imports sonnx, ``prepare(path, use_graph=True)`` and runs once at batch 1. The first
traces, compiles and stores; the second should load. A third process compiles again into a
store of its own with ``verify=False``: the difference between its first run and the first
process's is the cost of the first-run check (one eager run per new graph; ``verify``
column). Columns: seconds to import sonnx (as a
program does, torch with it), to prepare, the first run, their sum, graphs compiled / loaded by
that run, and the next run in ms; ``torch_s`` is how long numpy and torch alone take to import
in a process started just before (the part of the import that is not sonnx's).
Target (issue 11): the second process's first run <= 3 s from its start (``total_s``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COLD_START_MODELS = ["resnet50", "mobilenetv3", "yolov8", "dbnet", "bert-int8"]


def child(model: Path, feeds: Path, threads: int | None, verify: bool) -> None:
    """One process's cold start, printed as one JSON line."""
    started = time.perf_counter()
    import sonnx

    imported = time.perf_counter() - started
    sonnx.tune_process_for_serving()  # as a server would, after its import
    import numpy as np
    import torch

    if threads:
        torch.set_num_threads(threads)
    with np.load(feeds) as data:
        arrays = {name: data[name] for name in data.files}
    started = time.perf_counter()
    rep = sonnx.prepare(str(model), use_graph=True, verify=verify)
    prepared = time.perf_counter() - started
    inputs = [arrays[name] for name in rep.inputs]
    started = time.perf_counter()
    rep.run(inputs)
    first = time.perf_counter() - started
    started = time.perf_counter()
    rep.run(inputs)
    second = time.perf_counter() - started
    runner = rep.graph_runner
    print(
        json.dumps(
            {
                "import_s": imported,
                "prepare_s": prepared,
                "first_run_s": first,
                "compiled": runner.compile_count,
                "loaded": runner.loaded_count,
                "next_run_ms": second * 1000,
            }
        )
    )


#: A process that imports numpy and torch only and prints how long that took.
TORCH_ALONE = (
    "import time; started = time.perf_counter(); import numpy, torch; "
    "print(time.perf_counter() - started)"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=COLD_START_MODELS, metavar="MODEL")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--store", default=None, help="SONNX_CACHE_DIR to use (default: new)")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "FEEDS"), help=argparse.SUPPRESS)
    parser.add_argument("--no-verify", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), Path(args.child[1]), args.threads, not args.no_verify)
        return

    import numpy as np
    from infer import ZOO, build

    work = Path(tempfile.mkdtemp(prefix="sonnx-cold-"))
    store = args.store or str(work / "store")
    env = {**os.environ, "SONNX_CACHE_DIR": store}
    unverified_env = {**os.environ, "SONNX_CACHE_DIR": str(work / "store-unverified")}
    defaults = argparse.Namespace(
        batches=[1], image=224, det_sizes=["320x320"], rec_widths=[320], qbert_seqs=[128]
    )
    print(f"store: {store}")
    print(
        f"{'model':<12} {'process':>7} {'verify':>6} {'import_s':>8} {'torch_s':>7} "
        f"{'prepare_s':>9} {'first_s':>8} {'total_s':>8} {'compiled':>8} {'loaded':>6} "
        f"{'next_ms':>8}"
    )
    for name in args.models:
        if name not in ZOO:
            parser.error(f"unknown model {name!r}; choose from {', '.join(ZOO)}")
        spec = build(name, defaults)
        model, feeds = work / f"{name}.onnx", work / f"{name}.npz"
        model.write_bytes(spec.onnx_bytes)
        np.savez(feeds, **next(iter(spec.variants.values()))(1))
        command = [sys.executable, __file__, "--child", str(model), str(feeds)]
        if args.threads:
            command += ["--threads", str(args.threads)]
        runs = [(1, True, command, env), (2, True, command, env)]
        runs.append((3, False, [*command, "--no-verify"], unverified_env))
        for process, verify, argv, environment in runs:
            probe = subprocess.run(
                [sys.executable, "-c", TORCH_ALONE], capture_output=True, text=True, check=True
            )
            torch_s = float(probe.stdout)
            done = subprocess.run(argv, capture_output=True, text=True, env=environment)
            if done.returncode != 0:
                print(f"{name:<12} {process:>7} failed:\n{done.stderr[-2000:]}")
                break
            r = json.loads(done.stdout.strip().splitlines()[-1])
            total = r["import_s"] + r["prepare_s"] + r["first_run_s"]
            print(
                f"{name:<12} {process:>7} {'on' if verify else 'off':>6} {r['import_s']:>8.2f} "
                f"{torch_s:>7.2f} "
                f"{r['prepare_s']:>9.2f} {r['first_run_s']:>8.2f} {total:>8.2f} "
                f"{r['compiled']:>8} {r['loaded']:>6} {r['next_run_ms']:>8.1f}"
            )


if __name__ == "__main__":
    main()
