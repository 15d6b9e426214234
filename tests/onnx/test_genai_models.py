"""LLMs written by onnxruntime-genai's model builder (llama, qwen2, phi3, gemma, mistral; fp32
and int4) run in sonnx as in onnxruntime: a prompt, then decode steps with the KV cache fed
back, in the layouts onnxruntime-genai drives them with; exported back as they came; trained
through; compiled whole in graph mode. The models are tiny random-weight builds
(:mod:`tests.genai_builds`), made once per session.

Tolerances: 1e-4 relative and 1e-5 absolute on logits and caches, fp32 and int4 alike (sonnx
rounds MatMulNBits's input to int8 as onnxruntime does at the builder's accuracy_level 4).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import sonnx
import sonnx.autograd as autograd
from sonnx.onnx.exporter import to_onnx
from sonnx.tensor import Tensor, to_numpy
from tests import genai_builds
from tests.genai_builds import FAMILIES, KV_HEADS, PRECISIONS

HEAD_SIZE = genai_builds.HIDDEN // genai_builds.HEADS
#: Longer than mistral's window, so its local_window_size masks part of the prompt.
PROMPT = genai_builds.MISTRAL_WINDOW + 8
RNG = np.random.default_rng(0)


def close(actual: np.ndarray, expected: np.ndarray, precision: str = "fp32") -> None:
    """Equal within 1e-4 relative and 1e-5 absolute. For an int4 build, MatMulNBits rounds its
    input to int8 per block (accuracy_level 4), and a last-bit difference before it (the CPU's
    float kernels, onnxruntime's and torch's alike, differ by machine) can move one code: one
    step of the input, about 2e-3 on these logits (seen on an AMD EPYC), and the step travels
    on to later positions. So there, every value is within 5e-3 (MatMulNBits itself is held to
    onnxruntime's exactly, on the same inputs, in tests/operators/quantize)."""
    atol = 5e-3 if precision == "int4" else 1e-5
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=atol)


class Runs:
    """One build's model run by onnxruntime and by sonnx on the same feeds."""

    def __init__(self, directory: Path) -> None:
        path = str(directory / "model.onnx")
        self.model = onnx.load(path)
        self.session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]
        self.rep = sonnx.prepare(self.model)

    def both(self, feeds: dict[str, np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(onnxruntime's outputs, sonnx's outputs)."""
        ours = self.rep.run([feeds[name] for name in self.inputs])
        return self.session.run(None, feeds), [to_numpy(t) for t in ours]

    def feeds(self, ids: np.ndarray, mask: np.ndarray, past: list[np.ndarray]) -> dict:
        """The graph's inputs: ids, mask, then the past caches in present order."""
        pasts = [name.replace("present", "past_key_values") for name in self.outputs[1:]]
        return {"input_ids": ids, "attention_mask": mask, **dict(zip(pasts, past, strict=True))}


def _ids(batch: int, length: int) -> np.ndarray:
    return RNG.integers(3, genai_builds.vocab_size(), (batch, length)).astype(np.int64)


def _empty_cache(batch: int, rows: int) -> list[np.ndarray]:
    return [np.zeros((batch, KV_HEADS, rows, HEAD_SIZE), np.float32)] * (2 * genai_builds.LAYERS)


def _expected_ops(family: str, precision: str) -> set[str]:
    ops = {"GroupQueryAttention", "SkipSimplifiedLayerNormalization",
           "SimplifiedLayerNormalization"}  # fmt: skip
    if precision == "int4":
        ops.add("MatMulNBits")
        if family == "gemma":  # its tied embedding is gathered from the 4-bit head
            ops.add("GatherBlockQuantized")
    return ops


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("family", FAMILIES)
def test_prompt_then_decode_steps_match_onnxruntime(family: str, precision: str) -> None:
    """A prompt on an empty cache, then two decode steps each fed the step before's present
    caches: logits and every present equal onnxruntime's."""
    runs = Runs(genai_builds.build(family, precision))
    ops = {node.op_type for node in runs.model.graph.node}
    assert _expected_ops(family, precision) <= ops, ops
    ids, past = _ids(1, PROMPT), _empty_cache(1, 0)
    for step in range(3):
        mask = np.ones((1, PROMPT + step), np.int64)
        expected, got = runs.both(runs.feeds(ids, mask, past))
        for e, g in zip(expected, got, strict=True):
            close(g, e, precision)
        ids, past = np.argmax(expected[0][:, -1:], -1), expected[1:]


def test_right_padded_batch_over_a_shared_buffer_matches_onnxruntime() -> None:
    """onnxruntime-genai's layout: past and present share one buffer of the maximum length,
    and sequences of different lengths are right-padded (GroupQueryAttention reads each one's
    length from the mask's sum). Rows within each sequence's length equal onnxruntime's;
    rows past it are unspecified, in onnxruntime as in sonnx."""
    runs = Runs(genai_builds.build("llama", "int4"))
    lengths, buffer = np.array([6, 4]), 12
    ids, past = _ids(2, 6), _empty_cache(2, buffer)
    for step in range(3):
        mask = (np.arange(6 + step) < (lengths + step)[:, None]).astype(np.int64)
        expected, got = runs.both(runs.feeds(ids, mask, past))
        rows = lengths + step if step else lengths  # the ids' rows that count
        for b in range(2):
            seq_rows = slice(None) if step else slice(rows[b])
            close(got[0][b, seq_rows], expected[0][b, seq_rows], "int4")
            for e, g in zip(expected[1:], got[1:], strict=True):
                assert g.shape == e.shape == (2, KV_HEADS, buffer, HEAD_SIZE)
                close(g[b, :, : rows[b]], e[b, :, : rows[b]], "int4")
        last = expected[0][np.arange(2), (lengths - 1) if step == 0 else 0]
        ids, past = np.argmax(last, -1)[:, None], expected[1:]


def _tensors(runs: Runs, feeds: dict[str, np.ndarray]) -> list[Tensor]:
    return [Tensor(data=feeds[name], requires_grad=False, name=name) for name in runs.inputs]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_build_exports_as_it_came(precision: str) -> None:
    """Import then export writes the builder's nodes back, in order, and onnxruntime runs the
    export to sonnx's outputs."""
    runs = Runs(genai_builds.build("qwen2", precision))
    feeds = runs.feeds(_ids(1, 5), np.ones((1, 5), np.int64), _empty_cache(1, 0))
    inputs = _tensors(runs, feeds)
    outputs = runs.rep.run({t.name: t for t in inputs})
    exported = to_onnx(inputs, outputs, output_names=runs.outputs)
    assert [(n.domain, n.op_type) for n in exported.graph.node if n.op_type != "Constant"] == [
        (n.domain, n.op_type) for n in runs.model.graph.node if n.op_type != "Constant"
    ]
    session = ort.InferenceSession(exported.SerializeToString(),
                                   providers=["CPUExecutionProvider"])  # fmt: skip
    given = {i.name: feeds[i.name] for i in exported.graph.input}
    for e, g in zip(session.run(None, given), outputs, strict=True):
        close(to_numpy(g), e, precision)


def _loss(model: sonnx.SONNXModel, inputs: list[Tensor], weights: Tensor) -> Tensor:
    """A fixed random projection of the logits: every logit gets a gradient."""
    (logits, *_) = model.forward(*inputs)
    return autograd.reduce_sum(autograd.mul(logits, weights))


@pytest.mark.parametrize("family", FAMILIES)
def test_float_build_trains_with_finite_gradients(family: str) -> None:
    """One backward pass through the fp32 build: every weight gets a finite gradient, and the
    gradient of a few norm and projection weights equals central differences of the loss."""
    runs = Runs(genai_builds.build(family, "fp32"))
    feeds = runs.feeds(_ids(1, 6), np.ones((1, 6), np.int64), _empty_cache(1, 0))
    model = sonnx.SONNXModel(runs.model)
    inputs = _tensors(runs, feeds)
    weights = Tensor(data=RNG.standard_normal((1, 6, genai_builds.vocab_size())).astype(
        np.float32), requires_grad=False)  # fmt: skip
    previous, autograd.training = autograd.training, True
    try:
        loss = _loss(model, inputs, weights)
        grads = {p.name: to_numpy(g) for p, g in autograd.backward(loss)}
    finally:
        autograd.training = previous
    assert grads and all(np.isfinite(g).all() for g in grads.values())
    checked = [name for name in grads if "layers.1" in name][:3]
    assert checked, sorted(grads)
    for name in checked:
        param = model.rep.constants[name]
        values = to_numpy(param).copy()
        index = np.unravel_index(np.argmax(np.abs(grads[name])), values.shape)
        sides = []
        for step in (1e-2, -1e-2):
            moved = values.copy()
            moved[index] += step
            param.copy_from_numpy(moved)
            sides.append(float(to_numpy(_loss(model, inputs, weights)).reshape(-1)[0]))
        param.copy_from_numpy(values)
        numeric = (sides[0] - sides[1]) / 2e-2
        assert grads[name][index] == pytest.approx(numeric, rel=2e-2, abs=1e-3), name


def test_int4_build_compiles_whole_in_graph_mode() -> None:
    """The file's one compile: the int4 llama's prompt step compiles as one graph (no node
    left to run eagerly) and equals eager."""
    runs = Runs(genai_builds.build("llama", "int4"))
    feeds = runs.feeds(_ids(1, 5), np.ones((1, 5), np.int64), _empty_cache(1, 0))
    rep = sonnx.prepare(runs.model, use_graph=True)
    compiled = rep.run([feeds[name] for name in runs.inputs])
    assert rep.graph_runner.compile_count == 1 and rep.graph_runner.fallback is None
    _, eager = runs.both(feeds)
    for got, expected in zip(compiled, eager, strict=True):
        np.testing.assert_allclose(to_numpy(got), expected, rtol=1e-5, atol=1e-6)
