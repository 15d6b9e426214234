"""Graph mode across input shapes: how many compiles, how long, and graph == eager.

    python bench/graph_shapes.py --threads 1                 # every zoo stand-in
    python bench/graph_shapes.py --threads 1 --models bert-int8 dbnet --batches 1 8

Each zoo stand-in (``bench/infer.py``'s sizes: ``--image``, ``--det-sizes``, ``--rec-widths``,
``--qbert-seqs``) is prepared once in graph mode and run at every batch size of every size
variant, in that order. Each row is one first run at a new shape: the graphs compiled by it
(``new``) or loaded from the graph store (``loaded``), its seconds (trace + compile + run, or
load + run), and the largest |graph - eager| over the outputs. A second invocation with the
same ``SONNX_CACHE_DIR`` loads what the first compiled (see also ``bench/cold_start.py``).
``--per-shape`` compiles every input shape on its own, as graph mode did before shapes were
traced symbolically.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from common import add_common_args, pin_threads
from infer import ZOO, build

import sonnx
from sonnx import autograd, tensor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=ZOO, default=list(ZOO), metavar="MODEL")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument(
        "--image", type=int, default=64, help="classifier side (fixed in their files)"
    )
    parser.add_argument("--det-sizes", nargs="+", default=["320x320", "480x640"])
    parser.add_argument("--rec-widths", nargs="+", type=int, default=[160, 320])
    parser.add_argument("--qbert-seqs", nargs="+", type=int, default=[16, 128])
    parser.add_argument(
        "--per-shape", action="store_true", help="compile per input shape (no symbolic sizes)"
    )
    add_common_args(parser)
    args = parser.parse_args()
    pin_threads(args.threads)
    sonnx.tune_process_for_serving()  # as a server would (both sides alike)
    autograd.training = False
    print(
        f"{'model':<12} {'shape':<14} {'batch':>5} {'new':>4} {'loaded':>6} {'seconds':>8} "
        f"{'max diff':>9}"
    )
    for name in args.models:
        spec = build(name, args)
        eager = sonnx.prepare(spec.onnx_bytes)
        graph = sonnx.prepare(spec.onnx_bytes, use_graph=True)
        runner = graph.graph_runner
        runner.dynamic = not args.per_shape
        total, count, loads = 0.0, 0, 0
        for label, make in spec.variants.items():
            for batch in spec.batches:
                feed = make(batch)
                arrays = [feed[n] for n in eager.inputs]
                expected = [tensor.to_numpy(t) for t in eager.run(arrays)]
                started = time.perf_counter()
                got = [tensor.to_numpy(t) for t in graph.run(arrays)]
                seconds = time.perf_counter() - started
                diff = max(
                    float(np.abs(g - e).max()) if g.size else 0.0
                    for g, e in zip(got, expected, strict=True)
                )
                new, count = runner.compile_count - count, runner.compile_count
                loaded, loads = runner.loaded_count - loads, runner.loaded_count
                total += seconds
                print(
                    f"{name:<12} {label:<14} {batch:>5} {new:>4} {loaded:>6} {seconds:>8.2f} "
                    f"{diff:>9.2e}"
                )
        fallback = runner.fallback or "all compiled"
        print(f"{name:<12} total: {count} compiles, {loads} loads, {total:.1f} s; {fallback}")


if __name__ == "__main__":
    main()
