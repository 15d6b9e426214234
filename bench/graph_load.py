"""Why graph mode's compiled ResNet-50 crashes on load on a GPU: tries, each in its own process.

    python bench/graph_load.py --budget 100        # the attempts below, within 100 s
    python bench/graph_load.py --device cpu --width 8 --image 32 --batch 2 --budget 300

On an H200 (torch 2.11), ``bench/gpu.py graph`` died with a segmentation fault inside
``AOTIModelContainerRunnerCuda`` while loading the library AOTInductor compiled for the
ResNet-50 stand-in at 224x224 (full width: about 100 MB of frozen weights, which the library
embeds, as it does its GPU kernels); the tests' narrow ResNet-50 (width 8, 64x64) compiles,
loads and matches eager. Each attempt here runs in a child process, so a crash is reported
(with the child's faulthandler trace) instead of ending the check, and the next attempt runs:

1. ``reload``: a fresh process loads the library the crashed run left in the graph store
   (``SONNX_CACHE_DIR``, shared with ``bench/gpu.py graph`` in ``scripts/gpu-check.sh``),
   compiling nothing. A crash: the library itself is bad. It loads: the crash needs the
   compiling process's state.
2. ``narrow``: ResNet-50 at width 16 (a sixteenth of the weights) at the crashing image
   size. It loads: the weights' size matters.
3. ``small-image``: the same full-width network (the same weights) compiled at 64x64. It
   loads: the image size (kernels, buffer sizes) matters, not the weights' size.
4. ``mmap-weights``: at the crashing size, with ``aot_inductor.force_mmap_weights`` (the
   weights read from the mapped file at load instead of copied from the library's data).
5. ``consts-object``: at the crashing size, with ``aot_inductor.use_consts_asm_build`` off
   (the weights linked into the library from an object file instead of an assembler
   ``.incbin``); slow to compile (over 220 s on an H100).

Each attempt prints one line, ``graph-load <name>: ok ...``, ``... CRASHED: signal ...`` (with
the child's last lines) or ``... FAILED: exit ...``, with the library's size and seconds; an
attempt the budget cannot hold is reported as not run. The attempts that compile use their own
graph store, and share inductor's cache (its Triton kernels) with the run before them.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: name -> (image side: None for --image, inductor config patches, compiles). On an H100
#: (torch 2.11, 2026-11-27) reload, small-image and mmap-weights crashed as the bench did;
#: consts-object was still compiling after 220 s.
ATTEMPTS: dict[str, tuple[int | None, dict[str, object], bool]] = {
    "reload": (None, {}, False),
    "narrow": (None, {}, True),
    "small-image": (64, {}, True),
    "mmap-weights": (None, {"aot_inductor.force_mmap_weights": True}, True),
    "consts-object": (None, {"aot_inductor.use_consts_asm_build": False}, True),
}
#: The width of ResNet-50 the "narrow" attempt compiles: a quarter of the channels, about a
#: sixteenth of the weights (6 MiB against 100 MiB), to find how the crash follows their size.
NARROW_WIDTH = 16
#: The least time an attempt that compiles is started with.
LEAST_FOR_A_COMPILE_S = 25


def _patch_compile(patches: dict[str, object]) -> None:
    """Have graph mode's AOTInductor compiles use ``patches`` on top of its own options."""
    import torch._inductor.compile_fx as compile_fx
    from torch._inductor import config

    known = config.get_config_copy()
    missing = [k for k in patches if k not in known]
    if missing:
        raise SystemExit(f"this torch's inductor has no option {', '.join(missing)}")
    original = compile_fx.compile_fx_aot

    def patched(model, example_inputs, *args, config_patches=None, **kwargs):
        merged = {**(config_patches or {}), **patches}
        return original(model, example_inputs, *args, config_patches=merged, **kwargs)

    compile_fx.compile_fx_aot = patched


class _NothingStored(BaseException):
    """Raised instead of compiling in ``reload``: a BaseException, so graph mode does not take
    it for inductor's failure (and split the graph to find the step it fails on)."""


def _refuse_compiles() -> None:
    """Have the graph store load what it holds and compile nothing."""
    from sonnx.runtime.store import GraphStore

    def refuse(*args, **kwargs):
        raise _NothingStored

    GraphStore.compile = refuse


def attempt(args: argparse.Namespace) -> None:
    """One attempt, in this process: prepare the network in graph mode, run a batch, compare
    with eager, print what happened."""
    faulthandler.enable()
    import torch

    import sonnx
    from sonnx.device import Device
    from sonnx.tensor import Tensor
    from sonnx.testing import zoo_vision

    image, patches, compiles = ATTEMPTS[args.attempt]
    image = image or args.image
    if compiles:
        _patch_compile(patches)
    else:
        _refuse_compiles()
    dev = Device(args.device)
    torch.manual_seed(0)  # the weights bench/gpu.py's graph section uses
    width = NARROW_WIDTH if args.attempt == "narrow" else args.width
    module = zoo_vision.ResNet50(width=width).eval()
    model = zoo_vision.export_image_model(module, 17, size=image).SerializeToString()
    x = torch.randn(args.batch, 3, image, image, device=dev.torch_device)
    feeds = [Tensor(data=x, requires_grad=False)]
    expected = sonnx.prepare(model, device=dev).run(feeds)[0].data
    start = time.perf_counter()
    rep = sonnx.prepare(model, device=dev, use_graph=True)
    try:
        got = rep.run(feeds)[0].data
    except _NothingStored:
        print(f"graph-load {args.attempt}: nothing stored for this model in SONNX_CACHE_DIR")
        return
    dev.synchronize()
    took = time.perf_counter() - start
    runner = rep.graph_runner
    counts = f"compiled {runner.compile_count}, loaded {runner.loaded_count}"
    if runner.compile_count + runner.loaded_count == 0:
        print(f"graph-load {args.attempt}: no graph compiled or loaded ({runner.fallback})")
        return
    diff = float((got - expected).abs().max())
    shape = f"width {width}, {image}x{image} batch {args.batch}"
    print(
        f"graph-load {args.attempt}: ok at {shape} ({counts}, {took:.1f} s, "
        f"max diff from eager {diff:.1e})"
    )


def _library_sizes(store: Path) -> str:
    sizes = [p.stat().st_size for p in store.glob("graphs/**/*.so")]
    return ", ".join(f"{s / 2**20:.0f} MiB" for s in sizes) or "none stored"


def _signal_name(rc: int) -> str:
    try:
        return f"signal {-rc} ({signal.Signals(-rc).name})"
    except ValueError:
        return f"signal {-rc}"


def run_attempts(args: argparse.Namespace) -> None:
    """Each attempt in a child process, within ``--budget`` seconds."""
    import torch

    print(
        f"graph-load: torch {torch.__version__}, CUDA {torch.version.cuda}; "
        f"ResNet-50 width {args.width}, batch {args.batch}, {args.device}",
        flush=True,
    )
    deadline = time.monotonic() + args.budget
    shared_store = os.environ.get("SONNX_CACHE_DIR")
    for name in args.attempts:
        _, _, compiles = ATTEMPTS[name]
        left = deadline - time.monotonic()
        if left < (LEAST_FOR_A_COMPILE_S if compiles else 5):
            print(f"graph-load {name}: not run ({left:.0f} s of the budget left)", flush=True)
        elif not compiles and shared_store is None:
            print(f"graph-load {name}: not run (no SONNX_CACHE_DIR to reload from)", flush=True)
        elif not compiles:
            _run_child(name, Path(shared_store), left, args)
        else:
            with tempfile.TemporaryDirectory(prefix=f"graph-load-{name}-") as store:
                _run_child(name, Path(store), left, args)


def _run_child(name: str, store: Path, limit: float, args: argparse.Namespace) -> None:
    """Attempt ``name`` in a child process with graph store ``store``; print how it went."""
    command = [sys.executable, __file__, "--attempt", name, *_passed(args)]
    env = dict(os.environ, SONNX_CACHE_DIR=str(store))
    start = time.monotonic()
    try:
        child = subprocess.run(command, env=env, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        print(f"graph-load {name}: TIMED OUT after {limit:.0f} s", flush=True)
        return
    took = time.monotonic() - start
    size = _library_sizes(store)
    lines = (child.stdout + child.stderr).strip().splitlines()
    if child.returncode == 0:
        said = next((ln for ln in lines if ln.startswith("graph-load")), "no report")
        print(f"{said}; library {size}; {took:.0f} s in all", flush=True)
        return
    if child.returncode < 0:
        how = f"CRASHED: {_signal_name(child.returncode)}"
    else:
        how = f"FAILED: exit {child.returncode}"
    print(
        f"graph-load {name}: {how} after {took:.0f} s; library {size}; the child's last lines:",
        flush=True,
    )
    for line in lines[-15:]:
        print(f"    {line}", flush=True)


def _passed(args: argparse.Namespace) -> list[str]:
    return [
        "--device",
        args.device,
        "--width",
        str(args.width),
        "--image",
        str(args.image),
        "--batch",
        str(args.batch),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempt", choices=list(ATTEMPTS), help="run this one attempt here")
    parser.add_argument("--attempts", nargs="+", choices=list(ATTEMPTS), default=list(ATTEMPTS))
    parser.add_argument("--budget", type=float, default=100, help="seconds for all attempts")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--width", type=int, default=64, help="ResNet-50's width (64: real)")
    parser.add_argument("--image", type=int, default=224)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    if args.attempt is not None:
        attempt(args)
    else:
        run_attempts(args)


if __name__ == "__main__":
    main()
