"""Normalization and dropout: forward against torch / numpy, gradients, errors, export form."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import helper
from onnx.reference import ReferenceEvaluator

import sonnx.autograd as autograd
from sonnx.errors import BadInputError, ExportError
from sonnx.operators.normalization.batch import (
    LRN,
    BatchNormalization,
    Dropout,
    GroupNormalization,
    InstanceNormalization,
    LayerNormalization,
    LpNormalization,
    MeanVarianceNormalization,
    RMSNormalization,
    batch_norm,
    batchnorm_2d,
    dropout,
    group_norm,
    instance_norm,
    layer_norm,
    lp_norm,
    lrn,
    mean_variance_norm,
    rms_norm,
)
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor
from tests.helpers import check_grad

rng = np.random.default_rng(0)


def t(a) -> Tensor:
    return Tensor(data=np.asarray(a), requires_grad=False)


def randn(*shape: int, dtype=np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def bn_params(c: int, dtype=np.float32) -> list[np.ndarray]:
    return [
        randn(c, dtype=dtype),
        randn(c, dtype=dtype),
        randn(c, dtype=dtype),
        rng.uniform(0.5, 2.0, c).astype(dtype),
    ]


# ---- BatchNormalization ----------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(4, 3), (4, 3, 5), (2, 3, 4, 5), (2, 3, 2, 3, 2)])
def test_batchnorm_inference_matches_torch(shape):
    x = randn(*shape)
    scale, bias, mean, var = bn_params(shape[1])
    y = batch_norm(t(x), t(scale), t(bias), t(mean), t(var), epsilon=1e-3)
    ref = torch.nn.functional.batch_norm(
        torch.from_numpy(x), *map(torch.from_numpy, (mean, var, scale, bias)), eps=1e-3
    )
    np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


def test_batchnorm_2d_training_updates_running_stats_in_place():
    x = randn(8, 3, 4, 4)
    scale, bias, mean, var = bn_params(3)
    running_mean, running_var = t(mean.copy()), t(var.copy())
    autograd.training = True
    y = batchnorm_2d(t(x), t(scale), t(bias), running_mean, running_var, momentum=0.8)
    batch_mean = x.mean(axis=(0, 2, 3))
    batch_var = x.var(axis=(0, 2, 3))
    np.testing.assert_allclose(running_mean.numpy(), 0.8 * mean + 0.2 * batch_mean, rtol=1e-5)
    np.testing.assert_allclose(running_var.numpy(), 0.8 * var + 0.2 * batch_var, rtol=1e-5)
    p = (1, 3, 1, 1)
    ref = (x - batch_mean.reshape(p)) / np.sqrt(batch_var.reshape(p) + 1e-5)
    ref = ref * scale.reshape(p) + bias.reshape(p)
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4, atol=1e-5)


def test_batchnorm_2d_inference_uses_running_stats_and_leaves_them():
    x = randn(2, 3, 4, 4)
    scale, bias, mean, var = bn_params(3)
    running_mean = t(mean.copy())
    y = batchnorm_2d(t(x), t(scale), t(bias), running_mean, t(var))
    p = (1, 3, 1, 1)
    ref = (x - mean.reshape(p)) / np.sqrt(var.reshape(p) + 1e-5) * scale.reshape(p)
    np.testing.assert_allclose(y.numpy(), ref + bias.reshape(p), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(running_mean.numpy(), mean)


def test_batchnorm_v9_training_outputs_and_v6_is_test():
    x = randn(4, 2, 3)
    scale, bias, mean, var = bn_params(2)
    op = BatchNormalization(version=9, momentum=0.5, epsilon=1e-2)
    op.requested_outputs = 5
    y, rm, rv, sm, sv = op(*map(t, (x, scale, bias, mean, var)))
    np.testing.assert_allclose(sm.numpy(), x.mean(axis=(0, 2)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sv.numpy(), x.var(axis=(0, 2)), rtol=1e-5)
    np.testing.assert_allclose(rm.numpy(), 0.5 * mean + 0.5 * x.mean(axis=(0, 2)), rtol=1e-5)
    assert y.shape == x.shape and rv.shape == (2,)
    test_op = BatchNormalization(version=6, is_test=1)
    test_op.requested_outputs = 1
    y6 = test_op(*map(t, (x, scale, bias, mean, var)))
    p = (1, 2, 1)
    ref = (x - mean.reshape(p)) / np.sqrt(var.reshape(p) + 1e-5) * scale.reshape(p)
    np.testing.assert_allclose(y6.numpy(), ref + bias.reshape(p), rtol=1e-4, atol=1e-5)


def test_batchnorm_spatial_zero_normalizes_each_activation():
    x = randn(5, 2, 3)
    scale, bias, mean, var = (randn(2, 3), randn(2, 3), randn(2, 3), np.ones((2, 3), "f"))
    op = BatchNormalization(version=7, spatial=0)
    op.requested_outputs = 3
    y, rm, _ = op(*map(t, (x, scale, bias, mean, var)))
    ref = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5) * scale + bias
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rm.numpy(), 0.9 * mean + 0.1 * x.mean(0), rtol=1e-5, atol=1e-6)
    with pytest.raises(ExportError, match="spatial"):
        op.export(GraphBuilder(13), ["x", "s", "b", "m", "v"], ["y", "rm", "rv"])


def test_batchnorm_float16_and_large_epsilon():
    x = randn(4, 3, 2, dtype=np.float16)
    scale, bias, mean, var = bn_params(3, np.float16)
    y = batch_norm(t(x), t(scale), t(bias), t(mean), t(var), epsilon=10.0)
    assert y.dtype == torch.float16
    p = (1, 3, 1)
    x32, m32, v32 = x.astype("f"), mean.astype("f").reshape(p), var.astype("f").reshape(p)
    ref = (x32 - m32) / np.sqrt(v32 + 10.0) * scale.astype("f").reshape(p)
    ref = ref + bias.astype("f").reshape(p)
    np.testing.assert_allclose(y.numpy().astype("f"), ref, rtol=1e-2, atol=1e-2)


def test_batchnorm_training_gradients():
    scale, bias, mean, var = (a.astype(np.float64) for a in bn_params(3))
    x = rng.standard_normal((4, 3, 2))

    def fn(x_, s_, b_):
        op = BatchNormalization(training_mode=1)
        return op(x_, s_, b_, t(mean), t(var))[0]

    check_grad(fn, [x, scale, bias])


def test_batchnorm_bad_inputs():
    x = randn(2, 3, 4)
    with pytest.raises(BadInputError, match="scale must hold 3 values"):
        batch_norm(t(x), t(randn(4)), *map(t, bn_params(3)[1:]))
    with pytest.raises(BadInputError, match="floating-point"):
        batch_norm(t(x.astype(np.int64)), *map(t, bn_params(3)))
    with pytest.raises(BadInputError, match="4-D"):
        batchnorm_2d(t(x), *map(t, bn_params(3)))


def test_batchnorm_export_forms():
    op = BatchNormalization(training_mode=1)
    op.inputs = ()
    g = GraphBuilder(15)
    op.export(g, ["x", "s", "b", "m", "v"], ["y", "rm", "rv"])
    node = g.nodes[0]
    assert list(node.output) == ["y", "rm", "rv"]
    assert {a.name: a.i for a in node.attribute}["training_mode"] == 1
    old = GraphBuilder(6)
    BatchNormalization(version=15).export(old, ["x", "s", "b", "m", "v"], ["y"])
    assert {a.name: a.i for a in old.nodes[0].attribute if a.name == "is_test"} == {"is_test": 1}
    imported = BatchNormalization(version=6, is_test=1, spatial=1, consumed_inputs=[0])
    g15 = GraphBuilder(15)
    imported.export(g15, ["x", "s", "b", "m", "v"], ["y"])
    names = {a.name for a in g15.nodes[0].attribute}
    assert names == {"epsilon", "momentum", "training_mode"}


# ---- Instance / Group / Layer / RMS normalization ----------------------------------------------
def test_instance_norm_matches_torch_and_gradients():
    x, scale, bias = randn(2, 3, 4, 5), randn(3), randn(3)
    y = instance_norm(t(x), t(scale), t(bias), epsilon=1e-3)
    ref = torch.nn.functional.instance_norm(
        torch.from_numpy(x), weight=torch.from_numpy(scale), bias=torch.from_numpy(bias), eps=1e-3
    )
    np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)
    check_grad(
        lambda a, s, b: instance_norm(a, s, b),
        [rng.standard_normal((2, 2, 3)), rng.standard_normal(2), rng.standard_normal(2)],
    )
    with pytest.raises(BadInputError, match="at least 3-D"):
        instance_norm(t(randn(2, 3)), t(scale), t(bias))


def test_instance_norm_v1_exports_without_consumed_inputs():
    g = GraphBuilder(13)
    InstanceNormalization(version=1, consumed_inputs=[0, 0], epsilon=1e-3).export(
        g, ["x", "s", "b"], ["y"]
    )
    assert [(a.name, a.f) for a in g.nodes[0].attribute] == [("epsilon", pytest.approx(1e-3))]


def test_group_norm_v21_matches_torch_and_gradients():
    x, scale, bias = randn(2, 6, 4), randn(6), randn(6)
    y = group_norm(t(x), t(scale), t(bias), num_groups=3, epsilon=1e-4)
    ref = torch.nn.functional.group_norm(
        torch.from_numpy(x), 3, torch.from_numpy(scale), torch.from_numpy(bias), eps=1e-4
    )
    np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)
    check_grad(
        lambda a, s, b: group_norm(a, s, b, 2),
        [rng.standard_normal((2, 4, 3)), rng.standard_normal(4), rng.standard_normal(4)],
    )
    with pytest.raises(BadInputError, match="num_groups"):
        group_norm(t(x), t(scale), t(bias), num_groups=4)


def test_group_norm_v18_takes_per_group_scale():
    x, scale, bias = randn(2, 4, 3), randn(2), randn(2)
    y = GroupNormalization(version=18, num_groups=2)(t(x), t(scale), t(bias))
    ref = torch.nn.functional.group_norm(
        torch.from_numpy(x),
        2,
        torch.from_numpy(np.repeat(scale, 2)),
        torch.from_numpy(np.repeat(bias, 2)),
        eps=1e-5,
    )
    np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)


def _run_exported(
    op, inputs: list[np.ndarray], opset: int, runtime: str = "reference"
) -> list[np.ndarray]:
    """Export one recorded op at ``opset``; run it with onnx's reference evaluator or ORT."""
    g = GraphBuilder(opset)
    out_type = helper.np_dtype_to_tensor_dtype(inputs[0].dtype)
    names = [f"in{i}" for i in range(len(inputs))]
    outputs = [f"out{i}" for i in range(op.num_outputs)]
    op.export(g, names, outputs)
    graph = helper.make_graph(
        g.nodes,
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in zip(names, inputs, strict=True)
        ],
        [helper.make_tensor_value_info(n, out_type, None) for n in outputs],
        initializer=g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    feeds = dict(zip(names, inputs, strict=True))
    if runtime == "reference":
        return ReferenceEvaluator(model).run(None, feeds)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("version,opset", [(None, 13), (None, 21), (18, 13), (18, 18)])
def test_group_norm_export_runs(version, opset):
    x = randn(2, 4, 3)
    per = 2 if version == 18 else 4
    scale, bias = randn(per), randn(per)
    op = GroupNormalization(version=version, num_groups=2)
    y = op(t(x), t(scale), t(bias))
    (got,) = _run_exported(op, [x, scale, bias], opset)
    np.testing.assert_allclose(got, y.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axis", [0, 1, -1, 2])
def test_layer_norm_matches_torch(axis):
    x = randn(2, 3, 4)
    ax = axis % 3
    scale, bias = randn(*x.shape[ax:]), randn(*x.shape[ax:])
    y = layer_norm(t(x), t(scale), t(bias), axis=axis, epsilon=1e-3)
    ref = torch.nn.functional.layer_norm(
        torch.from_numpy(x), x.shape[ax:], torch.from_numpy(scale), torch.from_numpy(bias), 1e-3
    )
    np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)


def test_layer_norm_optional_outputs_gradients_and_export():
    x, scale = randn(2, 3, 4), randn(4)
    op = LayerNormalization(axis=-1)
    op.requested_outputs = 3
    y, mean, inv = op(t(x), t(scale))
    assert mean.shape == (2, 3, 1) and inv.dtype == torch.float32
    np.testing.assert_allclose(mean.numpy(), x.mean(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(inv.numpy(), 1 / np.sqrt(x.var(-1, keepdims=True) + 1e-5), rtol=1e-4)
    for opset in (13, 17, 18):
        got = _run_exported(op, [x, scale], opset)
        for a, b in zip(got, (y, mean, inv), strict=True):
            np.testing.assert_allclose(a, b.numpy(), rtol=1e-4, atol=1e-5)
    check_grad(
        lambda a, s, b: layer_norm(a, s, b, axis=1),
        [rng.standard_normal((2, 2, 3)), rng.standard_normal((2, 3)), rng.standard_normal(3)],
    )
    with pytest.raises(BadInputError, match="Scale must broadcast"):
        layer_norm(t(x), t(randn(3)))


def test_rms_norm_forward_gradients_and_export():
    x, scale = randn(2, 3, 4), randn(3, 4)
    y = rms_norm(t(x), t(scale), axis=1, epsilon=1e-3)
    ref = x / np.sqrt((x**2).mean(axis=(1, 2), keepdims=True) + 1e-3) * scale
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4, atol=1e-5)
    check_grad(lambda a, s: rms_norm(a, s), [rng.standard_normal((2, 3)), rng.standard_normal(3)])
    op = RMSNormalization(axis=1, epsilon=1e-3)
    op(t(x), t(scale))
    for opset in (13, 23):
        (got,) = _run_exported(op, [x, scale], opset)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


# ---- LpNormalization, MeanVarianceNormalization, LRN ---------------------------------------------
@pytest.mark.parametrize("p", [1, 2])
def test_lp_norm_forward_zero_vector_and_gradients(p):
    x = randn(3, 4)
    x[1] = 0
    y = lp_norm(t(x), axis=1, p=p)
    norm = np.linalg.norm(x, ord=p, axis=1, keepdims=True)
    ref = np.where(norm == 0, 0, x / np.where(norm == 0, 1, norm))
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-6)
    check_grad(lambda a: lp_norm(a, axis=0, p=p), [rng.uniform(0.5, 1.5, (3, 2))])
    with pytest.raises(BadInputError, match="p must be 1 or 2"):
        LpNormalization(p=3)(t(x))


def test_mean_variance_norm_and_gradients():
    x = randn(2, 3, 4, 4)
    y = mean_variance_norm(t(x))
    mean, std = x.mean(axis=(0, 2, 3), keepdims=True), x.std(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(y.numpy(), (x - mean) / (std + 1e-9), rtol=1e-4, atol=1e-5)
    check_grad(lambda a: MeanVarianceNormalization(axes=[1])(a), [rng.standard_normal((2, 3))])


@pytest.mark.parametrize("size", [3, 4])
def test_lrn_matches_onnx_window(size):
    x = randn(2, 5, 3, 3)
    y = lrn(t(x), size, alpha=1e-2, beta=0.5, bias=2.0)
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    square_sum = np.zeros_like(x)
    for c in range(5):
        square_sum[:, c] = (x[:, max(0, c - before) : min(5, c + after + 1)] ** 2).sum(axis=1)
    ref = x / (2.0 + 1e-2 / size * square_sum) ** 0.5
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-6)
    check_grad(lambda a: LRN(size=size, alpha=0.5)(a), [rng.standard_normal((1, 4, 2))])
    with pytest.raises(BadInputError, match="size must be positive"):
        LRN(size=0)(t(x))


# ---- Dropout -------------------------------------------------------------------------------------
def test_dropout_is_identity_in_inference():
    x = randn(3, 4)
    np.testing.assert_array_equal(dropout(t(x), 0.5).numpy(), x)


def test_dropout_training_scales_kept_values():
    x = np.ones((200, 50), np.float32)
    autograd.training = True
    y = dropout(t(x), 0.25).numpy()
    kept = y != 0
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)
    assert abs(kept.mean() - 0.75) < 0.02


def test_dropout_training_mode_input_and_seeded_mask():
    x = randn(3, 4, 5)
    op = Dropout(seed=0)
    op.requested_outputs = 2
    y, mask = op(t(x), t(np.float32(0.75)), t(np.bool_(True)))
    np.random.seed(0)
    ref_mask = np.random.uniform(0, 1.0, x.shape) >= 0.75
    np.testing.assert_array_equal(mask.numpy(), ref_mask)
    np.testing.assert_allclose(y.numpy(), ref_mask * x * 4, rtol=1e-6)
    autograd.training = True
    off = Dropout()(t(x), t(np.float32(0.5)), t(np.bool_(False)))
    np.testing.assert_array_equal(off.numpy(), x)


def test_dropout_gradient_and_bad_ratio():
    check_grad(lambda a: dropout(a, 0.3, seed=3), [rng.standard_normal((4, 3))])
    with pytest.raises(BadInputError, match=r"ratio must be in \[0, 1\)"):
        dropout(t(randn(2)), 1.5)


def test_dropout_export_forms():
    op = Dropout()
    op(t(randn(2, 2)), t(np.float32(0.2)))
    new = GraphBuilder(13)
    op.export(new, ["x", "r"], ["y"])
    assert list(new.nodes[0].input) == ["x", "r"]
    old = GraphBuilder(6)
    op.export(old, ["x", "r"], ["y"])
    attrs = {a.name: a for a in old.nodes[0].attribute}
    assert list(old.nodes[0].input) == ["x"] and attrs["is_test"].i == 1
    assert attrs["ratio"].f == pytest.approx(0.2)


@pytest.mark.parametrize("opset", [7, 11, 13, 22])
def test_exported_dropout_is_identity_in_onnxruntime(opset):
    x = randn(3, 4)
    autograd.training = True
    op = Dropout()
    op(t(x), t(np.float32(0.4)))
    inputs = [x, np.array(0.4, np.float32)] if opset >= 12 else [x]
    (got,) = _run_exported(op, inputs, opset, runtime="onnxruntime")
    np.testing.assert_array_equal(got, x)


@pytest.mark.parametrize("opset", [9, 15])
def test_exported_batchnorm_runs_in_onnxruntime(opset):
    x = randn(2, 3, 4)
    params = bn_params(3)
    op = BatchNormalization(epsilon=1e-3)
    y = op(*map(t, (x, *params)))
    (got,) = _run_exported(op, [x, *params], opset, runtime="onnxruntime")
    np.testing.assert_allclose(got, y.numpy(), rtol=1e-5, atol=1e-5)


def _one_node_model(op_type: str, opset: int, inputs: dict, n_out: int, **attrs):
    node = helper.make_node(op_type, list(inputs), [f"y{i}" for i in range(n_out)], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in inputs.items()
        ],
        [helper.make_tensor_value_info(f"y{i}", 0, None) for i in range(n_out)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize(
    "opset,attrs,active,mask_dtype",
    [
        (6, {"is_test": 1, "ratio": 0.3}, False, torch.float32),
        (6, {"ratio": 0.3}, True, torch.float32),
        (7, {"ratio": 0.3}, True, torch.float32),
        (10, {"ratio": 0.3}, True, torch.bool),
    ],
)
def test_imported_old_dropout_records_modern_form(opset, attrs, active, mask_dtype):
    import sonnx

    x = np.ones((40, 50), np.float32)
    rep = sonnx.prepare(_one_node_model("Dropout", opset, {"x": x}, 2, **attrs))
    autograd.training = True
    y, mask = rep.run({"x": x})
    assert mask.dtype == mask_dtype
    dropped = (y.numpy() == 0).mean()
    assert (0.2 < dropped < 0.4) if active else dropped == 0
    np.testing.assert_array_equal(mask.numpy() != 0, y.numpy() != 0)


def test_imported_batchnorm_v7_mode_follows_output_count():
    import sonnx

    x = randn(4, 3, 2)
    scale, bias, mean, var = bn_params(3)
    feeds = {"x": x, "s": scale, "b": bias, "m": mean, "v": var}
    (y,) = sonnx.prepare(_one_node_model("BatchNormalization", 7, feeds, 1)).run(feeds)
    p = (1, 3, 1)
    ref = (x - mean.reshape(p)) / np.sqrt(var.reshape(p) + 1e-5) * scale.reshape(p)
    np.testing.assert_allclose(y.numpy(), ref + bias.reshape(p), rtol=1e-4, atol=1e-5)
    outs = sonnx.prepare(_one_node_model("BatchNormalization", 7, feeds, 5)).run(feeds)
    np.testing.assert_allclose(outs[3].numpy(), x.mean(axis=(0, 2)), rtol=1e-5, atol=1e-6)


def test_layer_norm_reuses_its_checks_for_a_seen_signature_only():
    """One operator object run again on the same shapes takes the fused kernel without
    checking again; other shapes are checked (and a bad one still named)."""
    op = LayerNormalization(axis=-1, epsilon=1e-3)
    x, scale, bias = randn(2, 3, 4), randn(4), randn(4)
    first = op(t(x), t(scale), t(bias)).numpy()
    assert op._fused is not None
    np.testing.assert_array_equal(op(t(x), t(scale), t(bias)).numpy(), first)
    ref = torch.nn.functional.layer_norm(
        torch.from_numpy(x), (4,), torch.from_numpy(scale), torch.from_numpy(bias), 1e-3
    )
    np.testing.assert_allclose(first, ref.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(BadInputError, match="Scale must broadcast"):
        op(t(x), t(randn(3)), t(bias))
    wider = randn(2, 5)
    with pytest.raises(BadInputError, match="Scale must broadcast"):
        op(t(wider), t(scale), t(bias))
    op.requested_outputs = 3
    y, mean, _ = op(t(x), t(scale), t(bias))
    assert mean.shape == (2, 3, 1)
    np.testing.assert_allclose(y.numpy(), first, rtol=1e-5, atol=1e-6)
