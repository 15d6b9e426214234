"""Distributed faults: a worker killed with SIGKILL mid-step, and the checkpoint it leaves.

Two CPU processes train over gloo on loopback; rank 1 is killed (SIGKILL, no chance to say
goodbye) while a step is under way. Rank 0 must stop with a :class:`DistributedError` and a
non-zero exit status within 60 s, and the checkpoint rank 0 wrote before the failure (once,
atomically) must load into a single-process model.

The worker is this module run as ``python -m tests.opt.test_dist_faults --out DIR``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from sonnx import layer, model, opt, tensor
from sonnx.tensor import Tensor
from tests.opt.dist_worker import FEATURES, toy_data
from tests.opt.test_dist import ROOT, _free_port

BATCH = 8
CHECKPOINT_STEP = 3
KILL_AFTER_STEP = 6


class Net(model.Model):
    """A two-layer classifier with the Model API (its states are what a checkpoint holds)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = layer.Linear(32)
        self.relu = layer.ReLU()
        self.fc2 = layer.Linear(10)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.relu(self.fc1(x)))

    def train_one_batch(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        out = self.forward(x)
        loss = self.loss_fn(out, y)
        time.sleep(0.05)  # between forward and the all-reduce: where the kill lands
        self.optimizer(loss)
        return out, loss


def _compiled_net() -> Net:
    net = Net()
    net.compile([tensor.PlaceHolder((BATCH, FEATURES))], is_train=True)
    return net


def worker(out: Path, steps: int) -> None:
    """Train for ``steps``; after step :data:`CHECKPOINT_STEP` every rank calls save_states
    with a path naming its rank (only rank 0's may appear), and rank 0 also keeps the states
    it saved for comparison. Prints ``step N`` after each step."""
    from sonnx import device

    device.set_seed(0)
    sgd = opt.DistOpt(opt.SGD(lr=0.05, momentum=0.9))
    rank, world = sgd.rank, sgd.world_size
    net = Net()
    net.set_optimizer(sgd)
    net.compile([tensor.PlaceHolder((BATCH, FEATURES))], is_train=True)
    x_all, y_all = toy_data(64 * BATCH * world)
    for step in range(steps):
        start = (step % 64) * BATCH * world + rank * BATCH
        x = Tensor(data=x_all[start : start + BATCH], requires_grad=False)
        y = Tensor(data=y_all[start : start + BATCH], requires_grad=False)
        net(x, y)
        if step == CHECKPOINT_STEP:
            net.save_states(out / f"checkpoint-rank{rank}.zip", {"step": np.array(step)})
            if rank == 0:
                saved = {k: tensor.to_numpy(v) for k, v in net.get_states().items()}
                np.savez(out / "expected.npz", **saved)
        print(f"step {step}", flush=True)


def _launch(out: Path, steps: int) -> list[subprocess.Popen]:
    port = str(_free_port())
    procs = []
    for rank in range(2):
        env = dict(
            os.environ,
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            OMP_NUM_THREADS="1",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.opt.test_dist_faults", "--out", str(out),
                 "--steps", str(steps)],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )  # fmt: skip
    return procs


def _wait_for_step(proc: subprocess.Popen, step: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        if line.strip() == f"step {step}":
            return
        if time.monotonic() > deadline:
            break
    pytest.fail(f"rank 1 never reached step {step}: {proc.stderr.read()[-2000:]}")


def test_a_worker_killed_mid_step_stops_the_other_and_leaves_a_loadable_checkpoint(
    tmp_path,
) -> None:
    survivor, victim = _launch(tmp_path, steps=100_000)
    try:
        _wait_for_step(victim, KILL_AFTER_STEP, timeout=180)
        killed_at = time.monotonic()
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        _, err = survivor.communicate(timeout=60)
        stopped_after = time.monotonic() - killed_at
    finally:
        for p in (survivor, victim):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert victim.returncode == -signal.SIGKILL
    assert survivor.returncode != 0
    assert stopped_after < 60
    assert "sonnx.errors.DistributedError: rank 0 of 2" in err, err[-3000:]
    assert "a peer process probably died" in err
    # The checkpoint: written by rank 0 only, no temporary file left, loads in one process.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-rank0.zip", "expected.npz"]
    net = _compiled_net()
    aux = net.load_states(tmp_path / "checkpoint-rank0.zip")
    assert tensor.to_numpy(aux["step"]).item() == CHECKPOINT_STEP
    expected = np.load(tmp_path / "expected.npz")
    for name, state in net.get_states().items():
        np.testing.assert_array_equal(tensor.to_numpy(state), expected[name], err_msg=name)


def test_a_checkpoint_write_that_fails_leaves_the_previous_one_intact(
    tmp_path, monkeypatch
) -> None:
    """Atomic: the states go to a temporary file renamed over the old one only when complete,
    so a failure while writing (here: the disk is full) keeps the old
    checkpoint whole and leaves no temporary file."""
    import zipfile

    net = _compiled_net()
    path = tmp_path / "states.zip"
    net.save_states(path, {"step": np.array(1)})
    before = path.read_bytes()
    with torch.no_grad():
        for state in net.get_states().values():
            state.data.add_(1.0)

    def broken_writestr(self, name, data, *args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(zipfile.ZipFile, "writestr", broken_writestr)
    with pytest.raises(OSError, match="No space left"):
        net.save_states(path, {"step": np.array(2)})
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["states.zip"]
    aux = _compiled_net().load_states(path)
    assert tensor.to_numpy(aux["step"]).item() == 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    worker(args.out, args.steps)
