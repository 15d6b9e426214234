"""Recurrent, signal, random, training and the remaining operators export: a tiny model per op
passes the full ONNX checker and onnxruntime (onnx's reference evaluator for the
``ai.onnx.preview.training`` optimizers, which onnxruntime does not ship) matches sonnx at
batch 2 and 5 (dtypes and shapes only for random operators)."""

from __future__ import annotations

import io

import numpy as np
import PIL.Image
import pytest

import sonnx.autograd as ag
from tests.onnx.export_check import const, export_check, param, rng_inputs

F = np.float32
H = 3  # hidden size of the recurrent cases


def w(*shape: int):
    return param(np.random.default_rng(list(shape)).standard_normal(shape).astype(F) * 0.5)


def img(*rest: int):
    return rng_inputs((rest, F))


def case(id_: str, build, make, **opts):
    return pytest.param(build, make, opts, id=id_)


def _conv_integer(x):
    weights = np.random.default_rng(0).integers(0, 5, (2, 3, 2, 2)).astype(np.uint8)
    return ag.ConvInteger()(x, param(weights))


RECURRENT = [
    # Sequence-major (layout 0): the dynamic leading axis is the sequence length.
    case("rnn", lambda x: ag.rnn(x, w(1, H, 4), w(1, H, H), w(1, 2 * H)), img(2, 4), rtol=1e-4),
    case(
        "rnn_bidirectional_relu",
        lambda x: ag.rnn(
            x, w(2, H, 4), w(2, H, H), None, direction="bidirectional", activations=["Relu", "Tanh"]
        ),
        img(2, 4),
        rtol=1e-4,
    ),
    case(
        "gru",
        lambda x: ag.gru(x, w(1, 3 * H, 4), w(1, 3 * H, H), w(1, 6 * H)),
        img(2, 4),
        rtol=1e-4,
    ),
    case(
        "gru_linear_before_reset_batch_first",
        lambda x: ag.gru(x, w(1, 3 * H, 4), w(1, 3 * H, H), linear_before_reset=True, layout=1),
        img(5, 4),
        rtol=1e-4,
    ),
    case(
        "lstm_batch_first_with_peepholes",
        lambda x: ag.lstm(x, w(1, 4 * H, 4), w(1, 4 * H, H), w(1, 8 * H), p=w(1, 3 * H), layout=1),
        img(5, 4),
        rtol=1e-4,
    ),
]

SIGNAL = [
    case("hann_window", lambda x: x * ag.hann_window(6), img(6)),
    case("hamming_window", lambda x: x * ag.hamming_window(6, False), img(6)),
    case("blackman_window", lambda x: x * ag.blackman_window(6), img(6)),
    case(
        "mel_weight_matrix",
        lambda x: ag.matmul(x, ag.mel_weight_matrix(4, 8, 8000, 0.0, 4000.0)),
        img(5),
    ),
    case("dft", lambda x: ag.dft(x, 1), img(8, 1), rtol=1e-4, atol=1e-5),
    case("dft_onesided", lambda x: ag.dft(x, 1, onesided=True), img(8, 1), rtol=1e-4, atol=1e-5),
    case(
        "stft",
        lambda x: ag.stft(x, 4, ag.hann_window(8), 8),
        img(16, 1),
        rtol=1e-4,
        atol=1e-5,
    ),
]

# onnxruntime 1.31 has no kernels for the opset-22 versions of the random operators: export at 21.
RANDOM = [
    case(
        "random_normal", lambda x: x + ag.random_normal([3, 4]), img(3, 4), values=False, opset=21
    ),
    case(
        "random_uniform",
        lambda x: x * ag.random_uniform([4], 1.0, 2.0),
        img(4),
        values=False,
        opset=21,
    ),
    case(
        "random_normal_like",
        lambda x: ag.random_normal_like(x, 1.0, 0.5),
        img(4),
        values=False,
        opset=21,
    ),
    case("random_uniform_like", ag.random_uniform_like, img(4), values=False, opset=21),
    case("bernoulli", lambda x: ag.bernoulli(ag.sigmoid(x)), img(4), values=False, opset=21),
    case("multinomial", lambda x: ag.multinomial(x, 3), img(4), values=False, opset=21),
]

OPTIMIZERS = [
    case(
        "adagrad",
        lambda x, g, h: ag.adagrad(0.1, 3, [x], [g], [h], 0.1),
        rng_inputs(((3,), F), ((3,), F), ((3,), lambda r, s: r.uniform(0.1, 1, s).astype(F))),
        runtime="reference",
        batches=(2,),
    ),
    case(
        "adam",
        lambda x, g, v, h: ag.adam(0.1, 3, [x], [g], [v], [h]),
        rng_inputs(
            ((3,), F), ((3,), F), ((3,), F), ((3,), lambda r, s: r.uniform(0.1, 1, s).astype(F))
        ),
        runtime="reference",
        check_dtype=False,  # onnx's reference Adam returns X_new in float64 for float32 inputs
        batches=(2,),
    ),
    case(
        "momentum_nesterov",
        lambda x, g, v: ag.momentum(0.1, 3, [x], [g], [v], mode="nesterov"),
        rng_inputs(((3,), F), ((3,), F), ((3,), F)),
        runtime="reference",
        batches=(2,),
    ),
]

OTHERS = [
    case("constant", lambda x: x + ag.Constant(value=np.arange(4, dtype=F))(), img(4)),
    case(
        "conv_integer",
        _conv_integer,
        rng_inputs(((3, 4, 4), lambda r, s: r.integers(0, 9, s).astype(np.uint8))),
    ),
    case(
        "conv_integer_zero_point",
        lambda x: ag.ConvInteger()(x, const(np.ones((1, 3, 1, 1), np.uint8)), const(np.uint8(2))),
        rng_inputs(((3, 2, 2), lambda r, s: r.integers(0, 9, s).astype(np.uint8))),
    ),
]


def _qlinear_conv(x):
    rng = np.random.default_rng(1)
    return ag.qlinear_conv(
        x,
        const(F(0.05)),
        const(np.uint8(3)),
        const(rng.integers(0, 255, (2, 3, 3, 3)).astype(np.uint8)),
        const(np.array([0.01, 0.02], F)),
        const(np.array([120, 130], np.uint8)),
        const(F(0.4)),
        const(np.uint8(128)),
        const(np.array([-500, 700], np.int32)),
        padding=1,
    )


def _tree_ensemble(x):
    # x0 <= 0.2: leaf 0 (target 0); else x1 > -0.3: leaf 1, else leaf 2 (both target 1).
    return ag.tree_ensemble(
        x,
        tree_roots=[0],
        nodes_featureids=[0, 1],
        nodes_modes=[0, 3],
        nodes_splits=[0.2, -0.3],
        nodes_truenodeids=[0, 1],
        nodes_trueleafs=[1, 1],
        nodes_falsenodeids=[1, 2],
        nodes_falseleafs=[0, 1],
        leaf_targetids=[0, 1, 1],
        leaf_weights=[1.5, -2.0, 4.0],
        n_targets=2,
    )


def _png_bytes(batch: int) -> list[np.ndarray]:
    """A PNG file of a (3, batch + 1) RGB image, as 1-D uint8."""
    pixels = np.random.default_rng(batch).integers(0, 256, (3, batch + 1, 3)).astype(np.uint8)
    buffer = io.BytesIO()
    PIL.Image.fromarray(pixels).save(buffer, format="PNG")
    return [np.frombuffer(buffer.getvalue(), dtype=np.uint8).copy()]


def _tfidf(x):
    return ag.tfidf_vectorizer(
        x, "TFIDF", 1, 2, 1, [0, 3], [0, 1, 2, 3, 4], [0, 1, 2, 0, 1, 2, 2], [1, 2, 3, 4, 5]
    )


ML = [
    case("binarizer", lambda x: ag.binarizer(x, 0.25), img(4)),
    case("array_feature_extractor", lambda x: ag.array_feature_extractor(x, [3, 0, 3]), img(4)),
    case("tree_ensemble", _tree_ensemble, img(2)),
]

QUANTIZED_AND_TEXT = [
    case(
        "qlinear_conv",
        _qlinear_conv,
        rng_inputs(((3, 4, 4), lambda r, s: r.integers(0, 255, s).astype(np.uint8))),
    ),
    case("tfidf_vectorizer", _tfidf, rng_inputs(((6,), np.int64))),
    # onnxruntime has no ImageDecoder kernel: onnx's reference evaluator checks it.
    case("image_decoder", ag.image_decoder, _png_bytes, runtime="reference", opset=20),
]

ALL = RECURRENT + SIGNAL + RANDOM + OPTIMIZERS + OTHERS + ML + QUANTIZED_AND_TEXT


@pytest.mark.parametrize(("build", "make", "opts"), ALL)
def test_op_exports_and_matches_onnxruntime(build, make, opts) -> None:
    export_check(build, make, **opts)
