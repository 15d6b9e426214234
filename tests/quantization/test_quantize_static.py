"""quantize_static against onnxruntime's quantize_static (QuantFormat.QDQ, same options and
calibration feeds): the same Q/DQ placement, the same scales, zero points and integer weights;
onnxruntime runs sonnx's output and sonnx runs it with onnxruntime's results.

Outputs are compared with reduce_range=True and uint8 activations: on x86 CPUs without VNNI
(this AMD EPYC among them) onnxruntime's u8s8 integer kernels can saturate, so a full-range
int8 model's onnxruntime outputs are not the reference; its placement and scales are.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import numpy_helper
from onnxruntime.quantization import CalibrationMethod, QuantType

import sonnx
from sonnx.errors import BadInputError, BadModelError
from sonnx.quantization import quantize_static
from tests.quantization.models import Reader, depthwise_cnn, operator_mix, ort_quantized, tiny_bert


@pytest.fixture(scope="module")
def cnn() -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    return depthwise_cnn()


@pytest.fixture(scope="module")
def bert() -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    return tiny_bert()


def assert_same_qdq(ours: onnx.ModelProto, ref: onnx.ModelProto) -> None:
    """Same operators in the same order, same Q/DQ nodes (so the same tensors quantized),
    same opsets, and the same initializers: scales within rtol 1e-5, integers within one
    step."""
    assert [n.op_type for n in ours.graph.node] == [n.op_type for n in ref.graph.node]
    qdq = ("QuantizeLinear", "DequantizeLinear")
    assert sorted((n.name, n.domain) for n in ours.graph.node if n.op_type in qdq) == sorted(
        (n.name, n.domain) for n in ref.graph.node if n.op_type in qdq
    )
    assert {(o.domain, o.version) for o in ours.opset_import} == {
        (o.domain, o.version) for o in ref.opset_import
    }
    mine = {t.name: numpy_helper.to_array(t) for t in ours.graph.initializer}
    theirs = {t.name: numpy_helper.to_array(t) for t in ref.graph.initializer}
    assert sorted(mine) == sorted(theirs)
    for name, expected in theirs.items():
        got = mine[name]
        assert (got.dtype, got.shape) == (expected.dtype, expected.shape), name
        if np.issubdtype(expected.dtype, np.floating):
            # a float16 scale may differ by its ulp (sonnx's float16 run is not onnxruntime's)
            rtol = 1e-5 if expected.dtype == np.float32 else 1e-3
            np.testing.assert_allclose(got, expected, rtol=rtol, err_msg=name)
        else:
            # one step; an int32 bias also the ulp its float32 scale may differ by (sonnx's
            # float activations, hence ranges, can differ from onnxruntime's in the last bit)
            wide = np.abs(expected.astype(np.int64))
            diff = np.abs(got.astype(np.int64) - expected.astype(np.int64))
            assert (diff <= 1 + (expected.dtype == np.int32) * 2e-7 * wide).all(), name


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy"])
def test_depthwise_cnn_matches_onnxruntime(cnn, tmp_path: Path, method: str, per_channel: bool):
    model, feeds = cnn
    options = {"calibrate_method": method, "per_channel": per_channel}
    ours = quantize_static(model, feeds, **options)
    assert_same_qdq(ours, ort_quantized(model, feeds, tmp_path, **options))
    # BN folded into the convolutions, ReLU and ReLU6 (Clip) dropped into their producers
    assert "Relu" not in {n.op_type for n in ours.graph.node}
    assert "Clip" not in {n.op_type for n in ours.graph.node}


@pytest.mark.parametrize(
    "options",
    [
        {"weight_type": "int4"},
        {"activation_type": "uint16", "weight_type": "int16"},
        {"activation_type": "uint8", "weight_type": "uint4", "per_channel": True},
        {
            "activation_type": "uint8",
            "reduce_range": True,
            "extra_options": {"ActivationSymmetric": True},
        },
        {"extra_options": {"QDQKeepRemovableActivations": True, "AddQDQPairToWeight": True}},
    ],
    ids=["int4", "int16", "uint4-per-channel", "activation-symmetric", "keep-relu-qdq-weights"],
)
def test_types_and_options_match_onnxruntime(cnn, tmp_path: Path, options: dict):
    model, feeds = cnn
    ours = quantize_static(model, feeds, **options)
    assert_same_qdq(ours, ort_quantized(model, feeds, tmp_path, **options))


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("method", ["minmax", "entropy"])
def test_tiny_bert_matches_onnxruntime(bert, tmp_path: Path, method: str, per_channel: bool):
    model, feeds = bert
    options = {"calibrate_method": method, "per_channel": per_channel, "activation_type": "uint8"}
    ours = quantize_static(model, feeds, **options)
    assert_same_qdq(ours, ort_quantized(model, feeds, tmp_path, **options))
    quantized_ops = {
        n.op_type
        for n in ours.graph.node
        if any(i.endswith("_DequantizeLinear_Output") for i in n.input)
    }
    assert {"MatMul", "Add", "Softmax", "LayerNormalization", "Gemm"} <= quantized_ops


@pytest.mark.parametrize(
    "options",
    [{}, {"activation_type": "uint8", "per_channel": True, "calibrate_method": "percentile"}],
    ids=["int8", "uint8-per-channel-percentile"],
)
def test_pads_splits_and_elementwise_ops_match_onnxruntime(tmp_path: Path, options: dict):
    model, feeds = operator_mix()
    ours = quantize_static(model, feeds, **options)
    assert_same_qdq(ours, ort_quantized(model, feeds, tmp_path, **options))
    assert {"Pad", "Split", "Concat", "Sigmoid", "AveragePool"} <= {
        n.op_type for n in ours.graph.node
    }


def test_tiny_bert_percentile_survives_constant_tensors(bert):
    """onnxruntime's percentile histogram fails on a tensor of one magnitude (numpy: 'Too
    many bins for data range'); sonnx keeps that tensor's min and max."""
    model, feeds = bert
    quantized = quantize_static(model, feeds, calibrate_method="percentile")
    assert any(n.op_type == "QuantizeLinear" for n in quantized.graph.node)


@pytest.mark.parametrize("which", ["cnn", "bert"])
def test_onnxruntime_and_sonnx_run_the_output_alike(request, which: str):
    model, feeds = request.getfixturevalue(which)
    quantized = quantize_static(model, feeds, activation_type="uint8", reduce_range=True)
    session = ort.InferenceSession(quantized.SerializeToString())
    rep = sonnx.prepare(quantized)
    float_rep = sonnx.prepare(model)
    for feed in feeds:
        expected = session.run(None, feed)[0]
        got = sonnx.tensor.to_numpy(rep.run(feed)[0])
        np.testing.assert_allclose(got, expected, atol=1e-5)
        reference = sonnx.tensor.to_numpy(float_rep.run(feed)[0])
        assert np.abs(got - reference).max() < 0.1 * np.abs(reference).max()


def test_model_as_path_rep_and_reader_give_the_same_model(cnn, tmp_path: Path):
    model, feeds = cnn
    expected = quantize_static(model, feeds)
    path = tmp_path / "cnn.onnx"
    onnx.save(model, path)
    from_path = quantize_static(path, Reader(feeds))
    from_rep = quantize_static(sonnx.prepare(model), [list(f.values()) for f in feeds])
    for other in (from_path, from_rep):
        assert_same_qdq(other, expected)


def test_a_rep_is_quantized_with_its_current_weights(cnn):
    """A SingaRep's weights after training (here: doubled in place) are the ones quantized."""
    model, feeds = cnn
    rep = sonnx.prepare(model)
    with torch.no_grad():
        rep.params["fc.weight"].data.mul_(2.0)
    before = _initializer(quantize_static(model, feeds), "fc.weight_scale")
    after = _initializer(quantize_static(rep, feeds), "fc.weight_scale")
    np.testing.assert_allclose(after, 2.0 * before, rtol=1e-6)


def _initializer(model: onnx.ModelProto, name: str) -> np.ndarray:
    return numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == name))


def test_onnxruntime_enums_are_accepted(cnn, tmp_path: Path):
    model, feeds = cnn
    ours = quantize_static(
        model,
        feeds,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        calibrate_method=CalibrationMethod.Percentile,
    )
    reference = ort_quantized(
        model, feeds, tmp_path, activation_type="uint8", calibrate_method="percentile"
    )
    assert_same_qdq(ours, reference)


def test_nodes_to_exclude_and_op_types(cnn, tmp_path: Path):
    model, feeds = cnn
    first_conv = next(n.name for n in model.graph.node if n.op_type == "Conv")
    options = {"nodes_to_exclude": [first_conv], "op_types_to_quantize": ["Conv", "Relu", "Gemm"]}
    ours = quantize_static(model, feeds, **options)
    assert_same_qdq(ours, ort_quantized(model, feeds, tmp_path, **options))


def test_input_model_is_not_modified(cnn):
    model, feeds = cnn
    before = model.SerializeToString()
    quantize_static(model, feeds)
    assert model.SerializeToString() == before


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"activation_type": "float8"}, "activation_type must be one of"),
        ({"weight_type": QuantType.QFLOAT8E4M3FN}, "received <QuantType.QFLOAT8E4M3FN"),
        ({"activation_type": "int8", "weight_type": "uint8"}, "weight_type='uint8'"),
        ({"calibrate_method": "distribution"}, "received 'distribution'"),
        ({"extra_options": {"SmoothQuant": True}}, "received keys ['SmoothQuant']"),
        ({"nodes_to_exclude": "conv"}, "received 'conv'"),
    ],
)
def test_bad_options_are_typed_errors(cnn, options: dict, message: str):
    model, feeds = cnn
    with pytest.raises(BadInputError) as info:
        quantize_static(model, feeds, **options)
    assert message in str(info.value)


def test_a_model_with_nothing_to_quantize_is_a_bad_model(cnn):
    model, feeds = cnn
    with pytest.raises(BadModelError, match="nothing to quantize"):
        quantize_static(model, feeds, op_types_to_quantize=["LSTM"])
    shape_only = onnx.helper.make_model(
        onnx.helper.make_graph(
            [onnx.helper.make_node("Shape", ["x"], ["s"])],
            "g",
            [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
            [onnx.helper.make_tensor_value_info("s", onnx.TensorProto.INT64, [2])],
        ),
        opset_imports=[onnx.helper.make_opsetid("", 17)],
    )
    with pytest.raises(BadModelError, match="received nodes of types \\['Shape'\\]"):
        quantize_static(shape_only, [{"x": np.zeros((2, 3), np.float32)}])


def test_a_model_argument_of_the_wrong_kind_is_a_typed_error(cnn, tmp_path: Path):
    _, feeds = cnn
    with pytest.raises(BadInputError, match="received int"):
        quantize_static(3, feeds)
    with pytest.raises(BadModelError, match="cannot read the model file"):
        quantize_static(tmp_path / "missing.onnx", feeds)
