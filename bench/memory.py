"""Memory: the resident memory a model takes in sonnx against onnxruntime, each side alone.

    python bench/memory.py                    # a ~45M-parameter llama (fp32) and a ResNet-50
    python bench/memory.py --models llama     # one of them
    python bench/memory.py --graph            # graph mode too (its run compiles: slow)

Models: onnxruntime-genai's model builder writes a random llama for the CPU in fp32 (hidden
512, 4 layers, 8 heads over 4 KV heads, MLP 1408, a 32000-token vocabulary: 44.6M parameters,
its weights in external data; :func:`generate.build_models` builds it), and the ResNet-50
stand-in of ``bench/infer.py`` (about 100 MB of weights). For each model and side, a fresh
process imports its library, notes its resident set (RSS), loads the model from its file
(``sonnx.prepare(path)``, eager or with ``use_graph=True``; ``onnxruntime.InferenceSession``),
runs it once on the same inputs (the llama: a 16-token prompt, empty cache), drops the
outputs, collects garbage and notes RSS again. ``MB`` is that steady increase: what holding
the model and having run it costs. ``peak MB`` is the high-water mark (VmHWM) above the RSS
before loading; ``load peak MB`` is that mark once the model is loaded, before the run
(what loading alone needs). One process per side, so neither counts the other's memory.
Rows' times are the seconds to load and run once; ``mem ratio`` = sonnx MB / onnxruntime MB,
and ``weights MB`` the model's initializers.
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

import numpy as np
from common import Row, available_cores, emit, machine_facts

REFERENCE = "onnxruntime"
MODELS = ("llama", "resnet50")
#: The llama's shape, as :func:`generate.build_models` takes it.
LLAMA = argparse.Namespace(
    vocab=32000, hidden=512, intermediate=1408, layers=4, heads=8, kv_heads=4, precisions=["fp32"]
)
#: Sizes of the symbolic dims of the llama's inputs: one 16-token prompt, no cache yet.
PROMPT_DIMS = {
    "batch_size": 1,
    "sequence_length": 16,
    "total_sequence_length": 16,
    "past_sequence_length": 0,
    "kv_cache_dim": LLAMA.hidden // LLAMA.heads,
}


def resident_mb() -> float:
    """This process's resident set in MB (``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mb() -> float:
    """This process's resident high-water mark in MB (``VmHWM``)."""
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def child(side: str, model: Path, feeds: Path, threads: int) -> None:
    """One side's load and run in this fresh process, printed as one JSON line."""
    import gc

    if side == REFERENCE:
        import onnxruntime  # noqa: F401  (imported before the first RSS, as sonnx is)
        from common import ort_session
    else:
        import torch

        import sonnx

        torch.set_num_threads(threads)
    with np.load(feeds) as data:
        arrays = {name: data[name] for name in data.files}
    gc.collect()
    before = resident_mb()
    started = time.perf_counter()
    if side == REFERENCE:
        session = ort_session(str(model), threads)
        loaded_peak = peak_mb()
        outputs = session.run(None, arrays)
    else:
        rep = sonnx.prepare(str(model), use_graph=side == "graph")
        loaded_peak = peak_mb()
        outputs = rep.run([arrays[name] for name in rep.inputs])
    seconds = time.perf_counter() - started
    del outputs
    gc.collect()
    result = {
        "mb": resident_mb() - before,
        "peak_mb": peak_mb() - before,
        "load_peak_mb": loaded_peak - before,
        "seconds": seconds,
    }
    print(json.dumps(result))


def llama_feeds(model: Path) -> dict[str, np.ndarray]:
    """Inputs for one prompt of the builder's decoder, from its declared inputs."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    rng = np.random.default_rng(0)
    feeds = {}
    for v in graph.input:
        t = v.type.tensor_type
        shape = [d.dim_value or PROMPT_DIMS[d.dim_param] for d in t.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        if v.name == "input_ids":
            feeds[v.name] = rng.integers(3, 1000, shape).astype(dtype)
        else:  # the attention mask (all ones) and the empty cache
            feeds[v.name] = np.ones(shape, dtype)
    return feeds


def build(name: str, root: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """The model's file and its inputs."""
    if name == "llama":
        from generate import build_models

        model = build_models(root / "llama", LLAMA)["fp32"] / "model.onnx"
        return model, llama_feeds(model)
    from infer import build as zoo_build

    sizes = argparse.Namespace(
        batches=[1], image=224, det_sizes=["320x320"], rec_widths=[320], qbert_seqs=[128]
    )
    spec = zoo_build(name, sizes)
    model = root / f"{name}.onnx"
    model.write_bytes(spec.onnx_bytes)
    return model, next(iter(spec.variants.values()))(1)


def weights_mb(model: Path) -> float:
    import onnx

    loaded = onnx.load(str(model))
    return sum(init.ByteSize() for init in loaded.graph.initializer) / 2**20


def child_result(script: str, args: list[str], threads: int, what: str) -> dict[str, float]:
    """Run ``script --child ARGS --threads N`` in a fresh process; the JSON of its last line."""
    command = [sys.executable, script, "--child", *args, "--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(side: str, model: Path, feeds: Path, threads: int) -> dict[str, float]:
    return child_result(
        __file__, [side, str(model), str(feeds)], threads, f"{side} on {model.name}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--graph", action="store_true", help="also sonnx's graph mode")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--child", nargs=3, metavar=("SIDE", "MODEL", "FEEDS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    threads = args.threads or available_cores()
    if args.child:
        side, model, feeds = args.child
        child(side, Path(model), Path(feeds), threads)
        return
    modes = ["eager", "graph"] if args.graph else ["eager"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="sonnx-bench-memory-") as tmp:
        root = Path(tmp)
        for name in args.models:
            model, arrays = build(name, root)
            feeds = root / f"{name}.npz"
            np.savez(feeds, **arrays)
            theirs = measure(REFERENCE, model, feeds, threads)
            for mode in modes:
                ours = measure(mode, model, feeds, threads)
                extra = {
                    "sonnx MB": ours["mb"],
                    "ort MB": theirs["mb"],
                    "mem ratio": ours["mb"] / theirs["mb"],
                    "sonnx peak MB": ours["peak_mb"],
                    "ort peak MB": theirs["peak_mb"],
                    "sonnx load peak MB": ours["load_peak_mb"],
                    "ort load peak MB": theirs["load_peak_mb"],
                    "weights MB": weights_mb(model),
                }
                rows.append(
                    Row(
                        f"{name} {mode} load+run",
                        ours["seconds"],
                        theirs["seconds"],
                        REFERENCE,
                        extra=extra,
                    )
                )
    emit(
        "memory: resident memory of a loaded model, run once, vs onnxruntime",
        machine_facts(threads),
        {"threads": threads, "models": " ".join(args.models)},
        rows,
        args.json,
        extra_columns=[
            "sonnx MB",
            "ort MB",
            "mem ratio",
            "sonnx peak MB",
            "ort peak MB",
            "sonnx load peak MB",
            "ort load peak MB",
            "weights MB",
        ],
        notes=[
            "MB: steady RSS increase after loading and one run, each side in a fresh "
            "process; ratio and ms columns time the load and the run"
        ],
    )


if __name__ == "__main__":
    main()
