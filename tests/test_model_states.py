"""The states file (``sonnx.model_states``) as Model.save_states and Model.load_states write and
read it: exact round trips, a plain-JSON manifest without pickle, atomic replacement, and
corrupt or foreign files refused by name."""

from __future__ import annotations

import io
import json
import os
import zipfile

import numpy as np
import pytest
import torch

from sonnx import opt
from sonnx.errors import BadInputError
from sonnx.tensor import PlaceHolder, Tensor
from tests.test_model import CNN, BNNet, built, data


def test_save_load_round_trip_is_exact_with_aux_states(tmp_path):
    m = built(BNNet, opt.Adam(0.01))
    x, y = data(16, 3)
    for _ in range(3):
        m(x, y)
    path = tmp_path / "ckpt.zip"
    m.save_states(path, aux_states={**m.optimizer.get_states(), "epoch": np.int64(7)})
    m.eval()
    expected = m(x).data

    fresh = built(BNNet, opt.Adam(0.01))
    aux = fresh.load_states(path)
    fresh.eval()
    assert torch.equal(fresh(x).data, expected)
    assert int(aux.pop("epoch").item()) == 7
    fresh.optimizer.set_states(aux)
    assert fresh.optimizer.step_counter == 3
    assert os.listdir(tmp_path) == ["ckpt.zip"]


def test_bfloat16_states_round_trip_exactly(tmp_path):
    m = CNN()
    m.compile([PlaceHolder((2, 1, 8, 8), dtype=torch.bfloat16)], is_train=False)
    x = Tensor(data=torch.randn(2, 1, 8, 8, dtype=torch.bfloat16), requires_grad=False)
    expected = m(x).data
    m.save_states(tmp_path / "bf16.zip", aux_states={"f8": torch.ones(3).to(torch.float8_e4m3fn)})
    fresh = CNN()
    fresh.compile([PlaceHolder((2, 1, 8, 8), dtype=torch.bfloat16)], is_train=False)
    aux = fresh.load_states(tmp_path / "bf16.zip")
    assert fresh.fc.W.dtype == torch.bfloat16
    assert torch.equal(fresh.fc.W.data, m.fc.W.data)
    assert torch.equal(fresh(x).data, expected)
    assert aux["f8"].dtype == torch.float8_e4m3fn and aux["f8"].data.float().tolist() == [1, 1, 1]


def test_manifest_is_plain_json_and_arrays_need_no_pickle(tmp_path):
    m = built(is_train=False)
    m.save_states(tmp_path / "s.zip")
    with zipfile.ZipFile(tmp_path / "s.zip") as zf:
        manifest = json.loads(zf.read("manifest.json"))
    assert manifest["format"] == "sonnx-states" and manifest["version"] == 1
    assert [r["name"] for r in manifest["tensors"]] == ["conv.W", "conv.b", "fc.W", "fc.b"]
    assert manifest["tensors"][0]["shape"] == [6, 1, 3, 3]


def test_save_replaces_atomically_and_keeps_old_file_on_failure(tmp_path, monkeypatch):
    m = built(is_train=False)
    path = tmp_path / "s.zip"
    m.save_states(path)
    before = path.read_bytes()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(zipfile.ZipFile, "writestr", broken)
    with pytest.raises(OSError, match="disk full"):
        m.save_states(path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["s.zip"]


def _zip(path, files: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, content in files.items():
            zf.writestr(name, content)


def test_load_rejects_corrupt_truncated_and_foreign_files(tmp_path):
    m = built(is_train=False)
    good = tmp_path / "good.zip"
    m.save_states(good)
    content = good.read_bytes()

    (tmp_path / "noise.zip").write_bytes(os.urandom(300))
    (tmp_path / "cut.zip").write_bytes(content[: len(content) // 2])
    _zip(tmp_path / "foreign.zip", {"model.pt": b"x", "weights.bin": b"y"})
    with zipfile.ZipFile(good) as zf:
        tensors = zf.read("tensors.npz")
        manifest = json.loads(zf.read("manifest.json"))
    _zip(tmp_path / "notjson.zip", {"manifest.json": b"{nope", "tensors.npz": tensors})
    other = json.dumps({**manifest, "format": "other"}).encode()
    _zip(tmp_path / "format.zip", {"manifest.json": other, "tensors.npz": tensors})
    newer = json.dumps({**manifest, "version": 99}).encode()
    _zip(tmp_path / "version.zip", {"manifest.json": newer, "tensors.npz": tensors})
    lying = dict(manifest, tensors=[dict(manifest["tensors"][0], shape=[1])])
    _zip(
        tmp_path / "shape.zip",
        {"manifest.json": json.dumps(lying).encode(), "tensors.npz": tensors},
    )
    flipped = bytearray(content)
    flipped[len(flipped) // 3] ^= 0xFF
    (tmp_path / "flipped.zip").write_bytes(bytes(flipped))

    cases = {
        "noise.zip": "not a readable zip archive",
        "cut.zip": "not a readable zip archive",
        "foreign.zip": r"expected a zip holding manifest.json and tensors.npz, found \['model.pt'",
        "notjson.zip": "manifest.json is not JSON",
        "format.zip": "does not declare format 'sonnx-states'",
        "version.zip": "format version 99 is not supported",
        "shape.zip": "the manifest says float32 \\[1\\], the array is float32 \\[6, 1, 3, 3\\]",
        "flipped.zip": "not a valid sonnx states file",
    }
    for name, message in cases.items():
        with pytest.raises(BadInputError, match=message) as info:
            m.load_states(tmp_path / name)
        assert str(tmp_path / name) in str(info.value)
    with pytest.raises(BadInputError, match="no such file"):
        m.load_states(tmp_path / "missing.zip")


def test_load_rejects_pickled_arrays(tmp_path):
    m = built(is_train=False)
    good = tmp_path / "good.zip"
    m.save_states(good)
    with zipfile.ZipFile(good) as zf:
        manifest = zf.read("manifest.json")
    buffer = io.BytesIO()
    np.savez(buffer, t0=np.array([{"evil": 1}], dtype=object))
    _zip(tmp_path / "pickle.zip", {"manifest.json": manifest, "tensors.npz": buffer.getvalue()})
    with pytest.raises(BadInputError, match="cannot be read without pickle"):
        m.load_states(tmp_path / "pickle.zip")
