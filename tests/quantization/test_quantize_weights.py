"""quantize_weights against onnxruntime's MatMulNBitsQuantizer (default algorithm): the same
model byte for byte (packed codes, scales, zero points, attributes, names, placement), and
sonnx's outputs on the result equal onnxruntime's within MatMulNBits's accuracy_level 4
rounding of the input to int8 blocks.
(test_blockwise.py checks the block quantization against onnxruntime's C++ kernel)."""

from __future__ import annotations

import copy
import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
from torch import nn

import sonnx
from sonnx.errors import BadInputError, BadModelError
from sonnx.quantization import quantize_weights
from sonnx.testing import torch_models as tm

# a last-bit difference before accuracy_level 4's int8 rounding of the input can move a code
# by one int8 step of the block's largest input (tests/generation/test_genai_builds.py)
ATOL = 5e-3


class Mlp(nn.Module):
    """Three Linear layers over [batch, tokens, 37] inputs (torch writes MatMul + Add for
    3-D inputs; 37 is an odd K that ends in a partial block)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(37, 160), nn.GELU(), nn.Linear(160, 96), nn.ReLU(), nn.Linear(96, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Decoder(nn.Module):
    """A one-layer decoder stand-in: token embedding, RMS norm, causal self-attention with
    q/k/v/o projections, a SiLU-gated MLP (gate, up, down) and an untied lm_head, none with
    a bias (as in Llama)."""

    def __init__(self, vocab: int = 50, hidden: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, hidden)
        self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(hidden, 176, bias=False), nn.Linear(hidden, 176, bias=False)
        self.down = nn.Linear(176, hidden, bias=False)
        self.head = nn.Linear(hidden, vocab, bias=False)

    @staticmethod
    def norm(x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        b, t, h = x.shape
        y = self.norm(x)
        q, k, v = (
            p(y).reshape(b, t, self.heads, -1).transpose(1, 2) for p in (self.q, self.k, self.v)
        )
        scores = q @ k.transpose(-1, -2) / (h // self.heads) ** 0.5
        scores = scores + torch.triu(torch.full((t, t), -1e9), 1)
        x = x + self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, h))
        y = self.norm(x)
        x = x + self.down(nn.functional.silu(self.gate(y)) * self.up(y))
        return self.head(self.norm(x))


@pytest.fixture(scope="module")
def mlp() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    torch.manual_seed(0)
    x = torch.randn(2, 5, 37)
    return tm.export(Mlp(), (x,), 17, ["x"]), {"x": x.numpy()}


@pytest.fixture(scope="module")
def decoder() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    torch.manual_seed(0)
    ids = torch.randint(0, 50, (2, 7))
    return tm.export(Decoder(), (ids,), 17, ["input_ids"]), {"input_ids": ids.numpy()}


def ort_quantized(model: onnx.ModelProto, **options: object) -> onnx.ModelProto:
    """onnxruntime's MatMulNBitsQuantizer on a copy of ``model`` (it rewrites its input)."""
    logging.disable(logging.INFO)
    try:
        quantizer = MatMulNBitsQuantizer(copy.deepcopy(model), **options)
        quantizer.process()
    finally:
        logging.disable(logging.NOTSET)
    return quantizer.model.model


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize("symmetric", [True, False], ids=["symmetric", "asymmetric"])
@pytest.mark.parametrize("block_size", [32, 128])
@pytest.mark.parametrize("name", ["mlp", "decoder"])
def test_equals_onnxruntime(
    name: str, block_size: int, symmetric: bool, request: pytest.FixtureRequest
) -> None:
    model, feeds = request.getfixturevalue(name)
    before = model.SerializeToString()
    ours = quantize_weights(model, bits=4, block_size=block_size, symmetric=symmetric)
    ref = ort_quantized(
        model, bits=4, block_size=block_size, is_symmetric=symmetric, accuracy_level=4
    )
    assert model.SerializeToString() == before  # the given model is not modified
    matmuls = sum(n.op_type == "MatMul" for n in model.graph.node)
    nbits = [n for n in ours.graph.node if n.op_type == "MatMulNBits"]
    assert len(nbits) == (3 if name == "mlp" else 8) and matmuls - len(nbits) <= 2
    for mine, theirs in zip(ours.graph.initializer, ref.graph.initializer, strict=True):
        assert mine.SerializeToString() == theirs.SerializeToString(), mine.name
    assert list(ours.graph.node) == list(ref.graph.node)
    assert ours.SerializeToString() == ref.SerializeToString()
    expected = ort_run(ref, feeds)
    (got,) = sonnx.prepare(ours).run(feeds)
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=ATOL)
    # and int4 stays near the float model (random weights: no outlier-free rows to help)
    float_out = ort_run(model, feeds)
    assert np.abs(expected - float_out).max() < 0.25 * np.abs(float_out).max()


def test_int8_equals_onnxruntime(decoder: tuple[onnx.ModelProto, dict]) -> None:
    model, feeds = decoder
    ours = quantize_weights(model, bits=8, block_size=32, symmetric=False, accuracy_level=0)
    ref = ort_quantized(model, bits=8, block_size=32, is_symmetric=False)
    assert ours.SerializeToString() == ref.SerializeToString()
    assert all("accuracy_level" not in {a.name for a in n.attribute} for n in ours.graph.node)
    (got,) = sonnx.prepare(ours).run(feeds)
    np.testing.assert_allclose(got.numpy(), ort_run(ref, feeds), rtol=1e-4, atol=1e-4)


def test_nodes_to_exclude_and_rep(decoder: tuple[onnx.ModelProto, dict]) -> None:
    model, _ = decoder
    head = next(n.name for n in reversed(model.graph.node) if n.op_type == "MatMul")
    ours = quantize_weights(sonnx.prepare(model), nodes_to_exclude=[head])
    ref = ort_quantized(
        model, bits=4, block_size=32, is_symmetric=True, accuracy_level=4, nodes_to_exclude=[head]
    )
    assert [n.name for n in ours.graph.node] == [n.name for n in ref.graph.node]
    assert head in {n.name for n in ours.graph.node if n.op_type == "MatMul"}
    for mine, theirs in zip(ours.graph.initializer, ref.graph.initializer, strict=True):
        assert mine.SerializeToString() == theirs.SerializeToString(), mine.name


def test_weight_in_if_branch() -> None:
    """A MatMul inside an If branch reading the main graph's weight: the quantized tensors
    go where the weight was, the branch reads them."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((48, 8)).astype(np.float32), "w")
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    then = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "then", [], [out]
    )
    other = helper.make_graph([helper.make_node("Identity", ["z"], ["y"])], "else", [], [out])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["out"], then_branch=then, else_branch=other)],
        "g",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 48]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [3, 8]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ours = quantize_weights(model, block_size=16)
    assert [t.name for t in ours.graph.initializer] == ["w_Q4", "w_scales"]
    (branch,) = next(a.g for a in ours.graph.node[0].attribute if a.name == "then_branch").node
    assert (branch.op_type, branch.name) == ("MatMulNBits", "mm_Q4")
    feeds = {
        "c": np.array(True),
        "x": rng.standard_normal((3, 48)).astype(np.float32),
        "z": np.zeros((3, 8), np.float32),
    }
    (got,) = sonnx.prepare(ours).run(feeds)
    np.testing.assert_allclose(got.numpy(), ort_run(ours, feeds), rtol=0, atol=ATOL)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"bits": 3}, "bits must be 4 or 8, received 3"),
        ({"bits": True}, "received True"),
        ({"bits": 4.0}, "received 4.0"),
        ({"block_size": 24}, "block_size must be one of 16, 32, 64, 128, 256"),
        ({"block_size": 512}, "received 512"),
        ({"accuracy_level": 7}, "accuracy_level must be None or 0-4"),
        ({"nodes_to_exclude": ["nope"]}, "names nodes the model does not have: ['nope']"),
    ],
)
def test_bad_options(mlp: tuple[onnx.ModelProto, dict], options: dict, words: str) -> None:
    with pytest.raises(BadInputError, match="quantize_weights") as error:
        quantize_weights(mlp[0], **options)
    assert words in str(error.value)


def test_nothing_to_quantize() -> None:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 4]) for n in "ab"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(BadModelError, match="nothing to quantize") as error:
        quantize_weights(model)
    assert "received nodes of types ['MatMul']" in str(error.value)


def test_bad_model_argument(tmp_path) -> None:
    with pytest.raises(BadInputError, match="received int"):
        quantize_weights(3)
    (tmp_path / "bad.onnx").write_bytes(b"\x0a\xff\xff")
    with pytest.raises(BadModelError, match="cannot read the model file"):
        quantize_weights(tmp_path / "bad.onnx")
