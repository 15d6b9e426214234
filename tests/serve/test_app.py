"""The HTTP API against a real ``sonnx serve`` process, through tritonclient: health,
metadata, JSON and binary inference equal to ``prepare().run``, versions, the repository."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from sonnx import tensor
from tests.serve import helpers


def run(rep, *arrays) -> list[np.ndarray]:
    return [tensor.to_numpy(t) for t in rep.run(list(arrays))]


def test_health_and_server_metadata(client) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "sonnx"
    assert {"binary_tensor_data", "model_repository"} <= set(meta["extensions"])


def test_model_metadata_has_kserve_datatypes_and_dynamic_dims(client) -> None:
    cnn = client.get_model_metadata("cnn")
    assert cnn["versions"] == ["1"]
    assert cnn["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 3, 16, 16]}]
    assert cnn["outputs"] == [{"name": "output", "datatype": "FP32", "shape": [-1, 10]}]
    bert = client.get_model_metadata("bert", model_version="1")
    assert [(i["name"], i["datatype"], i["shape"]) for i in bert["inputs"]] == [
        ("input_ids", "INT64", [-1, -1]),
        ("attention_mask", "INT64", [-1, -1]),
        ("token_type_ids", "INT64", [-1, -1]),
    ]
    assert [(o["name"], o["shape"]) for o in bert["outputs"]] == [
        ("logits", [-1, -1, 4]),
        ("pooled", [-1, 4]),
    ]
    assert client.is_model_ready("cnn") and client.is_model_ready("bert", "1")


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_cnn_inference_equals_prepare_run(client, reps, binary: bool) -> None:
    x = np.random.default_rng(1).standard_normal((3, *helpers.CNN_IMAGE)).astype(np.float32)
    given = httpclient.InferInput("input", list(x.shape), "FP32")
    given.set_data_from_numpy(x, binary_data=binary)
    wanted = httpclient.InferRequestedOutput("output", binary_data=binary)
    result = client.infer("cnn", [given], outputs=[wanted], request_id="r-1")
    response = result.get_response()
    assert response["id"] == "r-1" and response["model_version"] == "1"
    assert ("data" in response["outputs"][0]) is not binary
    np.testing.assert_array_equal(result.as_numpy("output"), run(reps["cnn/1"], x)[0])


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_bert_inference_with_three_int64_inputs(client, reps, binary: bool) -> None:
    arrays = [t.numpy() for t in helpers.bert_inputs(batch=2, seed=4)]
    names = ["input_ids", "attention_mask", "token_type_ids"]
    given = []
    for name, array in zip(names, arrays, strict=True):
        given.append(httpclient.InferInput(name, list(array.shape), "INT64"))
        given[-1].set_data_from_numpy(array, binary_data=binary)
    expected = run(reps["bert/1"], *arrays)
    both = client.infer("bert", given)  # no outputs named: all of them, binary
    assert [o["name"] for o in both.get_response()["outputs"]] == ["logits", "pooled"]
    np.testing.assert_array_equal(both.as_numpy("logits"), expected[0])
    np.testing.assert_array_equal(both.as_numpy("pooled"), expected[1])
    pooled = httpclient.InferRequestedOutput("pooled", binary_data=binary)
    one = client.infer("bert", given, outputs=[pooled])
    assert [o["name"] for o in one.get_response()["outputs"]] == ["pooled"]
    np.testing.assert_array_equal(one.as_numpy("pooled"), expected[1])


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_every_datatype_round_trips(client, binary: bool) -> None:
    rng = np.random.default_rng(5)
    given, wanted, arrays = [], [], {}
    for name, (dtype, _) in helpers.DATATYPES.items():
        if name == "BF16" and not binary:
            # tritonclient sends BF16 only as binary; test_codec covers BF16 in JSON
            array = np.zeros((2, 3), dtype)
            given.append(httpclient.InferInput(f"in_{name}", [2, 3], name))
            given[-1].set_data_from_numpy(array, binary_data=True)
            continue
        if name == "BOOL":
            array = rng.random((2, 3)) > 0.5
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            array = rng.integers(info.min, info.max, (2, 3), dtype=dtype, endpoint=True)
        else:
            array = rng.standard_normal((2, 3)).astype(dtype)
        arrays[name] = array
        given.append(httpclient.InferInput(f"in_{name}", [2, 3], name))
        given[-1].set_data_from_numpy(array, binary_data=binary)
        wanted.append(httpclient.InferRequestedOutput(f"out_{name}", binary_data=binary))
    result = client.infer("identity", given, outputs=wanted)
    for name, array in arrays.items():
        out = result.as_numpy(f"out_{name}")
        assert out.dtype == array.dtype, name
        np.testing.assert_array_equal(out, array, err_msg=name)


def test_versions_newest_by_default_and_by_number(client, reps) -> None:
    assert client.get_model_metadata("versioned")["versions"] == ["1", "2"]
    x = np.ones((1, *helpers.CNN_IMAGE), np.float32)
    given = httpclient.InferInput("input", list(x.shape), "FP32")
    given.set_data_from_numpy(x)
    newest = client.infer("versioned", [given])
    assert newest.get_response()["model_version"] == "2"
    np.testing.assert_array_equal(newest.as_numpy("output"), run(reps["versioned/2"], x)[0])
    first = client.infer("versioned", [given], model_version="1")
    np.testing.assert_array_equal(first.as_numpy("output"), run(reps["versioned/1"], x)[0])
    with pytest.raises(InferenceServerException, match="no version '7' loaded") as err:
        client.infer("versioned", [given], model_version="7")
    assert err.value.status() == "404"


def test_repository_index_unload_and_load(client) -> None:
    index = {row["name"]: row for row in client.get_model_repository_index()}
    assert index["cnn"]["state"] == "READY"
    assert index["text"]["state"] == "READY" and index["labels"]["state"] == "READY"
    client.unload_model("versioned")
    assert not client.is_model_ready("versioned")
    with pytest.raises(InferenceServerException, match="not loaded") as err:
        client.get_model_metadata("versioned")
    assert err.value.status() == "404"
    client.load_model("versioned")
    assert client.is_model_ready("versioned", "1") and client.is_model_ready("versioned", "2")
