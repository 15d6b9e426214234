"""The model suites shipped in the onnx wheel run in sonnx and match their stored outputs.

- ``light``: nine zoo models (AlexNet, DenseNet-121, Inception v1/v2, ResNet-50, ShuffleNet,
  SqueezeNet, VGG-19, ZFNet-512) with constant-filled weights; inputs are generated exactly as
  onnx's own backend runner generates them, outputs are stored beside each model.
- ``simple``, ``pytorch-converted``, ``pytorch-operator``: models with stored input/output sets.
The ``real`` suite needs downloads, which this environment cannot do.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx.backend.test.runner import Runner

import sonnx
from sonnx.tensor import to_numpy

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"


def _read(path: Path) -> np.ndarray:
    proto = onnx.TensorProto()
    proto.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(proto)


def _compare(expected: list[np.ndarray], outputs, rtol: float, atol: float) -> None:
    assert len(outputs) == len(expected)
    for e, g in zip(expected, outputs, strict=True):
        got = to_numpy(g)
        assert got.dtype == e.dtype and got.shape == e.shape, (got.dtype, got.shape, e.shape)
        if e.dtype == object:  # strings
            np.testing.assert_array_equal(got, e)
        else:
            np.testing.assert_allclose(got, e, rtol=rtol, atol=atol)


LIGHT = sorted(p.stem for p in (DATA / "light").glob("light_*.onnx") if "_output_" not in p.stem)


@pytest.mark.parametrize("name", LIGHT)
def test_light_zoo_model(name: str) -> None:
    model = onnx.load(DATA / "light" / f"{name}.onnx")
    initializers = {i.name for i in model.graph.initializer}
    feeds = {
        x.name: Runner.generate_dummy_data(x, seed=0, name=name, random=False)
        for x in model.graph.input
        if x.name not in initializers
    }
    expected = [
        _read(DATA / "light" / f"{name}_output_{i}.pb") for i in range(len(model.graph.output))
    ]
    _compare(expected, sonnx.prepare(model).run(feeds), rtol=1e-3, atol=1e-5)


def _stored_cases() -> list:
    cases = []
    for suite in ("simple", "pytorch-converted", "pytorch-operator"):
        for case_dir in sorted((DATA / suite).iterdir()):
            if not (case_dir / "model.onnx").is_file():
                continue
            cases.append(pytest.param(case_dir, id=f"{suite}/{case_dir.name}"))
    return cases


@pytest.mark.parametrize("case_dir", _stored_cases())
def test_stored_model_case(case_dir: Path) -> None:
    model = onnx.load(case_dir / "model.onnx")
    rep = sonnx.prepare(model)
    for data_set in sorted(case_dir.glob("test_data_set_*")):
        inputs = [_read(p) for p in sorted(data_set.glob("input_*.pb"))]
        expected = [_read(p) for p in sorted(data_set.glob("output_*.pb"))]
        _compare(expected, rep.run(inputs), rtol=1e-3, atol=1e-7)
