"""com.microsoft weight-quantized products (MatMulNBits, GatherBlockQuantized) against
onnxruntime's CPU kernels on single-node models; gradients to the float input; bad inputs."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import sonnx
from sonnx.errors import BadInputError
from sonnx.operators.quantize.contrib_integer import MatMulIntegerToFloat
from sonnx.operators.quantize.contrib_nbits import GatherBlockQuantized, MatMulNBits
from sonnx.tensor import Tensor
from tests.contrib_quant_helpers import (
    both,
    int8_weights_7_bits,
    nbits_weight,
    node_model,
    ort_run,
    reference_run,
)
from tests.helpers import check_grad

RNG = np.random.default_rng(0)
F32 = np.float32


# onnxruntime's CPU kernel refuses 8-bit weights with float zero points.
NBITS_CASES = [
    (bits, zero_points)
    for bits in (2, 4, 8)
    for zero_points in (None, "uint8", "float")
    if (bits, zero_points) != (8, "float")
]


@pytest.mark.parametrize(("bits", "zero_points"), NBITS_CASES)
@pytest.mark.parametrize("block", [16, 32, 128])
def test_matmul_nbits_matches_onnxruntime(bits, block, zero_points):
    k, n = 70, 5  # K not a multiple of the block: the last block is padded
    weight = nbits_weight(RNG, bits, block, k, n, zero_points)
    feeds = {"A": RNG.standard_normal((2, 3, k)).astype(F32)}
    model = node_model(
        "MatMulNBits", {**feeds, **weight}, feeds, K=k, N=n, bits=bits, block_size=block
    )
    (expected,), (got,) = both(model, feeds)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


# onnxruntime 1.32's CPU kernel reads packed uint8 zero points as 8 when g_idx is given; sonnx
# applies them as documented, so that case is left out of the comparison.
@pytest.mark.parametrize("accuracy_level", [0, 4])
@pytest.mark.parametrize("zero_points", [None, "float"])
def test_matmul_nbits_g_idx_and_bias_match_onnxruntime(zero_points, accuracy_level):
    """With g_idx onnxruntime multiplies in float at every accuracy level, as sonnx does."""
    k, n, block = 64, 6, 16
    weight = nbits_weight(RNG, 4, block, k, n, zero_points)
    # act-order: the rows of K visit the blocks in a shuffled order
    weight["g_idx"] = RNG.permutation(np.arange(k, dtype=np.int32) // block).astype(np.int32)
    weight["bias"] = RNG.standard_normal(n).astype(F32)
    feeds = {"A": RNG.standard_normal((4, k)).astype(F32)}
    model = node_model(
        "MatMulNBits",
        {**feeds, **weight},
        feeds,
        K=k,
        N=n,
        bits=4,
        block_size=block,
        accuracy_level=accuracy_level,
    )
    (expected,), (got,) = both(model, feeds)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("bits", "zero_points"), NBITS_CASES)
@pytest.mark.parametrize("block", [16, 32, 128, 256])
def test_matmul_nbits_accuracy_level_4_matches_onnxruntime(bits, block, zero_points):
    """At accuracy_level 4 onnxruntime rounds A to int8 per block of K (for 2-bit weights only
    in blocks of 32 to 128; not with float zero points, nor with g_idx: the test above), and
    so does sonnx: the two agree to float rounding, where a float product would differ by the
    int8 step (about 1e-2 relative)."""
    k, n = 300, 5  # K not a multiple of the block: the last block is padded
    weight = nbits_weight(RNG, bits, block, k, n, zero_points)
    feeds = {"A": RNG.standard_normal((2, 3, k)).astype(F32)}
    model = node_model(
        "MatMulNBits",
        {**feeds, **weight},
        feeds,
        K=k,
        N=n,
        bits=bits,
        block_size=block,
        accuracy_level=4,
    )
    (expected,), (got,) = both(model, feeds)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_matmul_nbits_accuracy_level_4_passes_gradients_through_the_rounding():
    """The int8 rounding of A is a step function: its gradient is taken as the identity
    (straight through), so A's gradient is that of the float product with rounded A."""
    k, n, block = 64, 3, 32
    weight = nbits_weight(RNG, 4, block, k, n, None)
    op = MatMulNBits(K=k, N=n, bits=4, block_size=block, accuracy_level=4)
    a = torch.from_numpy(RNG.standard_normal((2, k)).astype(F32)).requires_grad_()
    y = op.forward(a, torch.from_numpy(weight["B"]), torch.from_numpy(weight["scales"]))
    dy = torch.from_numpy(RNG.standard_normal((2, n)).astype(F32))
    y.backward(dy)
    w = op.dequantize(
        torch.from_numpy(weight["B"]), torch.from_numpy(weight["scales"]), None, None, k=k, n=n
    )
    np.testing.assert_allclose(a.grad.numpy(), (dy @ w).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("k", [128, 70, 4096])
def test_matmul_nbits_accuracy_level_4_rounds_a_as_onnxruntime(k):
    """At accuracy_level 4 onnxruntime's CPU kernel quantizes A to int8 per block of K (scale:
    the block's largest magnitude / 127); sonnx rounds A the same way, so the outputs agree to
    float rounding, and the gradient to A passes the rounding straight through."""
    n, block = 8, 32
    weight = nbits_weight(RNG, 4, block, k, n, "uint8")
    a = RNG.standard_normal((5, k)).astype(F32)
    attrs = {"K": k, "N": n, "bits": 4, "block_size": block}
    model = node_model("MatMulNBits", {"A": a, **weight}, ["A"], accuracy_level=4, **attrs)
    (expected,), (got,) = both(model, {"A": a})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    codes = [torch.from_numpy(weight[name]) for name in ("B", "scales", "zero_points")]
    leveled = MatMulNBits(accuracy_level=4, **attrs)
    x = torch.from_numpy(a).requires_grad_()
    leveled.forward(x, *codes).sum().backward()
    x_float = torch.from_numpy(a).requires_grad_()
    MatMulNBits(**attrs).forward(x_float, *codes).sum().backward()
    torch.testing.assert_close(x.grad, x_float.grad)


def test_matmul_nbits_passes_gradients_to_a_only():
    k, n, block = 32, 3, 16
    weight = nbits_weight(RNG, 4, block, k, n, "uint8")
    op = MatMulNBits(K=k, N=n, bits=4, block_size=block)
    arrays = [RNG.standard_normal((2, k)), weight["B"], weight["scales"], weight["zero_points"]]
    check_grad(lambda *xs: op(*xs), arrays, wrt=[0])


def test_matmul_nbits_dequantizes_a_frozen_weight_once(monkeypatch):
    k, n, block = 32, 3, 16
    weight = {
        name: torch.from_numpy(v)
        for name, v in nbits_weight(RNG, 4, block, k, n, None).items()
        if v is not None
    }
    op = MatMulNBits(K=k, N=n, bits=4, block_size=block)
    op.kernels = "torch"  # the torch path's kept weight (onnxruntime's kernel keeps its own)
    calls = []
    dequantize = op.dequantize
    monkeypatch.setattr(op, "dequantize", lambda *a, **kw: calls.append(1) or dequantize(*a, **kw))
    a = torch.randn(2, k)
    first = op.forward(a, weight["B"], weight["scales"])
    op.forward(a, weight["B"], weight["scales"])
    assert len(calls) == 1
    weight["scales"].mul_(2)  # changed in place (an optimizer step, load_states): recomputed
    np.testing.assert_allclose(op.forward(a, weight["B"], weight["scales"]), 2 * first, rtol=1e-6)
    assert len(calls) == 2


def test_matmul_nbits_training_keeps_no_float_weight_and_dequantizes_for_backward(monkeypatch):
    """QLoRA: a product that needs a gradient dequantizes in the forward and again in the
    backward, and keeps no float copy of the 4-bit weight between them or after."""
    k, n, block = 32, 3, 16
    weight = [torch.from_numpy(v) for v in nbits_weight(RNG, 4, block, k, n, "uint8").values()]
    op = MatMulNBits(K=k, N=n, bits=4, block_size=block)
    calls = []
    dequantize = op.dequantize
    monkeypatch.setattr(op, "dequantize", lambda *a, **kw: calls.append(1) or dequantize(*a, **kw))
    a = torch.randn(2, k, requires_grad=True)
    with torch.enable_grad():
        y = op.forward(a, *weight)
    assert len(calls) == 1 and op._weight._kept is None
    y.sum().backward()
    assert len(calls) == 2
    w = dequantize(*weight, None, k=k, n=n)
    torch.testing.assert_close(a.grad, torch.ones(2, n) @ w)


def test_matmul_nbits_import_export_is_the_same_node():
    k, n = 32, 4
    weight = nbits_weight(RNG, 4, 16, k, n, "uint8")
    feeds = {"A": RNG.standard_normal((2, k)).astype(F32)}
    model = node_model(
        "MatMulNBits", {**feeds, **weight}, feeds, shapes=((2, n),), K=k, N=n, bits=4, block_size=16
    )
    xs = {"A": Tensor(data=feeds["A"], requires_grad=False)}
    exported = sonnx.to_onnx(list(xs.values()), sonnx.prepare(model).run(xs))
    assert list(exported.graph.node) == list(model.graph.node)
    assert ("com.microsoft", 1) in {(o.domain, o.version) for o in exported.opset_import}
    np.testing.assert_allclose(ort_run(exported, feeds)[0], ort_run(model, feeds)[0])


@pytest.mark.parametrize(
    ("attrs", "shape", "message"),
    [
        ({"bits": 3}, (4, 2, 8), "bits must be 2, 4 or 8"),
        ({"block_size": 24}, (4, 2, 8), "power of 2"),
        ({}, (4, 2, 6), r"B must be uint8 of shape \(4, 2, 8\)"),
    ],
)
def test_matmul_nbits_rejects_bad_weights(attrs, shape, message):
    op = MatMulNBits(**{"K": 32, "N": 4, "bits": 4, "block_size": 16, **attrs})
    b = torch.zeros(shape, dtype=torch.uint8)
    with pytest.raises(BadInputError, match=message):
        op.forward(torch.zeros(1, 32), b, torch.ones(8))


def test_matmul_nbits_rejects_a_of_the_wrong_width():
    op = MatMulNBits(K=32, N=4, block_size=16)
    with pytest.raises(BadInputError, match=r"last dimension is K=32, .* shape \(1, 30\)"):
        op.forward(torch.zeros(1, 30), torch.zeros(4, 2, 8, dtype=torch.uint8), torch.ones(8))


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("with_zero_points", [False, True])
def test_gather_block_quantized_uint8_matches_onnxruntime(bits, with_zero_points):
    rows, width, block = 10, 64, 16  # width logical values: width * bits / 8 bytes a row
    blocks = width // block
    table = {
        "data": RNG.integers(0, 256, (rows, width * bits // 8)).astype(np.uint8),
        "scales": RNG.uniform(0.01, 0.1, (rows, blocks)).astype(F32),
        "zero_points": RNG.integers(0, 256, (rows, -(-blocks * bits // 8))).astype(np.uint8)
        if with_zero_points
        else None,
    }
    indices = {"indices": np.array([[3, 0, -1], [9, 3, 5]], dtype=np.int64)}
    inputs = {"data": table.pop("data"), **indices, **table}
    model = node_model(
        "GatherBlockQuantized", inputs, indices, quantize_axis=1, block_size=block, bits=bits
    )
    (expected,), (got,) = both(model, indices)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.parametrize("dtype", [ml_dtypes.int4, ml_dtypes.uint4])
@pytest.mark.parametrize(("gather_axis", "quantize_axis"), [(0, 1), (1, 0)])
def test_gather_block_quantized_int4_matches_onnxruntime(dtype, gather_axis, quantize_axis):
    shape, block = (32, 48), 16
    low = -8 if dtype == ml_dtypes.int4 else 0
    scale_shape = list(shape)
    scale_shape[quantize_axis] //= block
    inputs = {
        "data": RNG.integers(low, low + 16, shape).astype(dtype),
        "indices": np.array([5, 0, 7, 5], dtype=np.int32),
        "scales": RNG.uniform(0.01, 0.1, scale_shape).astype(F32),
        "zero_points": RNG.integers(low, low + 16, scale_shape).astype(dtype),
    }
    model = node_model(
        "GatherBlockQuantized",
        inputs,
        ["indices"],
        gather_axis=gather_axis,
        quantize_axis=quantize_axis,
        block_size=block,
    )
    (expected,), (got,) = both(model, {"indices": inputs["indices"]})
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_gather_block_quantized_rejects_indices_out_of_range():
    op = GatherBlockQuantized(block_size=16, quantize_axis=1)
    data = torch.zeros(4, 8, dtype=torch.uint8)
    with pytest.raises(BadInputError, match=r"indices must lie in \[-4, 3\]"):
        op.forward(data, torch.tensor([1, 4]), torch.ones(4, 1))


def _int8(dtype, *shape):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def _dynamic_quantize_matmul(b: np.ndarray, per_column: bool, optional: bool):
    """A DynamicQuantizeMatMul node on the weights ``b`` (K, N), and its feeds."""
    n = b.shape[1]
    shape = (n,) if per_column else ()
    inputs = {
        "A": RNG.standard_normal((2, 3, b.shape[0])).astype(F32),
        "B": b,
        "b_scale": RNG.uniform(0.01, 0.1, shape).astype(F32),
        "b_zero_point": _int8(b.dtype, *shape) if optional else None,
        "bias": RNG.standard_normal(n).astype(F32) if optional else None,
    }
    return node_model("DynamicQuantizeMatMul", inputs, ["A"]), {"A": inputs["A"]}


@pytest.mark.parametrize("b_dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("optional", [False, True])
def test_dynamic_quantize_matmul_equals_onnxruntime(b_dtype, per_column, optional):
    # int8 weights in 7 bits, where onnxruntime's uint8 x int8 product is exact on every x86 CPU
    # (tests/contrib_quant_helpers.py); the test below covers all 8 bits.
    b = int8_weights_7_bits(RNG, 24, 7) if b_dtype == np.int8 else _int8(np.uint8, 24, 7)
    model, feeds = _dynamic_quantize_matmul(b, per_column, optional)
    (expected,), (got,) = both(model, feeds)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("optional", [False, True])
def test_dynamic_quantize_matmul_full_int8_range_equals_exact_reference(per_column, optional):
    """int8 weights over all 8 bits, whose products with uint8 onnxruntime saturates in int16
    on x86 without VNNI: sonnx's torch path equals the exact product, scaled in onnxruntime's
    order (by default onnxruntime's own kernel runs: test_ort_integer_kernels.py)."""
    model, feeds = _dynamic_quantize_matmul(_int8(np.int8, 24, 7), per_column, optional)
    (got,) = sonnx.prepare(model, kernels="torch").run(list(feeds.values()))
    np.testing.assert_array_equal(got.numpy(), reference_run(model, feeds)[0])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("per_column", [False, True])
def test_matmul_integer_to_float_equals_onnxruntime(dtype, per_column):
    k, n = 20, 6
    shape = (n,) if per_column else ()
    inputs = {
        "A": _int8(dtype, 4, k),
        "B": _int8(dtype, k, n),
        "a_scale": np.array(0.03, F32),
        "b_scale": RNG.uniform(0.01, 0.1, shape).astype(F32),
        "a_zero_point": _int8(dtype),
        "b_zero_point": _int8(dtype, *shape),
        "bias": RNG.standard_normal(n).astype(F32),
    }
    model = node_model("MatMulIntegerToFloat", inputs, ["A"])
    (expected,), (got,) = both(model, {"A": inputs["A"]})
    np.testing.assert_array_equal(got, expected)


def test_matmul_integer_to_float_rejects_float_a():
    op = MatMulIntegerToFloat()
    with pytest.raises(BadInputError, match=r"input A must be int8 or uint8, received float32"):
        op.forward(torch.zeros(2, 3), torch.zeros(3, 2, dtype=torch.int8), *[torch.ones(())] * 2)
