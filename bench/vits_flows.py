"""Graph mode on a VITS duration predictor's flows: graphs compiled, first-run seconds.

    python bench/vits_flows.py --threads 1                  # 4 flows, 10 runs
    python bench/vits_flows.py --flows 2 --compile-all      # every light segment compiled

The stand-in is the tests' ``_NoisyFlows`` (tests/runtime/test_graph_mode_vits.py) with
``--flows`` reversed flows: a noise draw, then per flow a channel flip, a 1x1 convolution and a
spline of boolean-mask reads and writes (five NonZeros a flow). It is prepared in graph mode
without a compile budget and with no graph store (``SONNX_CACHE_DIR=off``), and run at lengths
3-16, batches 1-2 and NonZero counts from none to all. Each row is one run: graphs compiled and
loaded (shared twins) so far, and its seconds; the total line adds the parts that ran eagerly
by why, and the steady time of one run (graph mode and eager) after them. ``--compile-all``
compiles every segment graph mode would time cheap (``WORTH_COMPILING_S = 0``), as it did
before segments were timed (see sonnx.runtime.segment_costs).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from common import pin_threads

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' stand-in

from tests.runtime.test_graph_mode_vits import _NoisyFlows, _ReversedFlow

import sonnx
from sonnx.runtime import segment_costs
from sonnx.tensor import to_numpy
from sonnx.testing import torch_models as tm

#: (batch, tokens, spread of the latents): spread 0.1 puts every latent inside the spline's
#: bound (no count outside), 50 nearly every one outside.
RUNS = [
    (1, 7, 1.5),
    (1, 12, 1.5),
    (2, 5, 1.5),
    (1, 4, 0.1),
    (1, 6, 50.0),
    (2, 8, 50.0),
    (2, 16, 2.0),
    (1, 3, 1.5),
    (2, 9, 0.1),
    (1, 10, 2.0),
]


def flows_model(flows: int) -> bytes:
    """The stand-in with ``flows`` flows, exported (opset 17, batch and length dynamic)."""
    torch.manual_seed(0)
    module = _NoisyFlows()
    module.flows = torch.nn.ModuleList([_ReversedFlow() for _ in range(flows)])
    example = torch.tensor([-3.0, -2.0, -0.5, 0.0, 0.5, 2.0, 3.0]).expand(1, 2, 7)
    axes = {"latents": {0: "batch", 2: "tokens"}, "flowed": {0: "batch", 2: "tokens"}}
    model = tm.export(module, (example,), 17, ["latents"], ["flowed"], dynamic_axes=axes)
    return model.SerializeToString()


def steady_ms(rep: sonnx.SingaRep, x: np.ndarray, repeats: int = 50) -> float:
    """Milliseconds of one run of ``x``, after one untimed."""
    rep.run([x])
    started = time.perf_counter()
    for _ in range(repeats):
        rep.run([x])
    return (time.perf_counter() - started) / repeats * 1e3


def _kind(why: str | None) -> str:
    """A part's kind: compiled, or why it ran eagerly (a timed one's time left out)."""
    if why is None:
        return "compiled"
    return "timed cheap, not worth a compile" if "not worth a compile" in why else why


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flows", type=int, default=4)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--compile-all", action="store_true", help="compile the segments timed cheap too"
    )
    args = parser.parse_args()
    pin_threads(args.threads)
    os.environ["SONNX_CACHE_DIR"] = "off"
    if args.compile_all:
        segment_costs.WORTH_COMPILING_S = 0.0
    warnings.simplefilter("ignore")
    model = flows_model(args.flows)
    graph = sonnx.prepare(model, use_graph=True, compile_budget=None)
    eager = sonnx.prepare(model)
    runner = graph.graph_runner
    rng = np.random.default_rng(0)
    print(f"{'batch':>5} {'tokens':>6} {'spread':>6} {'compiled':>8} {'loaded':>6} {'seconds':>8}")
    total = 0.0
    for batch, tokens, spread in RUNS:
        x = (rng.standard_normal((batch, 2, tokens)) * spread).astype(np.float32)
        started = time.perf_counter()
        got = to_numpy(graph.run([x])[0])
        seconds = time.perf_counter() - started
        total += seconds
        np.testing.assert_allclose(got, to_numpy(eager.run([x])[0]), rtol=1e-5, atol=1e-6)
        print(
            f"{batch:>5} {tokens:>6} {spread:>6} {runner.compile_count:>8} "
            f"{runner.loaded_count:>6} {seconds:>8.1f}"
        )
    eager_parts = Counter(_kind(p.why_eager) for p in runner.parts())
    x = (rng.standard_normal((1, 2, 9)) * 1.5).astype(np.float32)
    print(
        f"total {total:.1f} s, {runner.compile_count} compiled, {runner.loaded_count} loaded; "
        f"steady ms graph {steady_ms(graph, x):.2f}, eager {steady_ms(eager, x):.2f}"
    )
    for why, count in sorted(eager_parts.items(), key=lambda item: item[0]):
        print(f"  {count} parts: {why}")


if __name__ == "__main__":
    main()
