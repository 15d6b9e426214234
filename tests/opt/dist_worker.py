"""One process of a data-parallel run on a toy problem, for tests/opt/test_dist.py.

Run as ``python -m tests.opt.dist_worker --mode fp32 --out DIR`` with torchrun's environment
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Each rank trains on its own slice of every global
batch; rank 0 writes the final weights, per-step losses and communication counts to DIR.
With ``--no-destroy`` it returns as SINGA's scripts do, leaving the group to sonnx's exit
teardown, after rank 1 has lingered ``--linger`` seconds (so rank 0 exits first).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from sonnx import autograd, device, dist, opt, tensor
from sonnx.sonnx_model import apply_update

FEATURES, HIDDEN, CLASSES = 20, 32, 10


def toy_data(total: int) -> tuple[np.ndarray, np.ndarray]:
    """A linearly separable-ish classification problem, identical in every process."""
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32) * 2
    y = rng.integers(0, CLASSES, total)
    x = centers[y] + rng.standard_normal((total, FEATURES)).astype(np.float32)
    return x, y.astype(np.int64)


class MLP:
    def __init__(self) -> None:
        self.fc1 = autograd.Linear(FEATURES, HIDDEN)
        self.fc2 = autograd.Linear(HIDDEN, CLASSES)

    def forward(self, x: tensor.Tensor) -> tensor.Tensor:
        return self.fc2(autograd.relu(self.fc1(x)))

    def params(self) -> dict[str, np.ndarray]:
        return {
            f"{layer}.{k}": tensor.to_numpy(v)
            for layer in ("fc1", "fc2")
            for k, v in getattr(self, layer).get_params().items()
        }


def run(
    mode: str,
    steps: int,
    batch: int,
    spars: float | None,
    die_after: int | None,
    out: Path | None,
    timeout: float,
    destroy: bool = True,
    linger: float = 0.0,
) -> None:
    device.set_seed(0)  # identical initial weights on every rank
    model = MLP()
    sgd = opt.DistOpt(opt.SGD(lr=0.05, momentum=0.9), timeout=timeout)
    rank, world = sgd.rank, sgd.world_size
    x_all, y_all = toy_data(steps * batch * world)
    losses, sent = [], []
    autograd.training = True
    for step in range(steps):
        if die_after is not None and step == die_after and rank == 1:
            os._exit(3)  # simulate a crashed worker
        start = step * batch * world + rank * batch
        x = tensor.Tensor(data=x_all[start : start + batch], requires_grad=False)
        y = tensor.Tensor(data=y_all[start : start + batch], requires_grad=False)
        loss = autograd.softmax_cross_entropy(model.forward(x), y)
        apply_update(sgd, loss, mode, spars)
        losses.append(float(tensor.to_numpy(loss)[0]))
        sent.append(
            (sgd.last_step.bytes_sent, sgd.last_step.elements_sent, sgd.last_step.elements_total)
        )
    if out is not None and dist.is_main():
        np.savez(out / "result.npz", losses=np.array(losses), sent=np.array(sent), **model.params())
    if rank == 1:
        time.sleep(linger)  # the slower rank's extra work
    if destroy:
        dist.destroy()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="fp32")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--spars", type=float, default=None)
    parser.add_argument("--die-after", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--no-destroy", action="store_true")
    parser.add_argument("--linger", type=float, default=0.0)
    a = parser.parse_args()
    run(
        a.mode, a.steps, a.batch, a.spars, a.die_after, a.out, a.timeout, not a.no_destroy, a.linger
    )


if __name__ == "__main__":
    main()
