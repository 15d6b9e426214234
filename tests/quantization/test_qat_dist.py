"""QAT through DistOpt: two CPU processes (gloo over loopback) train a fake-quantized graph, its
weights and learned scales, as one process does with twice the batch."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _run(world: int, batch: int, out: Path) -> dict[str, np.ndarray]:
    out.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
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
        command = [sys.executable, "-m", "tests.quantization.qat_dist_worker", "--out", str(out)]
        procs.append(
            subprocess.Popen(
                [*command, "--batch", str(batch)],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    return dict(np.load(out / "result.npz"))


def test_two_processes_train_weights_and_scales_as_one_with_twice_the_batch(tmp_path: Path):
    two = _run(2, 4, tmp_path / "two")
    one = _run(1, 8, tmp_path / "one")
    assert any(k.endswith("_scale") for k in two) and two.keys() == one.keys()
    # fake quantization is a step function: the all-reduce's summation order can move a value
    # across a rounding boundary, which changes that element's gradient slightly
    for name in two:
        np.testing.assert_allclose(two[name], one[name], rtol=1e-3, atol=1e-4, err_msg=name)
