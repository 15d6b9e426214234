"""Adagrad, Adam and Momentum (ai.onnx.preview.training) against ONNX's reference update rules."""

from __future__ import annotations

import numpy as np
import pytest
from onnx.backend.test.case.node.adagrad import apply_adagrad
from onnx.backend.test.case.node.adam import apply_adam
from onnx.backend.test.case.node.momentum import apply_momentum, apply_nesterov

import sonnx
from sonnx.errors import BadInputError
from sonnx.onnx.exporter import to_onnx
from sonnx.operators.training.updates import TRAINING_DOMAIN, Momentum, adagrad, adam, momentum
from sonnx.tensor import Tensor

rng = np.random.default_rng(0)


def t(a) -> Tensor:
    return Tensor(data=np.asarray(a), requires_grad=False)


def arrays(n: int, groups: int) -> list[list[np.ndarray]]:
    shapes = [(3,), (2, 2), ()][:n]
    return [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(groups)]


def tensors(groups: list[list[np.ndarray]]) -> list[list[Tensor]]:
    return [[t(a) for a in g] for g in groups]


@pytest.mark.parametrize("step", [0, 3])
def test_adagrad_matches_reference(step):
    xs, gs, hs = arrays(3, 3)
    hs = [np.abs(h) for h in hs]
    out = adagrad(0.1, step, *tensors([xs, gs, hs]), decay_factor=0.1, norm_coefficient=0.01)
    assert len(out) == 6
    for i in range(3):
        x_new, h_new = apply_adagrad(np.float32(0.1), step, xs[i], gs[i], hs[i], 0.01, 1e-6, 0.1)
        np.testing.assert_allclose(out[i].numpy(), x_new, rtol=1e-5)
        np.testing.assert_allclose(out[3 + i].numpy(), h_new, rtol=1e-5)


@pytest.mark.parametrize("step", [0, 4])
def test_adam_matches_reference(step):
    xs, gs, vs, hs = arrays(2, 4)
    hs = [np.abs(h) for h in hs]
    out = adam(
        0.05,
        step,
        *tensors([xs, gs, vs, hs]),
        alpha=0.8,
        beta=0.9,
        norm_coefficient=0.01,
        norm_coefficient_post=0.02,
    )
    assert len(out) == 6
    for i in range(2):
        expected = apply_adam(
            np.float32(0.05), step, xs[i], gs[i], vs[i], hs[i], 0.01, 0.02, 0.8, 0.9, 1e-6
        )
        for k, e in enumerate(expected):
            np.testing.assert_allclose(out[2 * k + i].numpy(), e, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("mode", ["standard", "nesterov"])
@pytest.mark.parametrize("step", [0, 2])
def test_momentum_matches_reference(mode, step):
    xs, gs, vs = arrays(2, 3)
    out = momentum(
        0.1, step, *tensors([xs, gs, vs]), alpha=0.9, beta=0.5, mode=mode, norm_coefficient=0.01
    )
    rule = apply_momentum if mode == "standard" else apply_nesterov
    for i in range(2):
        x_new, v_new = rule(np.float32(0.1), step, xs[i], gs[i], vs[i], 0.01, 0.9, 0.5)
        np.testing.assert_allclose(out[i].numpy(), x_new, rtol=1e-5)
        np.testing.assert_allclose(out[2 + i].numpy(), v_new, rtol=1e-5)


def test_updates_carry_no_gradient():
    sonnx.autograd.training = True
    x = Tensor(data=np.ones(3, np.float32), requires_grad=True, stores_grad=True)
    (x_new, _) = momentum(0.1, 1, [x], [t(np.ones(3, np.float32))], [t(np.zeros(3, np.float32))])
    assert not x_new.data.requires_grad


def test_export_writes_the_training_domain():
    groups = arrays(1, 3)
    xs, gs, hs = (
        [Tensor(data=a[0], requires_grad=False, name=f"{n}0")]
        for n, a in zip("xgh", groups, strict=True)
    )
    out = adagrad(0.1, 1, xs, gs, hs)
    model = to_onnx([xs[0], gs[0], hs[0]], out)
    node = model.graph.node[0]
    assert (node.op_type, node.domain) == ("Adagrad", TRAINING_DOMAIN)
    assert {o.domain: o.version for o in model.opset_import}[TRAINING_DOMAIN] == 1
    rep = sonnx.prepare(model)
    got = rep.run({"x0": xs[0].numpy(), "g0": gs[0].numpy(), "h0": hs[0].numpy()})
    for g, e in zip(got, out, strict=True):
        np.testing.assert_allclose(g.numpy(), e.numpy())


def test_bad_inputs():
    one = [t(np.ones(2, np.float32))]
    with pytest.raises(BadInputError, match="equal lengths"):
        adagrad(0.1, 0, one, one * 2, one)
    with pytest.raises(BadInputError, match="3 equally long groups"):
        Momentum(alpha=0.9, beta=1.0, mode="standard", norm_coefficient=0.0)(
            t(np.float32(0.1)), t(np.int64(0)), *one, *one
        )
    with pytest.raises(BadInputError, match="required attributes are missing"):
        Momentum(alpha=0.9)(t(np.float32(0.1)), t(np.int64(0)), *one, *one, *one)
    with pytest.raises(BadInputError, match="mode must be"):
        momentum(0.1, 0, one, one, one, mode="heavy")
    with pytest.raises(BadInputError, match="G1 must be a float tensor of X1's shape"):
        adagrad(0.1, 0, one, [t(np.ones(3, np.float32))], one)
