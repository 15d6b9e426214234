"""DistOpt on two CPU processes (gloo over loopback) against single-process training."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.opt import dist_worker

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(
    world: int, out: Path, *args: str, module: str = "tests.opt.dist_worker"
) -> list[subprocess.Popen]:
    """``world`` processes of ``module`` with torchrun's environment, writing to ``out``."""
    port = str(_free_port())
    procs = []
    for rank in range(world):
        env = dict(
            os.environ,
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            OMP_NUM_THREADS="1",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", module, "--out", str(out), *args],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs


def _run(world: int, tmp: Path, *args: str) -> dict[str, np.ndarray]:
    out = tmp / f"w{world}"
    out.mkdir()
    procs = _launch(world, out, *args)
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-2000:]
    return dict(np.load(out / "result.npz"))


def _single(tmp: Path, batch: int, *args: str) -> dict[str, np.ndarray]:
    """One process with the global batch: the reference a 2-process fp32 run must equal."""
    return _run(1, tmp, "--batch", str(batch), *args)


def test_fp32_two_processes_equal_one_process_with_twice_the_batch(tmp_path) -> None:
    two = _run(2, tmp_path, "--mode", "fp32", "--steps", "5", "--batch", "8")
    one = _single(tmp_path, 16, "--mode", "fp32", "--steps", "5")
    for name in ("fc1.W", "fc1.b", "fc2.W", "fc2.b"):
        np.testing.assert_allclose(two[name], one[name], rtol=1e-5, atol=1e-7, err_msg=name)
    bytes_sent, elements, total = two["sent"][-1]
    assert elements == total and bytes_sent == 4 * total  # every float32 gradient, once


def test_fp16_communication_stays_within_half_precision_rounding(tmp_path) -> None:
    two = _run(2, tmp_path, "--mode", "fp16", "--steps", "5", "--batch", "8")
    one = _single(tmp_path, 16, "--mode", "fp32", "--steps", "5")
    for name in ("fc1.W", "fc2.W"):
        np.testing.assert_allclose(two[name], one[name], rtol=2e-3, atol=2e-4, err_msg=name)
    assert two["sent"][-1][0] == 2 * two["sent"][-1][2]  # two bytes per gradient element


@pytest.mark.parametrize(
    ("mode", "spars"), [("partialUpdate", None), ("sparseTopK", 0.05), ("sparseThreshold", 0.01)]
)
def test_other_modes_reduce_the_loss_and_sparse_modes_send_little(tmp_path, mode, spars) -> None:
    args = ["--mode", mode, "--steps", "40", "--batch", "16"]
    if spars is not None:
        args += ["--spars", str(spars)]
    two = _run(2, tmp_path, *args)
    losses = two["losses"]
    assert losses[-5:].mean() < 0.6 * losses[:5].mean(), losses
    fractions = two["sent"][:, 1] / two["sent"][:, 2]
    print(
        f"{mode}: bytes sent per step {two['sent'][:, 0].mean():.0f}, "
        f"fraction of gradient elements {fractions.mean():.4f}"
    )
    if mode == "sparseTopK":
        assert fractions.max() <= 2 * spars
    if mode == "sparseThreshold":
        assert fractions.mean() < 0.9


def test_a_dead_worker_makes_the_others_fail_with_a_clear_error(tmp_path) -> None:
    started = time.monotonic()
    procs = _launch(
        2, tmp_path, "--mode", "fp32", "--steps", "10", "--die-after", "3", "--timeout", "30"
    )
    survivor_err = procs[0].communicate(timeout=120)[1]
    procs[1].communicate(timeout=30)
    assert procs[1].returncode == 3
    assert procs[0].returncode != 0
    assert "DistributedError" in survivor_err and "peer" in survivor_err, survivor_err[-2000:]
    assert time.monotonic() - started < 100


def test_single_process_dist_opt_is_plain_local_training() -> None:
    from sonnx import autograd, device, opt, tensor

    device.set_seed(0)
    model = dist_worker.MLP()
    sgd = opt.DistOpt(opt.SGD(lr=0.05, momentum=0.9))
    assert (sgd.rank, sgd.world_size) == (0, 1)
    x, y = dist_worker.toy_data(32)
    autograd.training = True
    first = None
    for _ in range(20):
        loss = autograd.softmax_cross_entropy(
            model.forward(tensor.Tensor(data=x, requires_grad=False)),
            tensor.Tensor(data=y, requires_grad=False),
        )
        sgd(loss)
        first = first if first is not None else float(tensor.to_numpy(loss)[0])
    assert float(tensor.to_numpy(loss)[0]) < 0.5 * first
    assert sgd.last_step.bytes_sent == 0


def test_distributed_checkpoint_loads_into_a_single_process_model(tmp_path) -> None:
    """examples/dist_train.py on 2 processes; rank 0's checkpoint restores its accuracy."""
    import json

    from sonnx import tensor
    from sonnx.data import load_dataset
    from sonnx.walkthrough import LayerCNN

    checkpoint = tmp_path / "cnn.zip"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(_free_port()),
            str(ROOT / "examples" / "dist_train.py"),
            "--limit",
            "1280",
            "--json",
            "--checkpoint",
            str(checkpoint),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["processes"] == 2
    net = LayerCNN()  # the network examples/dist_train.py trains
    net.compile([tensor.PlaceHolder((64, 1, 28, 28))], is_train=False)
    net.load_states(checkpoint)
    data = load_dataset().limited(1280)
    predicted = tensor.to_numpy(net(tensor.Tensor(data=data.test_x))).argmax(1)
    assert (predicted == data.test_y).mean() == pytest.approx(summary["test_accuracy"])


@pytest.mark.parametrize("mode", ["fp16", "partialUpdate", "sparseTopK", "sparseThreshold"])
def test_every_mode_is_plain_local_training_in_one_process(mode) -> None:
    from sonnx import autograd, device, opt, tensor
    from sonnx.sonnx_model import apply_update

    x, y = dist_worker.toy_data(32)
    finals = {}
    for chosen in ("fp32", mode):
        device.set_seed(0)
        model = dist_worker.MLP()
        sgd = opt.DistOpt(opt.SGD(lr=0.05, momentum=0.9))
        autograd.training = True
        for _ in range(5):
            loss = autograd.softmax_cross_entropy(
                model.forward(tensor.Tensor(data=x, requires_grad=False)),
                tensor.Tensor(data=y, requires_grad=False),
            )
            apply_update(sgd, loss, chosen, 0.05 if chosen.startswith("sparse") else None)
        finals[chosen] = model.params()
        assert sgd.last_step.bytes_sent == 0
    for name, value in finals["fp32"].items():
        np.testing.assert_allclose(finals[mode][name], value, rtol=1e-6, err_msg=name)
