"""Convolution, pooling, normalization, indexing, loss, resize, quantization and attention ops
export: a tiny model per op passes the full ONNX checker and onnxruntime (or, for ops newer
than onnxruntime, onnx's reference evaluator) matches sonnx at batch 2 and 5."""

from __future__ import annotations

import numpy as np
import pytest

import sonnx.autograd as ag
from tests.onnx.export_check import const, export_check, param, rng_inputs

F, I64 = np.float32, np.int64


def w(*shape: int, scale: float = 1.0):
    """A float parameter whose values depend only on its shape (the same on every build)."""
    values = np.random.default_rng(list(shape)).standard_normal(shape) * scale
    return param(values.astype(F))


def positive(*shape: int):
    return param(np.random.default_rng(list(shape)).uniform(0.5, 1.5, shape).astype(F))


def ints(high: int, dtype=I64):
    """Input generator: integers in [0, high)."""
    return lambda rng, shape: rng.integers(0, high, shape).astype(dtype)


def unit(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(0.05, 0.95, shape).astype(F)


def img(*rest: int):
    return rng_inputs((rest, F))


def case(id_: str, build, make, **opts):
    return pytest.param(build, make, opts, id=id_)


def _max_pool_with_indices(x):
    op = ag.MaxPool(kernel_shape=[2, 2], strides=[2, 2])
    op.requested_outputs = 2
    return op(x)


def _unpool(x):
    y, indices = _max_pool_with_indices(x)
    return ag.max_unpool(y, indices, 2)


CONV = [
    case("conv1d", lambda x: ag.conv1d(x, w(4, 3, 3), w(4), 2, 1), img(3, 9)),
    case("conv2d", lambda x: ag.conv2d(x, w(4, 3, 3, 3), w(4), 1, 1), img(3, 6, 6)),
    case("conv2d_no_bias", lambda x: ag.conv2d(x, w(4, 3, 1, 1)), img(3, 5, 5)),
    case(
        "conv2d_dilation_stride_asymmetric_pads",
        lambda x: ag.conv2d(x, w(4, 3, 3, 3), w(4), (2, 1), [1, 0, 2, 1], 2),
        img(3, 9, 8),
    ),
    case("conv2d_groups", lambda x: ag.conv2d(x, w(6, 2, 3, 3), w(6), 1, 1, 1, 2), img(4, 6, 6)),
    case(
        "conv2d_depthwise",
        lambda x: ag.conv2d(x, w(4, 1, 3, 3), None, 1, 1, 1, 4),
        img(4, 5, 5),
    ),
    case("conv3d", lambda x: ag.conv3d(x, w(2, 3, 2, 2, 2), w(2), 1, 1), img(3, 4, 4, 4)),
    case(
        "conv_transpose1d",
        lambda x: ag.conv_transpose1d(x, w(3, 2, 3), w(2), 2, 1, 1),
        img(3, 5),
    ),
    case(
        "conv_transpose2d",
        lambda x: ag.conv_transpose2d(x, w(4, 3, 3, 3), w(3), 2, 1, 1),
        img(4, 4, 4),
    ),
    case(
        "conv_transpose2d_groups_dilation",
        lambda x: ag.conv_transpose2d(x, w(4, 1, 2, 2), None, 1, 0, 0, 2, 2),
        img(4, 3, 3),
    ),
    case(
        "conv_transpose3d",
        lambda x: ag.conv_transpose3d(x, w(2, 2, 2, 2, 2), w(2), 2),
        img(2, 2, 2, 2),
    ),
    case(
        "deform_conv2d",
        lambda x, o: ag.deform_conv2d(x, w(3, 2, 3, 3), o, w(3)),
        rng_inputs(((2, 5, 5), F), ((18, 3, 3), F)),
        rtol=1e-4,
    ),
    case("col2im", lambda x: ag.col2im(x, [4, 4], [2, 2]), img(8, 9)),
]

POOL = [
    case("max_pool1d", lambda x: ag.max_pool1d(x, 3, 2, 1), img(2, 9)),
    case("max_pool2d", lambda x: ag.max_pool2d(x, 2), img(3, 6, 6)),
    case(
        "max_pool2d_ceil_dilation_asymmetric_pads",
        lambda x: ag.max_pool2d(x, 3, 2, [1, 0, 0, 1], True, 2),
        img(2, 9, 8),
    ),
    case("max_pool3d", lambda x: ag.max_pool3d(x, 2, 1), img(2, 4, 4, 4)),
    case("max_pool2d_with_indices", _max_pool_with_indices, img(2, 4, 6)),
    case("max_unpool", _unpool, img(2, 4, 6)),
    case("avg_pool1d", lambda x: ag.avg_pool1d(x, 3, 2, 1), img(2, 9)),
    case("avg_pool2d", lambda x: ag.avg_pool2d(x, 2), img(3, 6, 6)),
    case(
        "avg_pool2d_exclude_pad_ceil_asymmetric",
        lambda x: ag.avg_pool2d(x, 3, 2, [1, 0, 0, 1], True, False),
        img(2, 8, 7),
    ),
    case("avg_pool2d_dilation", lambda x: ag.avg_pool2d(x, 2, 1, 0, dilation=2), img(2, 6, 6)),
    case("avg_pool3d", lambda x: ag.avg_pool3d(x, 2), img(2, 4, 4, 4)),
    case("lp_pool2d", lambda x: ag.lp_pool2d(x, 2, 2), img(3, 6, 6)),
    case("globalaveragepool", ag.globalaveragepool, img(3, 5, 4)),
    case("globalmaxpool", ag.globalmaxpool, img(3, 5, 4)),
    # Neither onnxruntime 1.31 nor onnx's reference evaluator runs GlobalLpPool-22 (the default
    # opset's form), so the check runs at opset 21 (GlobalLpPool-2).
    case("globallppool_opset21", lambda x: ag.globallppool(x, 3), img(3, 5, 4), opset=21),
]

NORM = [
    case(
        "batch_norm_eval",
        lambda x: ag.batch_norm(x, positive(3), w(3), w(3), positive(3)),
        img(3, 4, 4),
    ),
    case(
        "batchnorm_2d_eval",
        lambda x: ag.batchnorm_2d(
            x, positive(3), w(3), const(np.zeros(3, F)), const(np.ones(3, F))
        ),
        img(3, 4, 4),
    ),
    case("instance_norm", lambda x: ag.instance_norm(x, positive(3), w(3)), img(3, 4, 4)),
    case("group_norm", lambda x: ag.group_norm(x, positive(4), w(4), 2), img(4, 3, 3), rtol=1e-4),
    case("layer_norm", lambda x: ag.layer_norm(x, positive(5), w(5)), img(3, 5)),
    case(
        "layer_norm_axis_1_no_bias",
        lambda x: ag.layer_norm(x, positive(3, 5), None, 1),
        img(3, 5),
    ),
    case("lp_norm", lambda x: ag.lp_norm(x, 1, 2), img(3, 5)),
    case("lrn", lambda x: ag.lrn(x, 3), img(5, 3, 3)),
    case("mean_variance_norm", ag.mean_variance_norm, img(3, 4, 4), rtol=1e-4),
    case("rms_norm", lambda x: ag.rms_norm(x, positive(5)), img(3, 5)),
    case("dropout_eval_is_identity", lambda x: ag.dropout(x, 0.3), img(3, 5)),
]

INDEXING = [
    case("argmax", lambda x: ag.argmax(x, 1), img(3, 4)),
    case("argmin_last_index", lambda x: ag.argmin(x, 2, 0, 1), rng_inputs(((3, 4), ints(2)))),
    case("compress", lambda x: ag.compress(x, const([True, False, True]), 1), img(3, 4)),
    case("gather_constant_indices", lambda x: ag.gather(x, 1, [0, 2]), img(3, 4)),
    case(
        "gather_embedding",
        lambda ids: ag.gather(w(10, 4), 0, ids),
        rng_inputs(((3,), ints(10))),
    ),
    case(
        "gather_elements",
        lambda x, i: ag.gather_elements(x, i, 2),
        rng_inputs(((3, 4), F), ((3, 2), ints(4))),
    ),
    case(
        "gather_nd_batch_dims",
        lambda x, i: ag.gather_nd(x, i, 1),
        rng_inputs(((3, 4), F), ((2, 1), ints(3))),
    ),
    case(
        "non_max_suppression",
        lambda b, s: ag.non_max_suppression(b, s, 2, 0.3, 0.1),
        rng_inputs(((6, 4), unit), ((1, 6), unit)),
    ),
    case("nonzero", ag.nonzero, rng_inputs(((3, 4), ints(2)))),
    case(
        "onehot",
        lambda i: ag.onehot(-1, i, 4, const(np.array([0.0, 1.0], F))),
        rng_inputs(((3,), ints(4))),
    ),
    case(
        "scatter_elements_add",
        lambda x, i, u: ag.scatter_elements(x, i, u, 1, "add"),
        rng_inputs(((3, 4), F), ((2, 4), ints(3)), ((2, 4), F)),
    ),
    case(
        "scatter_nd",
        lambda x: ag.scatter_nd(x, [[0]], w(1, 3, 4), "add"),
        img(3, 4),
    ),
    case(
        "tensor_scatter",
        lambda c, u, i: ag.tensor_scatter(c, u, i),
        rng_inputs(((5, 4), F), ((2, 4), F), ((), ints(3))),
    ),
    case("topk", lambda x: ag.topk(x, 2, 1), img(4, 3)),
    case("topk_smallest", lambda x: ag.topk(x, 3, -1, False), img(2, 5)),
    case("unique", ag.unique, rng_inputs(((4,), ints(5)))),
]

LOSSES = [
    case(
        "nll_loss",
        ag.nll_loss,
        rng_inputs(((4,), F), ((), ints(4))),
    ),
    case(
        "nll_loss_weight_sum_ignore",
        lambda x, t: ag.nll_loss(x, t, positive(4), "sum", 1),
        rng_inputs(((4, 3), F), ((3,), ints(4))),
    ),
    case(
        "softmax_cross_entropy_loss",
        ag.softmax_cross_entropy_loss,
        rng_inputs(((5,), F), ((), ints(5))),
    ),
    case(
        "softmax_cross_entropy_loss_none",
        lambda x, t: ag.softmax_cross_entropy_loss(x, t, None, "none"),
        rng_inputs(((5, 2), F), ((2,), ints(5))),
    ),
    case("mse_loss", ag.mse_loss, rng_inputs(((4,), F), ((4,), F))),
    case("binary_cross_entropy", ag.binary_cross_entropy, rng_inputs(((4,), unit), ((4,), unit))),
    case("cross_entropy", ag.cross_entropy, rng_inputs(((4,), unit), ((4,), unit))),
    case("softmax_cross_entropy", ag.softmax_cross_entropy, rng_inputs(((4,), F), ((4,), unit))),
]

ROIS = np.array([[0, 0, 3, 3], [1, 1, 5, 4]], F)
RESIZE = [
    # AffineGrid's size input holds the batch size, so the trace at batch 2 only runs at 2.
    case(
        "affine_grid",
        lambda t: ag.affine_grid(t, [2, 1, 3, 4]),
        rng_inputs(((2, 3), F)),
        batches=(2,),
    ),
    case(
        "grid_sample",
        lambda x, g: ag.grid_sample(x, g),
        rng_inputs(((2, 4, 4), F), ((3, 3, 2), F)),
    ),
    case("resize_linear_scales", lambda x: ag.resize(x, [1, 1, 2, 2], mode="linear"), img(2, 3, 3)),
    case(
        "resize_nearest_sizes_axes",
        lambda x: ag.resize(x, sizes=[5, 7], axes=[2, 3]),
        img(2, 3, 3),
    ),
    # onnxruntime 1.31 has no RoiAlign-22 kernel: reference evaluator at the default opset,
    # onnxruntime at opset 21 (RoiAlign-16).
    *(
        case(
            f"roi_align_opset{opset}",
            lambda x: ag.roi_align(x, const(ROIS), const(np.array([0, 1])), (2, 2)),
            img(2, 6, 6),
            opset=opset,
            runtime=runtime,
        )
        for opset, runtime in ((None, "reference"), (21, "onnxruntime"))
    ),
    case("upsample", lambda x: ag.upsample(x, 2), img(2, 3, 3)),
]

QUANTIZE = [
    case(
        "quantize_linear",
        lambda x: ag.quantize_linear(x, const(np.float32(0.02)), const(np.uint8(128))),
        img(3, 4),
    ),
    case(
        "quantize_linear_per_axis",
        lambda x: ag.quantize_linear(x, const(np.array([0.01, 0.02, 0.03], F)), None, 1),
        img(3, 4),
    ),
    case(
        "dequantize_linear",
        lambda x: ag.dequantize_linear(x, const(np.float32(0.5)), const(np.uint8(3))),
        rng_inputs(((3, 4), ints(255, np.uint8))),
    ),
    case("dynamic_quantize_linear", ag.dynamic_quantize_linear, img(3, 4)),
]

ATTENTION = [
    case("attention", ag.attention, rng_inputs(*[((2, 3, 4), F)] * 3), rtol=1e-4),
    case(
        "attention_causal_3d_heads",
        lambda q, k, v: ag.attention(q, k, v, is_causal=True, num_heads=2),
        rng_inputs(*[((3, 8), F)] * 3),
        rtol=1e-4,
    ),
    case(
        "attention_bool_mask",
        lambda q, k, v, m: ag.attention(q, k, v, m),
        rng_inputs(*[((2, 3, 4), F)] * 3, ((1, 3, 3), lambda r, s: r.random(s) < 0.8)),
        rtol=1e-4,
    ),
    case(
        "rotary_embedding",
        lambda x, p: ag.rotary_embedding(x, w(8, 2), w(8, 2), p),
        rng_inputs(((2, 3, 4), F), ((3,), ints(8))),
    ),
    # Opset-27 operators: onnxruntime 1.31 stops at opset 26, so onnx's reference evaluator runs.
    case(
        "causal_conv_with_state",
        lambda x: ag.causal_conv_with_state(x, w(3, 1, 3), w(3)),
        img(3, 5),
        opset=27,
        runtime="reference",
    ),
    case(
        "linear_attention",
        lambda q, k, v: ag.linear_attention(q, k, v, 2, 2),
        rng_inputs(*[((3, 8), F)] * 3),
        opset=27,
        runtime="reference",
        rtol=1e-4,
    ),
]

# Operators newer than the target opset that export as a decomposition into older ops.
OLDER_OPSETS = [
    case("gelu_opset17", ag.gelu, img(5), opset=17),
    case("gelu_tanh_opset11", lambda x: ag.gelu(x, "tanh"), img(5), opset=11),
    case("mish_opset17", ag.mish, img(5), opset=17),
    case("hardswish_opset13", ag.hardswish, img(5), opset=13),
    case("swish_opset23", ag.swish, img(5), opset=23),
    case("layer_norm_opset16", lambda x: ag.layer_norm(x, positive(5), w(5)), img(5), opset=16),
    case("rms_norm_opset21", lambda x: ag.rms_norm(x, positive(5)), img(3, 5), opset=21),
    case(
        "attention_opset22",
        lambda q, k, v: ag.attention(q, k, v, num_heads=2),
        rng_inputs(*[((3, 8), F)] * 3),
        opset=22,
        rtol=1e-4,
    ),
    case(
        "group_norm_opset17", lambda x: ag.group_norm(x, positive(4), w(4), 2), img(4, 3), opset=17
    ),
]

ALL = CONV + POOL + NORM + INDEXING + LOSSES + RESIZE + QUANTIZE + ATTENTION + OLDER_OPSETS


@pytest.mark.parametrize(("build", "make", "opts"), ALL)
def test_op_exports_and_matches_onnxruntime(build, make, opts) -> None:
    export_check(build, make, **opts)
