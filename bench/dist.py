"""Data-parallel training throughput: sonnx's five DistOpt modes against native torch DDP.

    python bench/dist.py                                  # 1 and 2 processes, all modes
    python bench/dist.py --procs 2 --modes fp32 sparseTopK --limit 4096 --repeats 5 --json

For each process count and mode it launches
``python -m torch.distributed.run --nproc-per-node N examples/dist_train.py --mode M --json
--limit L`` and reads the JSON line rank 0 prints: samples per second over the training loop
and the bytes this process sent per step. The reference is the same walkthrough CNN in
``torch.nn`` trained by this script in worker mode (``--worker``) under the same launcher,
with the same data, batch, learning rate and momentum: plain local training for one process,
``DistributedDataParallel`` (gloo) for more, with its ``fp16_compress_hook`` for the fp16 mode.
torch has no counterpart of partial or sparse updates, so those rows are compared with DDP
fp32. Every process gets ``cores // N`` threads (``OMP_NUM_THREADS``) on both sides.

The ratio is sonnx's time per sample over the reference's (reference samples/s over sonnx's):
below 1 means sonnx trains faster.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import Row, available_cores, emit, machine_facts

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "dist_train.py"
MODES = ("fp32", "fp16", "partialUpdate", "sparseTopK", "sparseThreshold")
SPARS = {"sparseTopK": 0.05, "sparseThreshold": 0.01}
LR = 0.05
MOMENTUM = 0.9


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(procs: int, script: Path, script_args: list[str], threads: int) -> dict[str, Any]:
    """Run ``script`` under torch.distributed.run and return rank 0's JSON summary."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(procs),
        "--master-port",
        str(free_port()),
        str(script),
        *script_args,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"no JSON line in the output of {' '.join(command)}:\n{done.stdout}")
    return {**json.loads(lines[-1]), "wall_s": wall}


def repeated(procs: int, script: Path, args: list[str], threads: int, n: int) -> dict[str, Any]:
    """The run with the median samples/s of ``n`` launches (its other fields kept)."""
    runs = sorted(
        (launch(procs, script, args, threads) for _ in range(n)),
        key=lambda r: r["samples_per_second"],
    )
    best = dict(runs[len(runs) // 2])
    best["all_samples_per_second"] = [r["samples_per_second"] for r in runs]
    return best


def common_args(args: argparse.Namespace) -> list[str]:
    out = ["--json", "--batch", str(args.batch), "--epochs", str(args.epochs)]
    if args.limit:
        out += ["--limit", str(args.limit)]
    if args.data:
        out += ["--data", args.data]
    return out


def run_benchmark(args: argparse.Namespace) -> None:
    cores = available_cores()
    rows: list[Row] = []
    for procs in args.procs:
        threads = max(1, cores // procs)
        # DDP fp32 is every mode's baseline; DDP with fp16 compression only fp16's.
        ref_modes = ["fp32"] + (["fp16"] if "fp16" in args.modes else [])
        references = {
            mode: repeated(
                procs,
                Path(__file__).resolve(),
                ["--worker", mode, *common_args(args)],
                threads,
                args.repeats,
            )
            for mode in ref_modes
        }
        for mode in args.modes:
            sonnx_args = ["--mode", mode, *common_args(args)]
            if mode in SPARS:
                sonnx_args += ["--spars", str(args.spars.get(mode, SPARS[mode]))]
            ours = repeated(procs, EXAMPLE, sonnx_args, threads, args.repeats)
            ref_mode = mode if mode in references else "fp32"
            ref = references[ref_mode]
            label = "torch (local)" if procs == 1 else f"torch DDP {ref_mode}"
            rows.append(
                Row(
                    f"{procs} proc x {threads} thr {mode}",
                    1.0 / ours["samples_per_second"],
                    1.0 / ref["samples_per_second"],
                    label,
                    extra={
                        "sonnx_sps": ours["samples_per_second"],
                        "ref_sps": ref["samples_per_second"],
                        "bytes_step": ours["bytes_per_step"],
                        "ref_bytes": ref["bytes_per_step"],
                        "test_acc": ours["test_accuracy"],
                    },
                )
            )
    emit(
        "dist: samples/s of the walkthrough CNN per DistOpt mode (examples/dist_train.py)",
        machine_facts(cores),
        {
            "procs": args.procs,
            "batch_per_process": args.batch,
            "limit": args.limit,
            "epochs": args.epochs,
            "repeats": args.repeats,
            "spars": {**SPARS, **args.spars},
        },
        rows,
        args.json,
        extra_columns=("sonnx_sps", "ref_sps", "bytes_step", "ref_bytes", "test_acc"),
        notes=[
            "ms columns are seconds per sample x 1000 (1 / samples per second); each is the "
            "launch with the median samples/s",
            "bytes_step: bytes each process sent per step (sonnx: DistOpt.last_step; torch: "
            "the gradient buckets DDP all-reduces); 0 for one process",
            "the loops are timed whole, first step included, on both sides (as the example "
            "times itself); raise --limit for longer loops",
            "test_acc: sonnx's test accuracy after the run (a sanity check, not a comparison: "
            "the two sides start from different random weights)",
        ],
    )


# ---- worker mode: the torch reference, run by torch.distributed.run -------------------------
def worker(mode: str, args: argparse.Namespace) -> None:
    """Train the torch CNN as examples/dist_train.py trains sonnx's and print its summary."""
    import numpy as np
    import torch
    import torch.distributed as tdist
    from torch import nn
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel
    from train_step import torch_cnn

    from sonnx import dist
    from sonnx.data import load_dataset

    torch.manual_seed(0)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    net: nn.Module = torch_cnn()
    n_params = sum(p.numel() for p in net.parameters())
    bytes_per_step = 0.0
    if world > 1:
        tdist.init_process_group("gloo")
        net = DistributedDataParallel(net)
        if mode == "fp16":
            net.register_comm_hook(None, default_hooks.fp16_compress_hook)
        bytes_per_step = float(n_params * (2 if mode == "fp16" else 4))
    sgd = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
    data = load_dataset(args.data).limited(args.limit)
    train_x, train_y = dist.shard(data.train_x, data.train_y)
    steps = len(train_y) // args.batch
    net.train()
    started = time.perf_counter()
    for _ in range(args.epochs):
        for s in range(steps):
            idx = slice(s * args.batch, (s + 1) * args.batch)
            x = torch.from_numpy(np.ascontiguousarray(train_x[idx]))
            y = torch.from_numpy(np.ascontiguousarray(train_y[idx])).long()
            sgd.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(net(x), y)
            loss.backward()
            sgd.step()
    seconds = time.perf_counter() - started
    net.eval()
    with torch.no_grad():
        correct = sum(
            int(
                (
                    net(torch.from_numpy(data.test_x[i : i + 500])).argmax(1).numpy()
                    == data.test_y[i : i + 500]
                ).sum()
            )
            for i in range(0, len(data.test_y), 500)
        )
    if int(os.environ.get("RANK", "0")) == 0:
        print(
            json.dumps(
                {
                    "mode": mode,
                    "processes": world,
                    "steps": steps * args.epochs,
                    "samples_per_second": steps * args.epochs * args.batch * world / seconds,
                    "bytes_per_step": bytes_per_step,
                    "test_accuracy": correct / len(data.test_y),
                }
            )
        )
    if world > 1:
        tdist.destroy_process_group()


def parse_spars(values: list[str]) -> dict[str, float]:
    out = {}
    for value in values:
        mode, _, number = value.partition("=")
        if mode not in SPARS or not number:
            raise argparse.ArgumentTypeError(f"expected sparseTopK=F or sparseThreshold=F: {value}")
        out[mode] = float(number)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--batch", type=int, default=64, help="images per process per step")
    parser.add_argument("--limit", type=int, default=2048, help="use the first N images")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--data", default=None, help="a directory of MNIST-format idx files")
    parser.add_argument(
        "--spars",
        nargs="*",
        default=[],
        metavar="MODE=F",
        help="override spars, e.g. sparseTopK=0.1 (defaults: 0.05 top-k, 0.01 threshold)",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="launches per configuration (median kept)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--worker", choices=["fp32", "fp16"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args)
        return
    args.spars = parse_spars(args.spars)
    run_benchmark(args)


if __name__ == "__main__":
    main()
