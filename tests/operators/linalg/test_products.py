"""Linear algebra and scans: forward vs NumPy/onnx.reference, gradients, errors, export."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import helper
from onnx.reference import ReferenceEvaluator

from sonnx.errors import BadInputError, ExportError
from sonnx.operators.linalg import products as la
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor
from tests.helpers import check_grad

RNG = np.random.default_rng(0)


def _tensor(a) -> Tensor:
    return Tensor(data=np.asarray(a), requires_grad=False)


def _reference(op_type: str, inputs: list[np.ndarray | None], opset: int, **attrs) -> np.ndarray:
    names = ["" if a is None else f"x{i}" for i, a in enumerate(inputs)]
    node = helper.make_node(op_type, names, ["y"], **attrs)
    present = [(n, a) for n, a in zip(names, inputs, strict=True) if a is not None]
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in present
        ],
        [helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, dict(present))[0]


@pytest.mark.parametrize(
    ("sa", "sb"),
    [
        ((3, 4), (4, 5)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((4,), (2, 4, 3)),
        ((2, 3, 4), (4,)),
        ((4,), (4,)),
    ],
)
def test_matmul_broadcasting_matches_numpy(sa, sb):
    a = RNG.standard_normal(sa).astype(np.float32)
    b = RNG.standard_normal(sb).astype(np.float32)
    np.testing.assert_allclose(la.matmul(_tensor(a), _tensor(b)).numpy(), a @ b, rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_matmul_integer_types(dtype):
    a = RNG.integers(0, 9, (2, 3)).astype(dtype)
    b = RNG.integers(0, 9, (3, 2)).astype(dtype)
    got = la.matmul(_tensor(a), _tensor(b)).numpy()
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, a @ b)


def test_matmul_gradients_with_batch_broadcasting():
    check_grad(la.matmul, [RNG.standard_normal((2, 1, 3, 4)), RNG.standard_normal((3, 4, 2))])


@pytest.mark.parametrize(
    "attrs",
    [{}, {"transA": 1}, {"transB": 1}, {"alpha": 0.5, "beta": 2.0, "transA": 1, "transB": 1}],
)
@pytest.mark.parametrize("c_shape", [None, (), (1,), (5,), (3, 1), (3, 5)])
def test_gemm_matches_reference(attrs, c_shape):
    a = RNG.standard_normal((4, 3) if attrs.get("transA") else (3, 4)).astype(np.float32)
    b = RNG.standard_normal((5, 4) if attrs.get("transB") else (4, 5)).astype(np.float32)
    c = None if c_shape is None else RNG.standard_normal(c_shape).astype(np.float32)
    got = la.Gemm(**attrs)(_tensor(a), _tensor(b), None if c is None else _tensor(c)).numpy()
    np.testing.assert_allclose(
        got, _reference("Gemm", [a, b, c], 13, **attrs), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("trans", [(0, 0), (1, 1)])
def test_gemm_gradients_with_broadcast_c(trans):
    ta, tb = trans
    a = RNG.standard_normal((4, 3) if ta else (3, 4))
    b = RNG.standard_normal((5, 4) if tb else (4, 5))
    c = RNG.standard_normal((5,))

    def fn(x, y, z):
        return la.gemm(x, y, z, alpha=0.7, beta=1.3, transA=ta, transB=tb)

    check_grad(fn, [a, b, c])


def _export_and_run(
    op: la.Operator, inputs: list[np.ndarray], opset: int, out_shape: tuple[int, ...]
) -> np.ndarray:
    g = GraphBuilder(opset)
    names = [f"x{i}" for i in range(len(inputs))]
    op.export(g, names, ["y"])
    graph = helper.make_graph(
        g.nodes,
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in zip(names, inputs, strict=True)
        ],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, out_shape)],
        initializer=g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs, strict=True)))[0]


@pytest.mark.parametrize("opset", [6, 9, 13])
def test_gemm_exports_to_old_opsets(opset):
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    b = RNG.standard_normal((4, 5)).astype(np.float32)
    op = la.Gemm(alpha=2.0)
    expected = op(_tensor(a), _tensor(b)).numpy()
    np.testing.assert_allclose(
        _export_and_run(op, [a, b], opset, (3, 5)), expected, rtol=1e-5, atol=1e-6
    )
    g = GraphBuilder(opset)
    op.export(g, ["a", "b"], ["y"])
    assert len(g.nodes[0].input) == (3 if opset < 11 else 2)


@pytest.mark.parametrize(
    ("equation", "shapes"),
    [
        ("ij,jk->ik", [(2, 3), (3, 4)]),
        ("bij, bjk -> bik", [(2, 3, 4), (2, 4, 5)]),
        ("...ii->...i", [(2, 3, 3)]),
        ("ij", [(3, 4)]),
        ("ji", [(3, 4)]),
        ("i,i", [(5,), (5,)]),
        ("Ab,bA->A", [(2, 3), (3, 2)]),
    ],
)
def test_einsum_matches_numpy(equation, shapes):
    xs = [RNG.standard_normal(s).astype(np.float64) for s in shapes]
    got = la.einsum(equation, *[_tensor(x) for x in xs]).numpy()
    np.testing.assert_allclose(got, np.einsum(equation.replace(" ", ""), *xs), rtol=1e-10)


def test_einsum_gradients_and_integers():
    check_grad(
        lambda a, b: la.einsum("bij,bjk->bik", a, b),
        [RNG.standard_normal((2, 2, 3)), RNG.standard_normal((2, 3, 2))],
    )
    xi = np.arange(6, dtype=np.int32).reshape(2, 3)
    np.testing.assert_array_equal(la.einsum("ij->j", _tensor(xi)).numpy(), xi.sum(0))


def test_det_forward_gradients_and_half_precision():
    x = RNG.standard_normal((2, 3, 3))
    np.testing.assert_allclose(la.det(_tensor(x)).numpy(), np.linalg.det(x), rtol=1e-10)
    check_grad(la.det, [x])
    half = la.det(Tensor(data=torch.eye(3, dtype=torch.float16) * 2, requires_grad=False))
    assert half.dtype == torch.float16 and half.item() == 8.0


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize(("name", "fn"), [("CumSum", la.cumsum), ("CumProd", la.cumprod)])
def test_scans_match_reference(name, fn, exclusive, reverse, axis):
    x = RNG.uniform(0.5, 2.0, (3, 4))
    got = fn(_tensor(x), axis, exclusive, reverse).numpy()
    opset = 26 if name == "CumProd" else 14
    ref = _reference(name, [x, np.array(axis)], opset, exclusive=exclusive, reverse=reverse)
    np.testing.assert_allclose(got, ref, rtol=1e-12)


@pytest.mark.parametrize("fn", [la.cumsum, la.cumprod])
def test_scan_gradients(fn):
    check_grad(lambda t: fn(t, 1, 1, 1), [RNG.uniform(0.5, 2.0, (2, 4))])
    check_grad(lambda t: fn(t, 0), [RNG.uniform(0.5, 2.0, (3, 2))])


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.uint64])
def test_cumsum_integer_types(dtype):
    x = np.arange(1, 7, dtype=dtype)
    got = la.cumsum(_tensor(x), 0, exclusive=1).numpy()
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, np.concatenate([[0], np.cumsum(x)[:-1]]).astype(dtype))


def test_matmul_integer_with_zero_points():
    a = RNG.integers(0, 255, (4, 3)).astype(np.uint8)
    b = RNG.integers(0, 255, (3, 2)).astype(np.uint8)
    a_zp, b_zp = np.array(12, dtype=np.uint8), np.array([3, 7], dtype=np.uint8)
    got = la.matmul_integer(_tensor(a), _tensor(b), _tensor(a_zp), _tensor(b_zp)).numpy()
    expected = (a.astype(np.int32) - 12) @ (b.astype(np.int32) - b_zp.astype(np.int32))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, expected)


def test_qlinear_matmul_matches_reference():
    a = RNG.integers(0, 255, (2, 4)).astype(np.uint8)
    b = RNG.integers(0, 255, (4, 3)).astype(np.uint8)
    args = [
        a,
        np.array(0.0066, dtype=np.float32),
        np.array(113, dtype=np.uint8),
        b,
        np.array(0.00705, dtype=np.float32),
        np.array(114, dtype=np.uint8),
        np.array(0.0107, dtype=np.float32),
        np.array(118, dtype=np.uint8),
    ]
    got = la.qlinear_matmul(*[_tensor(x) for x in args]).numpy()
    np.testing.assert_array_equal(got, _reference("QLinearMatMul", args, 21))


def test_bad_inputs():
    with pytest.raises(BadInputError, match="MatMul: the last dimension of A"):
        la.matmul(_tensor(np.ones((2, 3))), _tensor(np.ones((4, 2))))
    with pytest.raises(BadInputError, match="MatMul: the batch dimensions"):
        la.matmul(_tensor(np.ones((2, 2, 3))), _tensor(np.ones((3, 3, 2))))
    with pytest.raises(BadInputError, match="MatMul: inputs must have at least 1 dimension"):
        la.matmul(_tensor(np.ones(())), _tensor(np.ones((3, 2))))
    with pytest.raises(BadInputError, match="MatMul: A and B must have one dtype"):
        la.matmul(_tensor(np.ones((2, 3), np.float32)), _tensor(np.ones((3, 2), np.float64)))
    with pytest.raises(BadInputError, match="Gemm: input A must be 2-D"):
        la.gemm(_tensor(np.ones(3)), _tensor(np.ones((3, 2))))
    with pytest.raises(BadInputError, match="Gemm: input C must broadcast"):
        la.gemm(_tensor(np.ones((2, 3))), _tensor(np.ones((3, 2))), _tensor(np.ones((3, 2))))
    with pytest.raises(BadInputError, match="Einsum: equation 'ij,jk->ik' does not fit"):
        la.einsum("ij,jk->ik", _tensor(np.ones((2, 3))), _tensor(np.ones((2, 3))))
    with pytest.raises(BadInputError, match="Det: input X must be"):
        la.det(_tensor(np.ones((2, 3))))
    with pytest.raises(BadInputError, match="CumSum: axis must be in"):
        la.cumsum(_tensor(np.ones((2, 3))), 2)
    with pytest.raises(BadInputError, match="MatMulInteger: input A must be int8 or uint8"):
        la.matmul_integer(_tensor(np.ones((2, 2), np.int32)), _tensor(np.ones((2, 2), np.uint8)))


def test_ops_newer_than_the_target_opset_refuse_to_export():
    op = la.CumProd()
    op(_tensor(np.ones(3)), _tensor(np.array(0)))
    with pytest.raises(ExportError, match="CumProd: no such ONNX operator at opset 20"):
        op.export(GraphBuilder(20), ["x", "axis"], ["y"])


@pytest.mark.parametrize(("k", "batched"), [(258, False), (259, False), (1000, True), (1, False)])
def test_matmul_integer_is_exact_at_the_extremes_of_8_bit_differences(k, batched):
    """The product runs as float32 GEMMs over runs of 258 terms: exact even where every
    difference is 255 and the sum passes float32's 2**24."""
    rng = np.random.default_rng(k)
    a = rng.choice(np.array([0, 255], np.uint8), (2, 3, k) if batched else (3, k))
    b = rng.choice(np.array([-128, 127], np.int8), (2, k, 4) if batched else (k, 4))
    a[..., 0, :] = 255  # a row of 255 - 0 against a column of -128 - 127: k * -65025
    b[..., :, 0] = -128
    a_zp, b_zp = np.array(0, np.uint8), np.array(127, np.int8)
    got = la.matmul_integer(_tensor(a), _tensor(b), _tensor(a_zp), _tensor(b_zp)).numpy()
    expected = (a.astype(np.int64) - 0) @ (b.astype(np.int64) - 127)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, expected)
    assert got[..., 0, 0].min() == -65025 * k
