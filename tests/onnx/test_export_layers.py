"""Every layer in ``sonnx.layer`` and every legacy layer in ``sonnx.autograd`` exports: a tiny
model passes the full ONNX checker and onnxruntime matches sonnx at batch 2 and 5."""

from __future__ import annotations

import numpy as np
import pytest

import sonnx.autograd as ag
from sonnx import layer
from tests.onnx.export_check import export_check, rng_inputs

F, I64 = np.float32, np.int64


def img(*rest: int):
    return rng_inputs((rest, F))


def unit(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(0.05, 0.95, shape).astype(F)


def labels(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(0, 4, shape).astype(I64)


def case(id_: str, make_layer, make, **opts):
    return pytest.param(make_layer, make, opts, id=id_)


LAYERS = [
    case("Linear", lambda: layer.Linear(3), img(4)),
    case("Linear_no_bias_3d", lambda: layer.Linear(4, 2, bias=False), img(3, 4)),
    case("Conv1d", lambda: layer.Conv1d(4, 3, stride=2, padding=1), img(2, 9)),
    case("Conv2d", lambda: layer.Conv2d(4, 3, padding=1), img(3, 6, 6)),
    case(
        "Conv2d_dilation_groups_asymmetric",
        lambda: layer.Conv2d(4, 3, dilation=2, group=2, padding=(1, 0, 2, 1)),
        img(2, 8, 7),
    ),
    case(
        "Conv2d_same_upper",
        lambda: layer.Conv2d(3, 3, stride=2, pad_mode="SAME_UPPER"),
        img(2, 7, 7),
    ),
    case("Conv3d", lambda: layer.Conv3d(2, 2), img(2, 4, 4, 4)),
    case("MaxPool1d", lambda: layer.MaxPool1d(2), img(2, 8)),
    case("MaxPool2d_ceil", lambda: layer.MaxPool2d(3, 2, ceil_mode=True), img(2, 8, 8)),
    case("MaxPool3d", lambda: layer.MaxPool3d(2), img(2, 4, 4, 4)),
    case("AvgPool1d", lambda: layer.AvgPool1d(2), img(2, 8)),
    case("AvgPool2d_padded", lambda: layer.AvgPool2d(3, 2, 1), img(2, 7, 7)),
    case("AvgPool3d", lambda: layer.AvgPool3d(2), img(2, 4, 4, 4)),
    case("BatchNorm1d_eval", layer.BatchNorm1d, img(3)),
    case("BatchNorm2d_eval", layer.BatchNorm2d, img(3, 4, 4)),
    case("LayerNorm", layer.LayerNorm, img(3, 5)),
    case("Dropout_eval", lambda: layer.Dropout(0.4), img(5)),
    case(
        "Embedding",
        lambda: layer.Embedding(10, 4),
        rng_inputs(((3,), lambda r, s: r.integers(0, 10, s))),
    ),
    case("Flatten", layer.Flatten, img(2, 3, 2)),
    case("ReLU", layer.ReLU, img(5)),
    case("Sigmoid", layer.Sigmoid, img(5)),
    case("Tanh", layer.Tanh, img(5)),
    case("SoftPlus", layer.SoftPlus, img(5)),
    case("SoftSign", layer.SoftSign, img(5)),
    case("SeLU", layer.SeLU, img(5)),
    case("SoftMax", layer.SoftMax, img(5)),
    case("LogSoftMax", layer.LogSoftMax, img(5)),
    case("GELU", layer.GELU, img(5)),
    case("LeakyReLU", layer.LeakyReLU, img(5)),
    case("ELU", layer.ELU, img(5)),
    case("HardSigmoid", layer.HardSigmoid, img(5)),
    case("SoftMaxCrossEntropy", layer.SoftMaxCrossEntropy, rng_inputs(((4,), F), ((), labels))),
    case("CrossEntropy", layer.CrossEntropy, rng_inputs(((4,), unit), ((4,), unit))),
    case("BinaryCrossEntropy", layer.BinaryCrossEntropy, rng_inputs(((4,), unit), ((4,), unit))),
    case("MeanSquareError", layer.MeanSquareError, rng_inputs(((4,), F), ((4,), F))),
    case(
        "Sequential",
        lambda: layer.Sequential(
            layer.Conv2d(4, 3), layer.ReLU(), layer.Flatten(), layer.Linear(2)
        ),
        img(3, 5, 5),
    ),
    case("legacy_Conv2d", lambda: ag.Conv2d(3, 4, 3, 2, 1, 2, 1), img(3, 9, 9)),
    case("legacy_Linear", lambda: ag.Linear(4, 3), img(4)),
    case("legacy_MaxPool2d", lambda: ag.MaxPool2d(2), img(3, 6, 6)),
    case("legacy_AvgPool2d", lambda: ag.AvgPool2d(3, 1, 1, False), img(3, 6, 6)),
    case("legacy_BatchNorm2d_eval", lambda: ag.BatchNorm2d(3), img(3, 4, 4)),
]


@pytest.mark.parametrize(("make_layer", "make", "opts"), LAYERS)
def test_layer_exports_and_matches_onnxruntime(make_layer, make, opts) -> None:
    np.random.seed(0)
    built = make_layer()
    model = export_check(built, make, **opts)
    parameters = [i.name for i in model.graph.initializer]
    assert len(parameters) == len(set(parameters))


def test_layer_parameters_become_initializers_and_batch_is_symbolic() -> None:
    net = layer.Sequential(layer.Linear(3), layer.BatchNorm1d(), layer.Linear(2))
    model = export_check(net, img(4))
    (graph_input,) = model.graph.input
    assert graph_input.type.tensor_type.shape.dim[0].dim_param == "batch"
    (graph_output,) = model.graph.output
    assert graph_output.type.tensor_type.shape.dim[0].dim_param == "batch"
    # Two Linear (W, b) and one BatchNorm1d (scale, bias, running mean and variance).
    assert len(model.graph.initializer) == 8
