"""Model.compile(precision=...): bf16 autocast training against float32, fp16 loss scaling.

bf16 runs in the normal suite because torch's CPU autocast supports it; fp16's loss scaling is
checked through torch's ``GradScaler``, which runs on the CPU too (torch 2.13).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sonnx
from sonnx import autograd, layer, model, opt
from sonnx.engine.backward import parameter_gradients
from sonnx.errors import BadInputError
from sonnx.opt.loss_scaler import GROWTH_TRACKER, SCALE
from sonnx.tensor import PlaceHolder, Tensor, to_numpy
from sonnx.testing import zoo_text
from sonnx.walkthrough import LayerCNN


def _const(a: np.ndarray) -> Tensor:
    return Tensor(data=a, requires_grad=False)


def _cnn_losses(precision: str, steps: int = 4) -> tuple[np.ndarray, LayerCNN, Tensor]:
    """The walkthrough CNN trained on a fixed synthetic 28x28 set (class = sign pattern of two
    image halves), batch 8, SGD with momentum."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 1, 28, 28)).astype(np.float32)
    y = (x[:, 0, :14].mean((1, 2)) > 0) + 2 * (x[:, 0, :, :14].mean((1, 2)) > 0)
    net = LayerCNN()
    net.set_optimizer(opt.SGD(0.01, momentum=0.9))
    net.compile([PlaceHolder((8, 1, 28, 28))], is_train=True, precision=precision)
    losses = []
    for step in range(steps):
        batch = slice(8 * (step % 2), 8 * (step % 2) + 8)
        out, loss = net(_const(x[batch]), _const(y[batch].astype(np.int32)))
        losses.append(float(to_numpy(loss)[0]))
    return np.array(losses), net, out


def test_compile_rejects_an_unknown_precision() -> None:
    expected = r"precision must be one of \['fp32', 'bf16', 'fp16'\], received 'half'"
    with pytest.raises(BadInputError, match=expected):
        LayerCNN().compile([PlaceHolder((8, 1, 28, 28))], precision="half")


def test_bf16_walkthrough_cnn_follows_the_float32_loss_curve() -> None:
    """bf16 keeps 8 significant bits, so each convolution and matrix product (accumulated in
    float32) is off by a relative ~2**-8 = 0.4 %; the loss, a log-sum-exp of such outputs,
    moves by about as much, and four SGD steps compound it a little. A bound of 3 % of the
    float32 loss at every step allows for that with a margin of several times, while a bf16
    run that does not train (or trains something else) leaves it at the second step."""
    fp32, _, _ = _cnn_losses("fp32")
    bf16, net, out = _cnn_losses("bf16")
    assert out.data.dtype == torch.bfloat16  # the forward really ran under autocast
    assert all(p.data.dtype == torch.float32 for p in net.get_params().values())
    np.testing.assert_allclose(bf16, fp32, rtol=0.03)
    assert bf16[-1] < bf16[0]


class _Classifier(sonnx.SONNXModel):
    """An imported BERT-style encoder with a two-class head on its pooled output."""

    def __init__(self, proto) -> None:
        super().__init__(proto)
        self.head = layer.Linear(2)

    def forward(self, *feeds: Tensor) -> Tensor:
        return self.head(super().forward(*feeds)[1])

    def train_one_batch(self, ids, mask, types, y) -> tuple[Tensor, Tensor]:
        out = self.forward(ids, mask, types)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def _bert_losses(proto, precision: str, steps: int = 4) -> np.ndarray:
    torch.manual_seed(0)
    net = _Classifier(proto)
    net.set_optimizer(opt.Adam(lr=3e-3))
    feeds = [_const(v) for v in zoo_text.text_inputs(16, 8, 100).values()]
    net.compile(feeds, is_train=True, precision=precision)
    losses = []
    for step in range(steps):
        data = zoo_text.text_inputs(16, 8, 100, seed=step % 2)
        labels = (data["input_ids"][:, 0] < 50).astype(np.int32)
        _, loss = net(*(_const(v) for v in data.values()), _const(labels))
        losses.append(float(to_numpy(loss)[0]))
    return np.array(losses)


def test_bf16_imported_bert_encoder_follows_the_float32_loss_curve() -> None:
    """The encoder's matrix products run in bf16 (relative error ~2**-8 each), its
    LayerNorms and Softmax in float32 (autocast's lists), so the cross-entropy of the 2-class
    head moves by well under 1 %; 2 % at every one of four Adam steps leaves room for the
    steps' compounding, while a different trajectory departs from it at once."""
    torch.manual_seed(0)
    encoder = zoo_text.BertEncoder(vocab=100, hidden=32, heads=2, layers=1, ffn=64, max_len=16)
    proto = zoo_text.export_bert(encoder, quantize=False)
    fp32 = _bert_losses(proto, "fp32")
    bf16 = _bert_losses(proto, "bf16")
    np.testing.assert_allclose(bf16, fp32, rtol=0.02)
    assert bf16[-1] < bf16[0]


class _Tiny(model.Model):
    def __init__(self) -> None:
        super().__init__()
        self.fc = layer.Linear(3)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(x)


def _fp16_model() -> _Tiny:
    net = _Tiny()
    net.compile([PlaceHolder((4, 5))], is_train=True, precision="fp16")
    net.set_optimizer(opt.SGD(0.1, momentum=0.9))  # after compile: still gets the scaler
    return net


def test_fp16_skips_an_overflowing_step_and_backs_off_the_scale() -> None:
    net = _fp16_model()
    sgd = net.optimizer
    scaler = sgd.loss_scaler
    assert scaler is not None and scaler.scale == 2.0**16
    rng = np.random.default_rng(0)
    x, y = _const(rng.standard_normal((4, 5)).astype(np.float32)), _const(np.arange(4) % 3)
    # A scale of 2**40 makes the float16 backward overflow (float16 stops at 65504).
    sgd.set_states({"step_counter": 0, SCALE: 2.0**40, GROWTH_TRACKER: 0})
    before = {n: to_numpy(p).copy() for n, p in net.get_params().items()}
    net(x, y)
    assert scaler.skipped_steps == 1 and sgd.step_counter == 0
    assert scaler.scale == 2.0**39
    for name, p in net.get_params().items():
        np.testing.assert_array_equal(to_numpy(p), before[name])
    assert "fc.W:momentum_buffer" not in sgd.get_states()  # no optimizer state was touched
    sgd.set_states({"step_counter": 0, SCALE: 2.0**8, GROWTH_TRACKER: 0})
    out, loss = net(x, y)
    assert out.data.dtype == torch.float16 and loss.data.dtype == torch.float32
    assert scaler.skipped_steps == 1 and sgd.step_counter == 1
    assert not np.array_equal(to_numpy(net.fc.W), before["fc.W"])
    states = sgd.get_states()
    assert float(to_numpy(states[SCALE])) == 2.0**8 and int(to_numpy(states[GROWTH_TRACKER])) == 1


def test_fp16_update_equals_the_unscaled_gradient_step() -> None:
    """With finite gradients, scaling the loss by 2**16 and unscaling the gradients gives
    the update of the unscaled loss's gradient (the first SGD step moves by lr * grad), up to
    the float16 rounding of the scaled backward."""
    net = _fp16_model()
    rng = np.random.default_rng(1)
    x, y = _const(rng.standard_normal((4, 5)).astype(np.float32)), _const(np.arange(4) % 3)
    w0, b0 = to_numpy(net.fc.W).copy(), to_numpy(net.fc.b).copy()
    autograd.training = True
    with torch.autocast("cpu", dtype=torch.float16):
        loss = net.loss_fn(net.forward(x), y)
    params, grads = parameter_gradients(loss)
    expected = {p.name: g.numpy() for p, g in zip(params, grads, strict=True)}
    net(x, y)
    for name, before in (("fc.W", w0), ("fc.b", b0)):
        step = (before - to_numpy(net.get_params()[name])) / 0.1
        np.testing.assert_allclose(step, expected[name], rtol=1e-2, atol=1e-4)
    assert net.optimizer.loss_scaler.skipped_steps == 0


class _OwnSetter(_Tiny):
    """SINGA examples' pattern: ``set_optimizer`` overridden to assign the attribute."""

    def set_optimizer(self, optimizer) -> None:
        self.optimizer = optimizer


@pytest.mark.parametrize("wrap", [False, True], ids=["optimizer", "DistOpt"])
def test_fp16_scaler_reaches_overridden_setters_and_dist_opt(wrap: bool) -> None:
    """The scaler reaches the optimizer at the training call whatever set it, and DistOpt's
    modes (one process here) skip an overflowing step like the plain optimizer."""
    net = _OwnSetter()
    net.compile([PlaceHolder((4, 5))], is_train=True, precision="fp16")
    sgd = opt.SGD(0.1)
    net.set_optimizer(opt.DistOpt(sgd) if wrap else sgd)
    rng = np.random.default_rng(2)
    x, y = _const(rng.standard_normal((4, 5)).astype(np.float32)), _const(np.arange(4) % 3)
    net(x, y)
    assert sgd.loss_scaler is not None and sgd.step_counter == 1
    sgd.set_states({"step_counter": 1, SCALE: 2.0**40, GROWTH_TRACKER: 0})
    w1 = to_numpy(net.fc.W).copy()
    net(x, y)
    assert sgd.loss_scaler.skipped_steps == 1 and sgd.step_counter == 1
    np.testing.assert_array_equal(to_numpy(net.fc.W), w1)


def test_bf16_graph_mode_traces_the_autocast_casts_like_eager() -> None:
    """Graph mode traces the forward under the step's autocast (its graphs are keyed on the
    autocast dtype), so its bf16 steps equal the eager ones (``aot_eager``: the trace, without
    inductor's minute of compiling)."""
    rng = np.random.default_rng(3)
    x, y = _const(rng.standard_normal((4, 5)).astype(np.float32)), _const(np.arange(4) % 3)
    runs = []
    for use_graph in (False, True):
        torch.manual_seed(0)
        net = _Tiny()
        net.graph_backend = "aot_eager"
        net.set_optimizer(opt.SGD(0.1))
        net.compile([PlaceHolder((4, 5))], is_train=True, use_graph=use_graph, precision="bf16")
        outs = [net(x, y) for _ in range(3)]
        assert all(out.data.dtype == torch.bfloat16 for out, _ in outs)
        runs.append([float(to_numpy(loss)[0]) for _, loss in outs])
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-6)


def test_fp16_refuses_float16_parameters() -> None:
    net = _Tiny()
    net.compile([PlaceHolder((4, 5))], is_train=True, precision="fp16")
    net.set_optimizer(opt.SGD(0.1))
    for p in net.get_params().values():
        p.data = p.data.half().requires_grad_()
    x = _const(np.ones((4, 5), np.float16))
    with pytest.raises(BadInputError, match=r"parameter fc\.\w is float16; fp16 training keeps"):
        net(x, _const(np.arange(4) % 3))
