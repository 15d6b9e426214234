"""LoRA's transient memory: the peak of ``lora.add`` / ``merge`` / ``load`` / ``export`` on a
prepared LLM, above what the prepared model holds.

    python bench/lora_memory.py --threads 1
    python bench/lora_memory.py --ops add merge --json

The model is :mod:`memory`'s llama (onnxruntime-genai's builder, fp32, 44.6M parameters,
external data). Each operation runs in a fresh process: it prepares the model from its path
(``sonnx.prepare``), adds the adapters first where the operation needs them (``merge``,
``export``), then resets the resident high-water mark (``/proc/self/clear_refs``), notes the
RSS and runs the operation. ``peak MB`` is the high-water mark (VmHWM) above that RSS: what the
operation needs on top of the model for a moment (for a user fine-tuning a downloaded LLM,
what decides whether it fits); ``kept MB`` is the RSS it still holds after garbage collection.
The adapters are rank 8 on every projection of every layer (``load`` reads them back from a
PEFT directory ``save`` wrote beforehand), a few MB beside ``weights MB``.
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time
from pathlib import Path

from common import Row, available_cores, emit, machine_facts
from memory import LLAMA, child_result, peak_mb, resident_mb, weights_mb

OPS = ("add", "merge", "load", "export")
TARGETS = r"layers\.\d+/.*_proj"
RANK = 8


def reset_peak() -> None:
    """Set this process's VmHWM back to its current RSS (Linux: ``clear_refs`` value 5)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def child(op: str, model_dir: Path, adapters: Path, threads: int) -> None:
    """Prepare the model, then time and measure ``op`` alone; print one JSON line."""
    import torch

    import sonnx
    import sonnx.lora as lora

    torch.set_num_threads(threads)
    rep = sonnx.prepare(str(model_dir / "model.onnx"))
    if op in ("merge", "export"):
        lora.add(rep, TARGETS, rank=RANK)
    gc.collect()
    reset_peak()
    before = resident_mb()
    started = time.perf_counter()
    if op == "add":
        lora.add(rep, TARGETS, rank=RANK)
    elif op == "merge":
        lora.merge(rep)
    elif op == "load":
        lora.load(rep, adapters)
    else:
        with tempfile.TemporaryDirectory(prefix="sonnx-bench-lora-export-") as out:
            lora.export(rep, out, model_dir)
    seconds = time.perf_counter() - started
    peak = peak_mb() - before
    gc.collect()
    print(json.dumps({"peak_mb": peak, "kept_mb": resident_mb() - before, "seconds": seconds}))


def save_adapters(model_dir: Path, out: Path) -> None:
    """Fresh adapters on the model, saved in PEFT's layout for the ``load`` row."""
    import sonnx
    import sonnx.lora as lora

    rep = sonnx.prepare(str(model_dir / "model.onnx"))
    lora.add(rep, TARGETS, rank=RANK)
    lora.save(rep, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS))
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--child", nargs=3, metavar=("OP", "MODEL_DIR", "ADAPTERS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    threads = args.threads or available_cores()
    if args.child:
        op, model_dir, adapters = args.child
        child(op, Path(model_dir), Path(adapters), threads)
        return
    from generate import build_models

    rows = []
    with tempfile.TemporaryDirectory(prefix="sonnx-bench-lora-memory-") as tmp:
        root = Path(tmp)
        model_dir = build_models(root / "llama", LLAMA)["fp32"]
        adapters = root / "adapters"
        save_adapters(model_dir, adapters)
        weights = weights_mb(model_dir / "model.onnx")
        for op in args.ops:
            m = child_result(__file__, [op, str(model_dir), str(adapters)], threads, f"lora.{op}")
            extra = {
                "peak MB": m["peak_mb"],
                "kept MB": m["kept_mb"],
                "weights MB": weights,
                "peak / weights": m["peak_mb"] / weights,
            }
            rows.append(Row(f"lora.{op}", m["seconds"], float("nan"), "none", extra=extra))
    emit(
        "lora memory: the transient peak of LoRA operations on a prepared llama",
        machine_facts(threads),
        {"threads": threads, "ops": " ".join(args.ops), "targets": TARGETS, "rank": RANK},
        rows,
        args.json,
        extra_columns=["peak MB", "kept MB", "weights MB", "peak / weights"],
        notes=[
            "peak MB: VmHWM above the RSS just before the operation, in a fresh process "
            "holding the prepared model; kept MB: RSS it still holds afterwards"
        ],
    )


if __name__ == "__main__":
    main()
