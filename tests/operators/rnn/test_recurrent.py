"""RNN, GRU and LSTM: forward against onnxruntime, gradients, layouts, errors, export forms."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

import sonnx
from sonnx.errors import BadInputError
from sonnx.operators.rnn.recurrent import RNN, gru, lstm, rnn
from sonnx.tensor import Tensor
from tests.helpers import check_grad
from tests.onnx.export_check import export_check, param

rng = np.random.default_rng(0)
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def t(a) -> Tensor:
    return Tensor(data=np.asarray(a), requires_grad=False)


def weights(op: str, directions: int, width: int, hidden: int, dtype=np.float32) -> list:
    g = GATES[op]
    return [
        rng.standard_normal(shape).astype(dtype)
        for shape in (
            (directions, g * hidden, width),
            (directions, g * hidden, hidden),
            (directions, 2 * g * hidden),
        )
    ]


def model_inputs(op: str, directions: int, steps=4, batch=3, width=2, hidden=3, lengths=None):
    """Named arrays for every input of ``op`` (layout 0)."""
    arrays = {"X": rng.standard_normal((steps, batch, width)).astype(np.float32)}
    arrays.update(zip(("W", "R", "B"), weights(op, directions, width, hidden), strict=True))
    arrays["sequence_lens"] = np.array(lengths or [steps] * batch, dtype=np.int32)
    arrays["initial_h"] = rng.standard_normal((directions, batch, hidden)).astype(np.float32)
    if op == "LSTM":
        arrays["initial_c"] = rng.standard_normal((directions, batch, hidden)).astype(np.float32)
        arrays["P"] = rng.standard_normal((directions, 3 * hidden)).astype(np.float32)
    return arrays


def one_node_model(op: str, arrays: dict, **attrs) -> onnx.ModelProto:
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, list(arrays), outs, hidden_size=arrays["R"].shape[-1], **attrs)
    inputs = [
        helper.make_tensor_value_info(
            name, TensorProto.INT32 if a.dtype == np.int32 else TensorProto.FLOAT, a.shape
        )
        for name, a in arrays.items()
    ]
    outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs]
    graph = helper.make_graph([node], "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=9)


CASES = [
    ("RNN", {}, 1, None),
    ("RNN", {"direction": "reverse"}, 1, [4, 2, 1]),
    ("RNN", {"direction": "bidirectional", "clip": 0.5}, 2, [3, 4, 1]),
    ("RNN", {"activations": ["LeakyRelu"], "activation_alpha": [0.3]}, 1, None),
    (
        "RNN",
        {
            "activations": ["ScaledTanh", "HardSigmoid"],
            "direction": "bidirectional",
            "activation_alpha": [0.3, 0.4],
            "activation_beta": [0.2, 0.7],
        },
        2,
        None,
    ),
    ("GRU", {}, 1, [2, 4, 3]),
    ("GRU", {"linear_before_reset": 1, "direction": "bidirectional"}, 2, [1, 4, 2]),
    ("GRU", {"activations": ["HardSigmoid", "Elu"], "activation_alpha": [0.3, 0.5]}, 1, None),
    ("GRU", {"clip": 0.4, "direction": "reverse"}, 1, None),
    ("LSTM", {}, 1, [4, 1, 3]),
    # torch's fused LSTM (no lengths, peepholes, clip or custom activations):
    ("LSTM", {}, 1, None),
    ("LSTM", {"direction": "reverse"}, 1, None),
    ("LSTM", {"direction": "bidirectional"}, 2, None),
    ("LSTM", {"input_forget": 1, "clip": 0.3, "direction": "bidirectional"}, 2, [2, 4, 3]),
    (
        "LSTM",
        {
            "activations": ["HardSigmoid", "LeakyRelu", "Softsign"],
            "activation_alpha": [0.3, 0.1],
            "activation_beta": [0.6],
        },
        1,
        None,
    ),
    # ONNX Runtime takes 0 for an alpha/beta the list leaves out where ONNX's operators
    # default to other values (ThresholdedRelu, Affine, ScaledTanh), so every one is given.
    (
        "LSTM",
        {"activations": ["Sigmoid", "ThresholdedRelu", "Softplus"], "activation_alpha": [0.3]},
        1,
        None,
    ),
    (
        "RNN",
        {"activations": ["Affine"], "activation_alpha": [0.7], "activation_beta": [0.2]},
        1,
        None,
    ),
]


@pytest.mark.parametrize(("op", "attrs", "directions", "lengths"), CASES)
def test_forward_matches_onnxruntime(op, attrs, directions, lengths):
    arrays = model_inputs(op, directions, lengths=lengths)
    model = one_node_model(op, arrays, **attrs)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, arrays)
    got = sonnx.prepare(model).run(arrays)
    assert len(got) == len(expected)
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("fn", "op"), [(rnn, "RNN"), (gru, "GRU"), (lstm, "LSTM")])
def test_layout_1_is_layout_0_batch_major(fn, op):
    x = rng.standard_normal((5, 3, 2)).astype(np.float32)
    w, r, b = (t(a) for a in weights(op, 2, 2, 4))
    h0 = rng.standard_normal((2, 3, 4)).astype(np.float32)
    seq = fn(t(x), w, r, b, t(h0), direction="bidirectional")
    batch = fn(
        t(x.transpose(1, 0, 2)),
        w,
        r,
        b,
        t(h0.transpose(1, 0, 2)),
        direction="bidirectional",
        layout=1,
    )
    np.testing.assert_allclose(
        batch[0].numpy(), seq[0].numpy().transpose(2, 0, 1, 3), rtol=1e-5, atol=1e-6
    )
    for s, bm in zip(seq[1:], batch[1:], strict=True):
        np.testing.assert_allclose(bm.numpy(), s.numpy().transpose(1, 0, 2), rtol=1e-5, atol=1e-6)


def test_sequence_lens_zero_rows_and_hold_state():
    x = rng.standard_normal((4, 2, 3)).astype(np.float32)
    w, r, b = (t(a) for a in weights("GRU", 1, 3, 2))
    y, y_h = gru(t(x), w, r, b, sequence_lens=t(np.array([2, 4], dtype=np.int32)))
    short, _ = gru(t(x[:2, :1]), w, r, b)
    assert np.all(y.numpy()[2:, :, 0] == 0)
    np.testing.assert_allclose(y.numpy()[:2, :, :1], short.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y_h.numpy()[:, 0], y.numpy()[1, :, 0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y_h.numpy()[:, 1], y.numpy()[3, :, 1], rtol=1e-5, atol=1e-6)


def small(op: str, directions: int = 1) -> list[np.ndarray]:
    x = rng.standard_normal((3, 2, 2))
    h0 = rng.standard_normal((directions, 2, 2))
    return [x, *weights(op, directions, 2, 2, dtype=np.float64), h0]


def test_rnn_gradients():
    check_grad(lambda x, w, r, b, h: rnn(x, w, r, b, h)[0], small("RNN"))


def test_gru_gradients_bidirectional_with_lengths():
    lens = t(np.array([3, 2], dtype=np.int32))
    check_grad(
        lambda x, w, r, b, h: gru(x, w, r, b, h, lens, direction="bidirectional")[0],
        small("GRU", 2),
    )


def test_gru_linear_before_reset_gradients():
    check_grad(lambda x, w, r, b, h: gru(x, w, r, b, h, linear_before_reset=True)[1], small("GRU"))


def test_lstm_gradients_with_peepholes():
    arrays = [*small("LSTM"), rng.standard_normal((1, 2, 2)), rng.standard_normal((1, 6))]
    check_grad(lambda x, w, r, b, h, c, p: lstm(x, w, r, b, h, c, p)[0], arrays)
    check_grad(lambda x, w, r, b, h, c, p: lstm(x, w, r, b, h, c, p)[2], arrays, wrt=[0, 5, 6])


def test_bad_inputs():
    x = t(np.zeros((3, 2, 2), np.float32))
    w, r, b = (t(a) for a in weights("RNN", 1, 2, 3))
    with pytest.raises(BadInputError, match="RNN: input W must have shape"):
        rnn(x, t(np.zeros((1, 4, 2), np.float32)), r)
    with pytest.raises(BadInputError, match="at least one time step"):
        rnn(t(np.zeros((0, 2, 2), np.float32)), w, r)
    with pytest.raises(BadInputError, match="RNN: input X must be 3-D"):
        rnn(t(np.zeros((3, 2), np.float32)), w, r)
    with pytest.raises(BadInputError, match="unknown activation 'Swish'"):
        rnn(x, w, r, activations=["Swish"])
    with pytest.raises(BadInputError, match="attribute direction"):
        RNN(direction="sideways")(x, w, r)
    with pytest.raises(BadInputError, match="sequence_lens must lie in"):
        rnn(x, w, r, b, sequence_lens=t(np.array([4, 1], dtype=np.int32)))
    with pytest.raises(BadInputError, match="hidden_size"):
        RNN(hidden_size=5)(x, w, r)
    with pytest.raises(BadInputError, match="GRU: input X must be a floating-point"):
        gru(t(np.zeros((3, 2, 2), np.int64)), *(t(a) for a in weights("GRU", 1, 2, 3)))
    with pytest.raises(BadInputError, match="LSTM: input initial_c must have shape"):
        w4, r4, b4 = (t(a) for a in weights("LSTM", 1, 2, 3))
        lstm(x, w4, r4, b4, initial_c=t(np.zeros((1, 3, 3), np.float32)))


@pytest.mark.parametrize(("fn", "op"), [(rnn, "RNN"), (gru, "GRU"), (lstm, "LSTM")])
def test_export_batch_major_runs_in_onnxruntime(fn, op):
    """Layout 1 is exported as Transposes around a layout-0 node (ONNX Runtime's only form)."""
    w, r, b = (param(a) for a in weights(op, 2, 3, 4))

    def build(x, h):
        return fn(x, w, r, b, h, direction="bidirectional", layout=1)

    def make(batch: int):
        g = np.random.default_rng(batch)
        return [
            g.standard_normal((batch, 5, 3)).astype(np.float32),
            g.standard_normal((batch, 2, 4)).astype(np.float32),
        ]

    model = export_check(build, make, opset=13, rtol=1e-5, atol=1e-5)
    assert [n.op_type for n in model.graph.node].count("Transpose") == 2 + len(model.graph.output)


def test_export_sequence_major_with_lengths():
    w, r, b = (param(a) for a in weights("LSTM", 1, 3, 4))
    lens = Tensor(data=np.array([5, 3], dtype=np.int32), requires_grad=False, name="lens")

    def build(x):
        return lstm(x, w, r, b, sequence_lens=lens, input_forget=True)

    def make(_batch: int):
        return [np.random.default_rng(1).standard_normal((5, 2, 3)).astype(np.float32)]

    model = export_check(build, make, batches=(2,), dynamic_batch=False)
    assert [n.op_type for n in model.graph.node] == ["LSTM"]


def test_version_1_output_sequence_is_dropped():
    arrays = model_inputs("GRU", 1)
    arrays = {k: arrays[k] for k in ("X", "W", "R", "B")}
    old = one_node_model("GRU", arrays, output_sequence=1)
    old.opset_import[0].version = 1
    new = one_node_model("GRU", arrays)
    got = sonnx.prepare(old).run(arrays)
    expected = sonnx.prepare(new).run(arrays)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g.numpy(), e.numpy())


def test_a_standard_lstm_is_one_call_of_torchs_lstm_and_differentiable(monkeypatch):
    calls = []
    fused = torch.lstm

    def counting(*args):
        calls.append(args[0].shape)
        return fused(*args)

    monkeypatch.setattr(torch, "lstm", counting)
    both = [*small("LSTM", 2), rng.standard_normal((2, 2, 2))]
    check_grad(lambda x, w, r, b, h, c: lstm(x, w, r, b, h, c, direction="bidirectional")[0], both)
    one = [*small("LSTM"), rng.standard_normal((1, 2, 2))]
    check_grad(lambda x, w, r, b, h, c: lstm(x, w, r, b, h, c, direction="reverse")[2], one)
    assert calls, "the fused path was not taken"


def test_lstm_reorders_its_weights_once_per_state_of_them():
    """Without a gradient, torch's gate order is made once and reused until a weight changes
    (in place, or replaced); with one, the weights stay in the autograd graph."""
    from sonnx.operators.rnn.recurrent import LSTM

    arrays = model_inputs("LSTM", 2)
    x, w, r, b = (torch.from_numpy(arrays[k]) for k in ("X", "W", "R", "B"))
    h0, c0 = torch.from_numpy(arrays["initial_h"]), torch.from_numpy(arrays["initial_c"])

    def run(op, w=w, r=r, b=b):
        with torch.no_grad():
            return op.forward(x, w, r, b, None, h0, c0)[0]

    op = LSTM(hidden_size=3, direction="bidirectional")
    first = run(op)
    torch.testing.assert_close(run(op), first, rtol=0, atol=0)
    assert len(op._torch_weight_cache) == 2  # one per direction
    w.mul_(0.5)  # an optimizer step's kind of change: same tensor, new version
    torch.testing.assert_close(run(op), run(LSTM(hidden_size=3, direction="bidirectional")))
    assert not torch.equal(run(op), first)
    other = torch.from_numpy(rng.standard_normal(tuple(r.shape)).astype(np.float32))
    torch.testing.assert_close(
        run(op, r=other), run(LSTM(hidden_size=3, direction="bidirectional"), r=other)
    )
    trained = w.clone().requires_grad_(True)
    op.forward(x, trained, r, b, None, h0, c0)[0].sum().backward()
    assert trained.grad is not None and trained.grad.abs().sum() > 0


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("initial_states", [True, False])
def test_standard_bidirectional_lstm_matches_the_reference(layout, initial_states):
    """A standard bidirectional LSTM (no lengths or peepholes: torch's LSTM per direction):
    Y's direction axis, the final states and both layouts are as ONNX defines them."""
    from onnx.reference import ReferenceEvaluator

    arrays = model_inputs("LSTM", 2)
    names = ["X", "W", "R", "B"] + (["", "initial_h", "initial_c"] if initial_states else [])
    feeds = {n: arrays[n] for n in names if n}
    if layout == 1:
        for k in ("X", "initial_h", "initial_c"):
            if k in feeds:
                feeds[k] = np.ascontiguousarray(feeds[k].transpose(1, 0, 2))
    node = helper.make_node(
        "LSTM", names, ["Y", "Y_h", "Y_c"], hidden_size=3, direction="bidirectional", layout=layout
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in feeds.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("Y", "Y_h", "Y_c")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=9)
    expected = ReferenceEvaluator(model).run(None, feeds)
    got = sonnx.prepare(model).run(feeds)
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-5, atol=1e-6)


def test_bidirectional_lstm_gradients():
    check_grad(
        lambda x, w, r, b, h: lstm(x, w, r, b, h, direction="bidirectional")[0],
        small("LSTM", 2),
    )


@pytest.mark.parametrize("op_type", ["RNN", "GRU", "LSTM"])
def test_one_recurrent_operator_checks_each_new_input_signature(op_type):
    """The checks found good for the last shapes are not made again for them, and are for any
    others: a bad state after good runs is still refused, by name."""
    from sonnx.operators.rnn.recurrent import GRU, LSTM

    kind = {"RNN": RNN, "GRU": GRU, "LSTM": LSTM}[op_type]
    op = kind(hidden_size=3)
    w, r, b = (torch.from_numpy(a) for a in weights(op_type, 1, 2, 3))
    states = 1 if op_type != "LSTM" else 2
    for batch in (2, 2, 5, 2):
        arrays = model_inputs(op_type, 1, batch=batch)
        x = torch.from_numpy(arrays["X"])
        init = [torch.zeros(1, batch, 3)] * states
        y = op.forward(x, w, r, b, None, *init)[0]
        fresh = kind(hidden_size=3).forward(x, w, r, b, None, *init)[0]
        torch.testing.assert_close(y, fresh, rtol=0, atol=0)
        assert y.shape == (4, 1, batch, 3)
    with pytest.raises(BadInputError, match=f"{op_type}: input initial_h must have shape"):
        op.forward(x, w, r, b, None, *([torch.zeros(1, 3, 3)] * states))
