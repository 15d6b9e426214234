"""Pad and CenterCropPad: forward against NumPy / onnx.reference, gradients against central
differences, bad inputs, and Pad's old-version converters."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sonnx.autograd as autograd
from sonnx.errors import BadInputError
from tests.helpers import check_grad
from tests.operators.shape.helpers import assert_same, ints, randn, run_node, t

# ---- forward -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_pad_modes_match_numpy(mode, dtype):
    x = (np.arange(12).reshape(3, 4) * 3 % 7).astype(dtype)
    pads = [2, 0, 1, 5]
    y = autograd.pad(t(x), mode, pads, constant=1.5 if dtype == np.float32 else 0)
    kwargs = {"constant_values": 1.5} if mode == "constant" and dtype == np.float32 else {}
    np.testing.assert_array_equal(y.numpy(), np.pad(x, [(2, 1), (0, 5)], mode=mode, **kwargs))


@pytest.mark.parametrize("mode", ["reflect", "edge"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
@pytest.mark.parametrize(
    ("shape", "pads"),
    [
        ((2, 3, 7), [0, 0, 3, 0, 0, 2]),  # the last axis: torch's own kernel
        ((1, 2, 5, 6), [0, 0, 1, 4, 0, 0, 2, 1]),  # the last two
        ((2, 4, 5), [0, 1, 2, 0, 3, 4]),  # two of three axes
        ((2, 3, 4), [0, 0, 6, 0, 0, 5]),  # reflect past the axis' length: ONNX's own way
        ((3, 4), [1, 2, 1, 1]),  # every axis of a 2-D input
    ],
)
def test_reflect_and_edge_pads_match_numpy_on_every_path(mode, dtype, shape, pads):
    x = (np.arange(np.prod(shape)).reshape(shape) * 7 % 11).astype(dtype)
    half = len(pads) // 2
    widths = list(zip(pads[:half], pads[half:], strict=True))
    y = autograd.pad(t(x), mode, pads)
    np.testing.assert_array_equal(y.numpy(), np.pad(x, widths, mode=mode))


@pytest.mark.parametrize("mode", ["reflect", "edge"])
def test_reflect_and_edge_pads_by_torchs_kernel_give_correct_gradients(mode):
    from sonnx.operators.shape.padding import _torch_pad

    assert _torch_pad(torch.zeros(2, 3, 6), [0, 0, 2], [0, 0, 3], mode) is not None
    assert _torch_pad(torch.zeros(2, 3, 6), [0, 1, 2], [0, 0, 3], mode) is not None
    assert _torch_pad(torch.zeros(2, 3, 6), [1, 0, 2], [0, 0, 3], mode) is None
    check_grad(lambda a: autograd.pad(a, mode, [0, 0, 2, 0, 0, 3]), [randn(2, 3, 6)])


def test_pad_positions_are_made_once_per_geometry_outside_tracing():
    from sonnx.engine.tracing import tracing
    from sonnx.operators.shape.padding import _pad_index

    cpu = torch.device("cpu")
    first = _pad_index(5, 2, 7, "reflect", cpu)
    assert _pad_index(5, 2, 7, "reflect", cpu) is first
    assert _pad_index(5, 2, 7, "edge", cpu) is not first
    with tracing():  # a traced graph gets its own positions, never a tensor kept from a run
        traced = _pad_index(5, 2, 7, "reflect", cpu)
    assert traced is not first
    np.testing.assert_array_equal(traced.numpy(), first.numpy())
    x = randn(5)  # a kept index serves later runs, and their gradients
    np.testing.assert_array_equal(
        autograd.pad(t(x), "reflect", [2, 7]).numpy(), np.pad(x, (2, 7), mode="reflect")
    )
    check_grad(lambda a: autograd.pad(a, "reflect", [2, 7]), [x])


def test_pad_negative_crops_and_axes_input():
    x = np.arange(20.0).reshape(4, 5)
    y = autograd.Pad()(t(x), ints([-1, 2, 1, -2]), t(np.array(9.0)))
    ref = np.pad(x[1:, :3], [(0, 1), (2, 0)], constant_values=9.0)
    np.testing.assert_array_equal(y.numpy(), ref)
    y = autograd.Pad(mode="edge")(t(x), ints([1, 2]), None, ints([-1]))
    np.testing.assert_array_equal(y.numpy(), np.pad(x, [(0, 0), (1, 2)], mode="edge"))


# ---- gradients -----------------------------------------------------------------------------

GRAD_CASES = {
    "pad_constant": (lambda x: autograd.pad(x, "constant", [1, -1, 2, 1], 0.5), [randn(3, 3)]),
    "pad_reflect": (lambda x: autograd.pad(x, "reflect", [2, 1, 3, 2]), [randn(3, 3)]),
    "pad_edge": (lambda x: autograd.pad(x, "edge", [2, 1, 1, 2]), [randn(2, 3)]),
    "pad_wrap": (lambda x: autograd.pad(x, "wrap", [4, 1, 1, 2]), [randn(2, 3)]),
    "center_crop_pad": (lambda x: autograd.center_crop_pad(x, [2, 5]), [randn(4, 3)]),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradients(name):
    fn, arrays = GRAD_CASES[name]
    check_grad(fn, arrays)


# ---- bad inputs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: autograd.pad(t(np.zeros(3)), "constant", [1]), "pads must hold 2"),
        (lambda: autograd.pad(t(np.zeros(3)), "mirror", [1, 1]), "mode must be one of"),
        (lambda: autograd.Pad(version=18, mode="wrap")(t(np.zeros(3)), ints([1, 1])), "mode"),
        (lambda: autograd.center_crop_pad(t(np.zeros((3, 2))), [1]), "one non-negative size"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(BadInputError, match=match):
        call()


# ---- importer: old versions ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op_type", "inputs", "opset", "n_outputs", "attrs"),
    [
        ("Pad", [randn(2, 3)], 2, 1, {"pads": [0, 1, 1, 0], "mode": "reflect"}),
        ("Pad", [randn(2, 3)], 2, 1, {"pads": [1, 1, 1, 1], "value": 2.0}),
    ],
)
def test_import_old_versions_match_reference(op_type, inputs, opset, n_outputs, attrs):
    got, expected = run_node(op_type, inputs, opset, n_outputs, **attrs)
    assert_same(got, expected)
