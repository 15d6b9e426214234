"""DFT, STFT, windows and MelWeightMatrix: forward against NumPy / onnx.reference, gradients,
errors and both DFT export forms."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from sonnx.errors import BadInputError
from sonnx.onnx.exporter import to_onnx
from sonnx.operators.spectral.transforms import (
    DFT,
    blackman_window,
    dft,
    hamming_window,
    hann_window,
    mel_weight_matrix,
    stft,
)
from sonnx.tensor import Tensor
from tests.helpers import check_grad
from tests.onnx.export_check import export_check, ort_session

rng = np.random.default_rng(0)


def t(a) -> Tensor:
    return Tensor(data=np.asarray(a), requires_grad=False)


def as_complex(a: np.ndarray) -> np.ndarray:
    return a[..., 0] if a.shape[-1] == 1 else a[..., 0] + 1j * a[..., 1]


def real_form(c: np.ndarray) -> np.ndarray:
    return np.stack([c.real, c.imag], -1)


@pytest.mark.parametrize("last", [1, 2])
@pytest.mark.parametrize("axis", [1, -2, 2])
@pytest.mark.parametrize("length", [None, 5, 12])
def test_dft_forward_matches_numpy(last, axis, length):
    x = rng.standard_normal((2, 8, 6, last)).astype(np.float32)
    y = dft(t(x), axis=axis, dft_length=length).numpy()
    expected = np.fft.fft(as_complex(x), n=length, axis=axis % 4)
    np.testing.assert_allclose(y, real_form(expected), rtol=1e-4, atol=1e-4)


def test_dft_onesided_inverse_and_irfft():
    x = rng.standard_normal((3, 10, 1))
    half = dft(t(x), axis=1, onesided=True).numpy()
    np.testing.assert_allclose(half, real_form(np.fft.rfft(x[..., 0], axis=1)), atol=1e-12)
    spectrum = rng.standard_normal((3, 10, 2))
    inv = dft(t(spectrum), axis=1, inverse=True).numpy()
    np.testing.assert_allclose(inv, real_form(np.fft.ifft(as_complex(spectrum), axis=1)))
    back = dft(t(half), axis=1, inverse=True, onesided=True, dft_length=10).numpy()
    np.testing.assert_allclose(back[..., 0], x[..., 0], atol=1e-12)


def test_dft_version_17_reads_the_axis_attribute():
    x = rng.standard_normal((2, 4, 6, 2)).astype(np.float32)
    y = DFT(version=17, axis=2)(t(x)).numpy()
    np.testing.assert_allclose(y, real_form(np.fft.fft(as_complex(x), axis=2)), atol=1e-4)


def test_dft_half_precision_keeps_its_type():
    x = rng.standard_normal((1, 8, 1)).astype(np.float16)
    y = dft(t(x))
    assert y.dtype == torch.float16
    expected = real_form(np.fft.fft(x[..., 0].astype(np.float64), axis=1))
    np.testing.assert_allclose(y.numpy().astype(np.float64), expected, atol=2e-2)


@pytest.mark.parametrize(
    ("shape", "kwargs"),
    [
        ((2, 5, 1), {}),
        ((2, 5, 2), {"dft_length": 7}),
        ((2, 5, 1), {"onesided": True}),
        ((2, 4, 2), {"inverse": True, "onesided": True}),
        ((2, 4, 2), {"inverse": True}),
    ],
)
def test_dft_gradients(shape, kwargs):
    check_grad(lambda x: dft(x, axis=1, **kwargs), [rng.standard_normal(shape)])


def test_dft_bad_inputs():
    with pytest.raises(BadInputError, match="last dimension of 1"):
        dft(t(np.zeros((2, 4, 3), np.float32)))
    with pytest.raises(BadInputError, match="DFT: axis must be in"):
        dft(t(np.zeros((2, 4, 2), np.float32)), axis=2)
    with pytest.raises(BadInputError, match="floating-point"):
        dft(t(np.zeros((2, 4, 1), np.int64)))
    with pytest.raises(BadInputError, match="dft_length must be positive"):
        dft(t(np.zeros((2, 4, 1), np.float32)), dft_length=0)


@pytest.mark.parametrize("opset", [17, 20])
def test_dft_export_runs_in_onnxruntime(opset):
    def make(batch: int):
        return [np.random.default_rng(batch).standard_normal((batch, 6, 2)).astype(np.float32)]

    model = export_check(lambda x: dft(x, axis=1), make, opset=opset, rtol=1e-4, atol=1e-5)
    node = model.graph.node[0]
    assert ("axis" in [a.name for a in node.attribute]) == (opset < 20)
    assert len(node.input) == (1 if opset < 20 else 3)


def test_dft_version_17_exports_its_axis_as_an_input_at_opset_20():
    x = Tensor(data=rng.standard_normal((2, 4, 6, 2)).astype(np.float32), name="x")
    y = DFT(version=17, axis=2)(x)
    model = to_onnx([x], [y], opset=20)
    assert len(model.graph.node[0].input) == 3
    got = ort_session(model).run(None, {"x": x.numpy()})[0]
    np.testing.assert_allclose(got, y.numpy(), rtol=1e-4, atol=1e-5)


def reference_run(op: str, inputs: list[np.ndarray], **attrs) -> np.ndarray:
    names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    node = helper.make_node(op, names, ["y"], **attrs)
    feeds = {n: a for n, a in zip(names, inputs, strict=True) if n}
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in feeds],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ReferenceEvaluator(model).run(None, feeds)[0]


@pytest.mark.parametrize("last", [1, 2])
@pytest.mark.parametrize("onesided", [0, 1])
@pytest.mark.parametrize("with_window", [False, True])
def test_stft_matches_reference(last, onesided, with_window):
    signal = rng.standard_normal((2, 40, last)).astype(np.float32)
    window = np.hanning(10).astype(np.float32) if with_window else None
    step, length = np.array(4, np.int64), np.array(10, np.int64)
    expected = reference_run("STFT", [signal, step, window, length], onesided=onesided)
    got = stft(t(signal), 4, None if window is None else t(window), 10, onesided=bool(onesided))
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_stft_gradient():
    window = t(np.hanning(4))
    check_grad(lambda s: stft(s, 2, window, 4), [rng.standard_normal((1, 9, 1))])


def test_stft_bad_inputs():
    signal = t(np.zeros((1, 16, 1), np.float32))
    with pytest.raises(BadInputError, match="window must have shape"):
        stft(signal, 2, t(np.ones(5, np.float32)), 4)
    with pytest.raises(BadInputError, match="frame_step must be positive"):
        stft(signal, 0, None, 4)
    with pytest.raises(BadInputError, match="3-D"):
        stft(t(np.zeros((16, 1), np.float32)), 2, None, 4)


@pytest.mark.parametrize(
    ("fn", "op"),
    [
        (hann_window, "HannWindow"),
        (hamming_window, "HammingWindow"),
        (blackman_window, "BlackmanWindow"),
    ],
)
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_windows_match_reference(fn, op, periodic, dtype):
    code = {torch.float32: 1, torch.float64: 11}[dtype]
    expected = reference_run(op, [np.array(10, np.int64)], periodic=periodic, output_datatype=code)
    got = fn(10, periodic=bool(periodic), dtype=dtype)
    assert got.dtype == dtype
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6, atol=1e-6)


def test_window_matches_torch_and_rejects_bad_types():
    np.testing.assert_allclose(hann_window(8).numpy(), torch.hann_window(8).numpy(), atol=1e-6)
    assert hann_window(1, periodic=False).numpy().tolist() == [1.0]
    with pytest.raises(BadInputError, match="numeric type"):
        hann_window(4, dtype=torch.bool)
    with pytest.raises(BadInputError, match="non-negative"):
        hann_window(-1)


@pytest.mark.parametrize(
    "args", [(8, 16, 8192, 0.0, 4096.0), (10, 64, 16000, 125.0, 3800.0), (4, 9, 100, 5.0, 50.0)]
)
def test_mel_weight_matrix_matches_reference(args):
    mels, length, rate, low, high = args
    inputs = [np.array(v, np.int64) for v in (mels, length, rate)]
    inputs += [np.array(v, np.float32) for v in (low, high)]
    expected = reference_run("MelWeightMatrix", inputs)
    got = mel_weight_matrix(*args)
    assert got.shape == (length // 2 + 1, mels)
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-6)


def test_mel_weight_matrix_bad_inputs():
    with pytest.raises(BadInputError, match="sample_rate / 2"):
        mel_weight_matrix(8, 16, 8000, 0.0, 5000.0)
    with pytest.raises(BadInputError, match="must be positive"):
        mel_weight_matrix(0, 16, 8000, 0.0, 4000.0)
