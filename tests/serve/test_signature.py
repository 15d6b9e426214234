"""A model's KServe signature and the request checks made against it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from sonnx.serve.codec import RequestedOutput, RequestTensor
from sonnx.serve.config import ModelConfig
from sonnx.serve.errors import ConfigError, InvalidRequestError, UnsupportedError
from sonnx.serve.signature import ModelSignature
from tests.serve import helpers


@pytest.fixture(scope="module")
def bert():
    return helpers.bert_model()


def tensor(name: str, shape: tuple[int, ...], datatype: str = "INT64") -> RequestTensor:
    return RequestTensor(name, datatype, shape, np.zeros(shape, np.int64))


def bert_request(*shapes: tuple[int, ...]) -> list[RequestTensor]:
    names = ["input_ids", "attention_mask", "token_type_ids"]
    return [tensor(n, s) for n, s in zip(names, shapes, strict=False)]


def test_string_tensors_are_bytes_and_may_be_batched() -> None:
    signature = ModelSignature.from_model(helpers.string_model(), ModelConfig(max_batch_size=4))
    assert signature.metadata() == {
        "inputs": [{"name": "text", "datatype": "BYTES", "shape": [-1, 2]}],
        "outputs": [
            {"name": "is_cat", "datatype": "BOOL", "shape": [-1, 2]},
            {"name": "echo", "datatype": "BYTES", "shape": [-1, 4]},
        ],
    }
    words = np.array([["a", "b"]], dtype=object)
    arrays = signature.check_inputs([RequestTensor("text", "BYTES", (1, 2), words)])
    assert arrays["text"] is words
    with pytest.raises(InvalidRequestError, match="'text' expects datatype BYTES, received FP32"):
        signature.check_inputs([RequestTensor("text", "FP32", (1, 2), np.zeros((1, 2)))])


def test_a_type_without_kserve_datatype_is_refused_by_name() -> None:
    model = helpers.string_model()
    model.graph.output[1].type.tensor_type.elem_type = onnx.TensorProto.COMPLEX64
    with pytest.raises(UnsupportedError, match="output 'echo' has ONNX element type COMPLEX64"):
        ModelSignature.from_model(model, ModelConfig())


def test_batching_needs_a_dynamic_first_dim(bert) -> None:
    config = ModelConfig(max_batch_size=4, inputs={"input_ids": (2, -1)})
    with pytest.raises(ConfigError, match="'input_ids' has shape \\[2, -1\\]"):
        ModelSignature.from_model(bert, config)


def test_config_may_fix_dynamic_dims_only(bert) -> None:
    fixed = ModelConfig(inputs={n: (-1, 8) for n in ("input_ids", "token_type_ids")})
    signature = ModelSignature.from_model(bert, fixed)
    assert signature.inputs[0].shape == (-1, 8) and signature.inputs[1].shape == (-1, -1)
    with pytest.raises(InvalidRequestError, match=r"expects shape \[-1, 8\].*received \[1, 9\]"):
        signature.check_inputs(bert_request((1, 9), (1, 9), (1, 9)))
    with pytest.raises(ConfigError, match="shape \\[-1, 3\\] does not fit the model's \\[-1, 4\\]"):
        ModelSignature.from_model(bert, ModelConfig(outputs={"pooled": (-1, 3)}))
    with pytest.raises(ConfigError, match="unknown name\\(s\\) \\['ids'\\]"):
        ModelSignature.from_model(bert, ModelConfig(inputs={"ids": (-1, 8)}))


def test_request_checks(bert) -> None:
    signature = ModelSignature.from_model(bert, ModelConfig(max_batch_size=4))
    arrays = signature.check_inputs(bert_request((2, 5), (2, 5), (2, 5)))
    assert list(arrays) == ["input_ids", "attention_mask", "token_type_ids"]
    with pytest.raises(InvalidRequestError, match="missing input\\(s\\) \\['token_type_ids'\\]"):
        signature.check_inputs(bert_request((2, 5), (2, 5)))
    with pytest.raises(InvalidRequestError, match=r"same batch size.*'attention_mask': 3"):
        signature.check_inputs(bert_request((2, 5), (3, 5), (2, 5)))
    with pytest.raises(InvalidRequestError, match="at most max_batch_size 4, received 5"):
        signature.check_inputs(bert_request((5, 5), (5, 5), (5, 5)))
    request = bert_request((1, 5), (1, 5), (1, 5))
    request[2] = tensor("token_type_ids", (1, 5), "INT32")
    with pytest.raises(InvalidRequestError, match="expects datatype INT64, received INT32"):
        signature.check_inputs(request)


def test_requested_outputs(bert) -> None:
    signature = ModelSignature.from_model(bert, ModelConfig())
    assert signature.check_outputs(None, True) == [
        RequestedOutput("logits", True),
        RequestedOutput("pooled", True),
    ]
    twice = [RequestedOutput("pooled", False)] * 2
    with pytest.raises(InvalidRequestError, match="requested once"):
        signature.check_outputs(twice, False)
