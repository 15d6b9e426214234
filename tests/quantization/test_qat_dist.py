"""QAT through DistOpt: two CPU processes (gloo over loopback) train a fake-quantized graph, its
weights and learned scales, as one process does with twice the batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.opt.test_dist import _launch


def _run(world: int, batch: int, out: Path) -> dict[str, np.ndarray]:
    out.mkdir()
    procs = _launch(world, out, "--batch", str(batch), module="tests.quantization.qat_dist_worker")
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
