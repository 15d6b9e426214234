"""Conv chains run as oneDNN calls in eager inference (see :mod:`sonnx.runtime.conv_fusions`):
the same values as node by node, refreshed when a weight changes, and out of the way of
training, graph mode and anything but CPU float32."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

import sonnx
from sonnx import autograd, opt
from sonnx.engine.tracing import value_checks
from sonnx.errors import BadInputError
from sonnx.runtime import conv_fusions
from sonnx.tensor import Tensor, to_numpy
from sonnx.testing import torch_models as tm
from tests.onnx.export_check import ort_session


class Net(nn.Module):
    """Every kind of group: BatchNorm (kept or folded by the exporter), each activation,
    depthwise and dilated convs, lone convs chained to the conv before them or groups by
    themselves (before a residual Add, after a Mul), squeeze-excite; then Flatten, Reshape
    and Transpose of conv maps."""

    def __init__(self) -> None:
        super().__init__()

        def cbn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, dil: int = 1):
            pad = dil * (k // 2)
            conv = nn.Conv2d(cin, cout, k, stride, pad, dil, groups, bias=False)
            return nn.Sequential(conv, nn.BatchNorm2d(cout))

        self.stem = nn.Sequential(cbn(3, 8, 3, 2), nn.ReLU())
        self.a = nn.Sequential(cbn(8, 8, 3), nn.ReLU6())
        self.b = cbn(8, 8, 1)  # chained after a
        self.down = nn.Conv2d(8, 8, 1)  # lone: a group by itself, before the Add
        self.dw = nn.Sequential(cbn(8, 8, 3, groups=8), nn.Hardswish())
        self.pw = nn.Sequential(cbn(8, 16, 1), nn.SiLU())
        self.dil = nn.Sequential(nn.Conv2d(16, 16, 3, padding=2, dilation=2), nn.LeakyReLU(0.1))
        self.lone = nn.Conv2d(16, 16, 1)  # chained after the LeakyRelu group
        self.se_down = nn.Sequential(nn.Conv2d(16, 4, 1), nn.ReLU())
        self.se_up = nn.Sequential(nn.Conv2d(4, 16, 1), nn.Hardsigmoid())
        self.gate = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.Sigmoid())
        self.proj = nn.Conv2d(16, 8, 1)  # lone, read twice: a group by itself
        self.head = nn.Linear(8, 5)
        for bn in (m for m in self.modules() if isinstance(m, nn.BatchNorm2d)):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 1.5)
            bn.weight.data.uniform_(0.5, 1.5)
            bn.bias.data.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.stem(x)
        x = torch.relu(self.b(self.a(x)) + self.down(x))
        x = self.pw(x + self.dw(x))
        x = self.lone(self.dil(x))
        x = x * self.se_up(self.se_down(x.mean((2, 3), keepdim=True)))
        y = self.proj(x * self.gate(x))
        pooled = y.mean((2, 3), keepdim=True)
        return self.head(pooled.flatten(1)), y.permute(0, 2, 3, 1).reshape(y.shape[0], -1, 8)


def export(keep_batchnorm: bool, opset: int = 17, double: bool = False) -> onnx.ModelProto:
    torch.manual_seed(0)
    net = Net().double() if double else Net()
    x = torch.randn(2, 3, 16, 16, dtype=torch.float64 if double else torch.float32)
    axes = {"x": {0: "n", 2: "h", 3: "w"}, "logits": {0: "n"}, "pixels": {0: "n", 1: "hw"}}
    return tm.export(
        net, (x,), opset, ["x"], ["logits", "pixels"], keep_batchnorm=keep_batchnorm,
        dynamic_axes=axes,
    )  # fmt: skip


def is_conv_group(fusion) -> bool:
    return isinstance(fusion.compute, conv_fusions.ConvChain)


def unfused(model: onnx.ModelProto) -> sonnx.SingaRep:
    """``model`` prepared without its conv groups: node by node."""
    rep = sonnx.prepare(model)
    rep.program.unfuse(is_conv_group)
    return rep


def conv_groups(rep: sonnx.SingaRep) -> list[str]:
    return sorted(f.name for f in rep.program.fusions.values() if is_conv_group(f))


def image(n: int = 2, h: int = 16, w: int = 16, seed: int = 0, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3, h, w)).astype(dtype)


def assert_close(got: list, want: list, rtol: float = 1e-4) -> None:
    """Equal within ``rtol`` of each output's largest value."""
    for g, w in zip(got, want, strict=True):
        g, w = (to_numpy(v) if isinstance(v, Tensor) else v for v in (g, w))
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * float(np.abs(w).max()))


@pytest.fixture
def fused_calls(monkeypatch) -> list[bool]:
    """Whether each unit call took the oneDNN path (its ``fused`` gave a result)."""
    calls: list[bool] = []
    original = conv_fusions._Unit.fused

    def spy(self, x, args):
        assert value_checks(), "a traced run must not reach the oneDNN path"
        result = original(self, x, args)
        calls.append(result is not None)
        return result

    monkeypatch.setattr(conv_fusions._Unit, "fused", spy)
    return calls


@pytest.mark.parametrize("keep_batchnorm", [True, False])
def test_groups_are_found_and_match_node_by_node_and_onnxruntime(keep_batchnorm, fused_calls):
    model = export(keep_batchnorm)
    rep, plain = sonnx.prepare(model), unfused(model)
    names = conv_groups(rep)
    joined = "+".join(names)
    for part in ["Relu", "Hardtanh", "Hardswish", "Swish", "LeakyRelu", "Sigmoid", "Hardsigmoid"]:
        assert part in joined, (part, names)
    assert ("BatchNorm" in joined) == keep_batchnorm
    assert "LeakyRelu+Conv" in joined  # the lone 1x1 conv rides with the group before it
    assert names.count("Conv") == 2  # the lone convs, each a group by itself
    session = ort_session(model)
    for shape in [(2, 16, 16), (1, 16, 16), (3, 24, 32), (2, 16, 16)]:
        x = image(*shape)
        fused = rep.run([x])
        assert_close(fused, plain.run([x]))
        assert_close(fused, session.run(None, {"x": x}))
    assert fused_calls and all(fused_calls)


def test_weight_updates_in_place_or_replaced_refresh_the_prepared_weights(fused_calls):
    model = export(keep_batchnorm=True)
    rep, plain = sonnx.prepare(model), unfused(model)
    x = image()
    rep.run([x])
    bn = next(n for n in model.graph.node if n.op_type == "BatchNormalization")
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    with torch.no_grad():  # in place (an optimizer step, set_states): the version changes
        for r in (rep, plain):
            r.constants[conv.input[1]].data.mul_(1.5)
            r.constants[bn.input[3]].data.add_(0.25)
    assert_close(rep.run([x]), plain.run([x]))
    for r in (rep, plain):  # a new tensor (load_states, a device move): the identity changes
        scale = r.constants[bn.input[1]]
        scale.data = scale.data * -2.0
    assert_close(rep.run([x]), plain.run([x]))
    assert all(fused_calls)


def test_training_runs_the_nodes_and_follows_the_same_trajectory(fused_calls):
    """Fine-tuning with BatchNorm in training form: the same losses, weights and running
    statistics with and without the fusions; inference afterwards sees the trained values."""
    model = export(keep_batchnorm=True)
    results = []
    for fuse in (True, False):
        net = sonnx.SONNXModel(model)
        if not fuse:
            net.rep.program.unfuse(is_conv_group)
        sgd = opt.SGD(lr=0.05, momentum=0.9)
        net.train()
        losses = []
        for step in range(3):
            x = Tensor(data=image(4, seed=step), requires_grad=False)
            labels = Tensor(data=np.arange(4) % 5, requires_grad=False)
            loss = autograd.softmax_cross_entropy(net.forward(x)[0], labels)
            sgd(loss)
            losses.append(to_numpy(loss).item())
        net.eval()
        states = {k: to_numpy(v).copy() for k, v in net.get_states().items()}
        results.append((losses, states, to_numpy(net.forward(image(2, seed=9))[0])))
    (fused_losses, fused_states, fused_out), (losses, states, out) = results
    # Two models prepared apart: torch's CPU kernels may sum in another order for other
    # buffers (a CI run once had the first losses 7e-6 apart). A fusion used in training
    # would move the first loss by 9e-4 (running statistics for the batch's) and leave the
    # running statistics unchanged.
    np.testing.assert_allclose(fused_losses, losses, rtol=5e-5)
    assert fused_states.keys() == states.keys()
    for name, value in states.items():
        np.testing.assert_allclose(fused_states[name], value, rtol=1e-4, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(fused_out, out, rtol=1e-4, atol=1e-4 * np.abs(out).max())
    assert fused_calls and all(fused_calls)  # only the last, inference run was offered


def test_gradients_through_the_groups_match_node_by_node():
    model = export(keep_batchnorm=False)
    grads = []
    for rep in (sonnx.prepare(model), unfused(model)):
        autograd.training = True
        x = Tensor(data=image(), requires_grad=False)
        logits, pixels = rep.run([x])
        loss = autograd.add(
            autograd.reduce_sum(autograd.mul(logits, logits), keepdims=0),
            autograd.reduce_sum(pixels, keepdims=0),
        )
        grads.append({p.name: to_numpy(g) for p, g in autograd.backward(loss)})
        autograd.training = False
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 10
    for name, g in grads[0].items():
        np.testing.assert_array_equal(g, grads[1][name], err_msg=name)


def test_graph_mode_traces_plain_convolutions(fused_calls):
    """The groups are traced through their nodes (the spy fails a traced oneDNN call). The
    first-run check is off: its eager run of the steps takes the oneDNN path, as eager runs
    do. One input shape: a plain compile is the quicker one (its symbolic n, h and w took
    about two minutes of the suite's time; the groups are traced the same way either way)."""
    model = export(keep_batchnorm=True)
    graph = sonnx.prepare(model, use_graph=True, verify=False)
    graph.graph_runner.dynamic = False
    assert conv_groups(graph)
    x = image()
    for _ in range(2):
        assert_close(graph.run([x]), unfused(model).run([x]))
    assert graph.graph_runner.fallback is None
    assert fused_calls == []


def test_float64_and_other_inputs_run_the_nodes(fused_calls):
    model = export(keep_batchnorm=True, double=True)
    rep = sonnx.prepare(model)
    assert conv_groups(rep)
    x = image(dtype=np.float64)
    fused = rep.run([x])
    assert to_numpy(fused[0]).dtype == np.float64
    assert_close(fused, unfused(model).run([x]), rtol=1e-12)
    assert fused_calls == []  # never offered to oneDNN


def test_bad_inputs_are_reported_by_the_conv_node(fused_calls):
    w = np.ones((4, 3, 3, 3), np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], name="the_conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"], name="the_relu"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "c", "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")],
    )
    rep = sonnx.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert conv_groups(rep) == ["ConvRelu"]
    np.testing.assert_allclose(
        to_numpy(rep.run([np.ones((1, 3, 1, 1), np.float32)])[0]).ravel(), [3.0] * 4
    )
    with pytest.raises(BadInputError, match="node 'the_conv' \\(Conv"):
        rep.run([np.zeros((1, 5, 8, 8), np.float32)])
    assert fused_calls == [True, False]


def test_cuts_and_requests_inside_a_group_run_its_nodes():
    model = export(keep_batchnorm=True)
    rep, plain = sonnx.prepare(model), unfused(model)
    x = image()
    every = plain.run([x], all_outputs=True)
    fusion = next(f for f in rep.program.fusions.values() if "BatchNorm" in f.name)
    assert len(fusion.intermediates) >= 2
    for name in fusion.intermediates:
        (value,) = rep.run([x], output=name)
        assert_close([value], [every[name]])


def conv_model(
    nodes: list, weights: dict[str, np.ndarray], rank: int = 4, opset: int = 17
) -> onnx.ModelProto:
    """A graph of ``nodes`` from input ``x`` (every dim symbolic) to output ``y``."""
    dims = ["n", "c", "h", "w", "d"][:rank]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_same_upper_and_asymmetric_pads_are_padded_first(fused_calls):
    rng = np.random.default_rng(0)
    weights = {f"w{i}": rng.standard_normal((6, 6, 3, 3)).astype(np.float32) for i in range(3)}
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["a"], auto_pad="SAME_UPPER", strides=[2, 2]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Conv", ["b", "w1"], ["c"], pads=[0, 1, 1, 2]),
        helper.make_node("HardSwish", ["c"], ["d"]),
        helper.make_node("Conv", ["d", "w2"], ["y"], auto_pad="SAME_LOWER", strides=[2, 1]),
    ]
    model = conv_model(nodes, weights)
    rep = sonnx.prepare(model)
    assert conv_groups(rep) == ["ConvRelu+ConvHardswish+Conv"]
    for shape in [(1, 6, 9, 10), (2, 6, 16, 7)]:
        x = rng.standard_normal(shape).astype(np.float32)
        want = ort_session(model).run(None, {"x": x})
        assert_close(rep.run([x]), want)
        assert_close(rep.run([x]), unfused(model).run([x]))
    assert fused_calls and all(fused_calls)


def test_one_and_three_dimensional_convs_run_as_nodes(fused_calls):
    rng = np.random.default_rng(1)
    for rank in (3, 5):
        kernel = (2, 3, *[3] * (rank - 2))
        w = {"w": rng.standard_normal(kernel).astype(np.float32)}
        nodes = [
            helper.make_node("Conv", ["x", "w"], ["c"], strides=[1] * (rank - 2)),
            helper.make_node("Relu", ["c"], ["y"]),
        ]
        model = conv_model(nodes, w, rank)
        rep = sonnx.prepare(model)
        assert conv_groups(rep) == []
        x = rng.standard_normal((2, 3, *[6] * (rank - 2))).astype(np.float32)
        assert_close(rep.run([x]), ort_session(model).run(None, {"x": x}))
    assert fused_calls == []


def test_weights_computed_from_constants_are_fused_too(fused_calls):
    """torch's exporter shares equal weights through Identity nodes: folded steps, whose
    kept result is the same tensor run after run."""
    rng = np.random.default_rng(2)
    weights = {"w": rng.standard_normal((4, 4, 1, 1)).astype(np.float32)}
    nodes = [
        helper.make_node("Identity", ["w"], ["w_shared"]),
        helper.make_node("Conv", ["x", "w_shared"], ["c"]),
        helper.make_node("Clip", ["c"], ["y"], min=0.0, max=6.0),
    ]
    model = conv_model(nodes, weights, opset=10)
    rep = sonnx.prepare(model)
    assert conv_groups(rep) == ["ConvHardtanh"]
    x = rng.standard_normal((1, 4, 5, 5)).astype(np.float32) * 4
    for _ in range(2):
        assert_close(rep.run([x]), ort_session(model).run(None, {"x": x}))
    assert fused_calls == [True, True]


ONE_PIXEL_ACTIVATIONS = {
    "none": [],
    "relu": [helper.make_node("Relu", ["c"], ["y"])],
    "sigmoid": [helper.make_node("Sigmoid", ["c"], ["y"])],
    "swish": [
        helper.make_node("Sigmoid", ["c"], ["s"]),
        helper.make_node("Mul", ["c", "s"], ["y"]),
    ],
    "hardswish": [helper.make_node("HardSwish", ["c"], ["y"])],
    "hardsigmoid": [helper.make_node("HardSigmoid", ["c"], ["y"], alpha=1 / 6, beta=0.5)],
    "hardtanh": [helper.make_node("Clip", ["c", "lo", "hi"], ["y"])],
    "leaky_relu": [helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.1)],
}


@pytest.mark.parametrize("activation", list(ONE_PIXEL_ACTIVATIONS))
@pytest.mark.parametrize("batchnorm", [False, True])
def test_one_pixel_convs_are_matrix_products_with_the_activation_after(
    activation, batchnorm, fused_calls, monkeypatch
):
    """Squeeze-and-excitation's 1x1 convs of a pooled image skip oneDNN's per-call set-up;
    padded ones (whose output is larger than the pixel) and strided ones stay exact."""
    rng = np.random.default_rng(3)
    weights = {
        "w": rng.standard_normal((5, 4, 1, 1)).astype(np.float32),
        "b": rng.standard_normal(5).astype(np.float32),
        "lo": np.array(-0.5, np.float32),
        "hi": np.array(0.75, np.float32),
        "scale": rng.uniform(0.5, 1.5, 5).astype(np.float32),
        "shift": rng.standard_normal(5).astype(np.float32),
        "mean": rng.standard_normal(5).astype(np.float32),
        "var": rng.uniform(0.5, 1.5, 5).astype(np.float32),
    }
    conv_out = "n" if batchnorm else ("c" if ONE_PIXEL_ACTIVATIONS[activation] else "y")
    nodes = [
        helper.make_node("GlobalAveragePool", ["x"], ["p"]),
        helper.make_node("Conv", ["p", "w", "b"], [conv_out], strides=[2, 2]),
        *ONE_PIXEL_ACTIVATIONS[activation],
    ]
    if batchnorm:
        after = "c" if ONE_PIXEL_ACTIVATIONS[activation] else "y"
        inputs = ["n", "scale", "shift", "mean", "var"]
        nodes.insert(2, helper.make_node("BatchNormalization", inputs, [after]))
    model = conv_model(nodes, weights)
    rep = sonnx.prepare(model)
    assert len(conv_groups(rep)) == 1
    convolutions: list[bool] = []
    pointwise = torch.ops.mkldnn._convolution_pointwise

    def counting(*args):
        convolutions.append(True)
        return pointwise(*args)

    monkeypatch.setattr(torch.ops.mkldnn, "_convolution_pointwise", counting)
    for n in (1, 3):
        x = rng.standard_normal((n, 4, 6, 7)).astype(np.float32)
        (y,) = rep.run([x])
        assert y.shape == (n, 5, 1, 1)
        assert_close([y], ort_session(model).run(None, {"x": x}), rtol=1e-5)
        assert_close([y], unfused(model).run([x]), rtol=1e-5)
    assert fused_calls == [True, True] and convolutions == []


def test_a_padded_conv_of_one_pixel_is_still_a_convolution(fused_calls):
    rng = np.random.default_rng(4)
    weights = {"w": rng.standard_normal((3, 4, 1, 1)).astype(np.float32)}
    nodes = [
        helper.make_node("GlobalAveragePool", ["x"], ["p"]),
        helper.make_node("Conv", ["p", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    model = conv_model(nodes, weights)
    x = rng.standard_normal((2, 4, 5, 5)).astype(np.float32)
    (y,) = sonnx.prepare(model).run([x])
    assert y.shape == (2, 3, 3, 3)
    assert_close([y], ort_session(model).run(None, {"x": x}))
    assert fused_calls == [True]


def test_weights_are_packed_per_image_size_then_used_plain(fused_calls, monkeypatch):
    """A weight packed for one image size is slow at another (oneDNN's generic reorder at every
    call): each of the first sizes gets its own pack, later sizes the plain weight; all agree."""
    monkeypatch.setattr(conv_fusions, "_PACKS_KEPT", 2)
    model = export(keep_batchnorm=True)
    rep, plain = sonnx.prepare(model), unfused(model)
    sizes = [(16, 16), (24, 32), (16, 16), (20, 12), (32, 16)]
    for n, (h, w) in enumerate(sizes):
        x = image(1 + n % 2, h, w, seed=n)
        assert_close(rep.run([x]), plain.run([x]))
    assert fused_calls and all(fused_calls)
    units = [u for f in rep.program.fusions.values() if is_conv_group(f) for u in f.compute.units]
    first = units[0]._cache
    assert list(first.packed) == [torch.Size(s) for s in sizes[:2]]
    # the squeeze-excite convs see a pooled 1x1 image at every size: a matrix, no pack
    assert sorted({len(u._cache.packed) for u in units}) == [0, 2]
    assert sum(u._cache.matrix is not None for u in units) == 2


def test_concurrent_runs_share_the_prepared_weights():
    """A server's workers run one prepared model at once, right from its first run."""
    from concurrent.futures import ThreadPoolExecutor

    model = export(keep_batchnorm=True)
    rep, plain = sonnx.prepare(model), unfused(model)
    images = [image(n, 16 + 8 * (n % 2), 16, seed=n) for n in range(1, 9)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda x: rep.run([x]), images * 2))
    for x, outputs in zip(images * 2, got, strict=True):
        assert_close(outputs, plain.run([x]))


def test_graph_mode_runs_an_untraceable_step_after_a_group_eagerly():
    """A lone Conv (a group of one step) before NonZero (its output shape depends on values):
    graph mode compiles the group and runs NonZero eagerly."""
    w = {"w": np.random.default_rng(3).standard_normal((2, 3, 3, 3)).astype(np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("NonZero", ["c"], ["y"]),
    ]
    model = conv_model(nodes, w)
    eager = sonnx.prepare(model)
    assert conv_groups(eager) == ["Conv"]
    graph = sonnx.prepare(model, use_graph=True)
    x = image(1, 6, 6)
    want = np.stack(np.nonzero(to_numpy(unfused(model).run([x], output="c")[0])))
    np.testing.assert_array_equal(to_numpy(eager.run([x])[0]), want)
    with pytest.warns(RuntimeWarning, match="NonZero"):
        np.testing.assert_array_equal(to_numpy(graph.run([x])[0]), want)
    assert "NonZero" in (graph.graph_runner.fallback or "")
