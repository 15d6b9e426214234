"""Data-parallel training of the walkthrough CNN with any of SINGA's five update modes.

    torchrun --nproc-per-node 2 examples/dist_train.py --mode sparseTopK
    python examples/dist_train.py --mode fp32          # one process: plain local training

Each process trains on its own shard of the training set with ``--batch`` images per step;
rank 0 prints progress, the test accuracy and writes the checkpoint, which loads into a
single-process model.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from sonnx import device, dist, opt, tensor
from sonnx.data import load_dataset
from sonnx.walkthrough import LayerCNN


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--mode",
        default="fp32",
        choices=["fp32", "fp16", "partialUpdate", "sparseTopK", "sparseThreshold"],
    )
    parser.add_argument(
        "--spars",
        type=float,
        default=None,
        help="fraction (sparseTopK) or magnitude threshold (sparseThreshold)",
    )
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=64, help="images per process per step")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--limit", type=int, default=None, help="use the first N images")
    parser.add_argument("--data", default=None, help="a directory of MNIST-format idx files")
    parser.add_argument("--checkpoint", default=None, help="where rank 0 saves the states")
    parser.add_argument("--json", action="store_true", help="print a JSON summary (benchmarks)")
    args = parser.parse_args()

    device.set_seed(0)  # the same initial weights in every process
    sgd = opt.DistOpt(opt.SGD(lr=args.lr, momentum=0.9))
    data = load_dataset(args.data).limited(args.limit)
    train_x, train_y = dist.shard(data.train_x, data.train_y)
    net = LayerCNN()
    net.set_optimizer(sgd)
    net.compile([tensor.PlaceHolder((args.batch, 1, 28, 28))], is_train=True)
    steps = len(train_y) // args.batch
    sent = []
    started = time.perf_counter()
    for epoch in range(args.epochs):
        for s in range(steps):
            idx = slice(s * args.batch, (s + 1) * args.batch)
            x = tensor.Tensor(data=train_x[idx], requires_grad=False)
            y = tensor.Tensor(data=train_y[idx], requires_grad=False)
            _, loss = net(x, y, args.mode, args.spars)
            sent.append(sgd.last_step.bytes_sent)
            if dist.is_main() and not args.json and s % 100 == 0:
                print(f"epoch {epoch} step {s}/{steps} loss {tensor.to_numpy(loss)[0]:.4f}")
    seconds = time.perf_counter() - started
    net.eval()
    correct = sum(
        int(
            (
                tensor.to_numpy(net(tensor.Tensor(data=data.test_x[i : i + 500]))).argmax(1)
                == data.test_y[i : i + 500]
            ).sum()
        )
        for i in range(0, len(data.test_y), 500)
    )
    if args.checkpoint:
        net.save_states(args.checkpoint)
    if dist.is_main():
        summary = {
            "mode": args.mode,
            "processes": sgd.world_size,
            "steps": steps * args.epochs,
            "samples_per_second": steps * args.epochs * args.batch * sgd.world_size / seconds,
            "bytes_per_step": float(np.mean(sent)) if sent else 0.0,
            "test_accuracy": correct / len(data.test_y),
        }
        print(json.dumps(summary) if args.json else summary)
    dist.destroy()


if __name__ == "__main__":
    main()
