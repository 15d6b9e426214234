"""One process of a data-parallel QAT run, for tests/quantization/test_qat_dist.py.

Run as ``python -m tests.quantization.qat_dist_worker --out DIR`` with torchrun's environment
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Every rank prepares the same depthwise CNN for
QAT with learned scales and trains on its slice of each global batch through ``DistOpt``;
rank 0 writes the trained parameters (weights and scales) to DIR.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from sonnx import autograd, dist, opt, tensor
from sonnx.quantization import prepare_qat
from tests.quantization.models import depthwise_cnn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()
    model, feeds = depthwise_cnn()
    rep = prepare_qat(model, feeds, per_channel=True, learn_scales=True)
    sgd = opt.DistOpt(opt.SGD(lr=0.05))
    rank, world = sgd.rank, sgd.world_size
    rng = np.random.default_rng(0)
    total = args.steps * args.batch * world
    x_all = rng.standard_normal((total, 3, 16, 16)).astype(np.float32)
    y_all = rng.integers(0, 5, total).astype(np.int32)
    autograd.training = True
    for step in range(args.steps):
        start = step * args.batch * world + rank * args.batch
        x = tensor.from_numpy(x_all[start : start + args.batch])
        y = tensor.from_numpy(y_all[start : start + args.batch])
        sgd(autograd.softmax_cross_entropy(rep.run([x])[0], y))
    autograd.training = False
    if dist.is_main():
        params = {k: tensor.to_numpy(t) for k, t in rep.params.items()}
        np.savez(args.out / "result.npz", **params)
    dist.destroy()


if __name__ == "__main__":
    main()
