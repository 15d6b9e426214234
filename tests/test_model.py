"""Model: compile, mode dispatch, training, graph mode, and the states file."""

from __future__ import annotations

import io
import json
import os
import zipfile

import numpy as np
import pytest
import torch

import sonnx.autograd as autograd
from sonnx import layer, model, opt
from sonnx.errors import BadInputError, ExportError
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import PlaceHolder, Tensor

rng = np.random.default_rng(0)


class CNN(model.Model):
    def __init__(self) -> None:
        super().__init__()
        self.conv = layer.Conv2d(6, 3, padding=1)
        self.relu = layer.ReLU()
        self.pool = layer.MaxPool2d(2)
        self.flatten = layer.Flatten()
        self.fc = layer.Linear(5)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.flatten(self.pool(self.relu(self.conv(x)))))


class BNNet(model.Model):
    """Batch norm and a custom train_one_batch, as SINGA examples write them."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = layer.Conv2d(4, 3, padding=1, bias=False)
        self.bn = layer.BatchNorm2d()
        self.fc = layer.Linear(3)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(autograd.flatten(autograd.relu(self.bn(self.conv(x)))))

    def train_one_batch(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


def data(n: int = 16, classes: int = 5) -> tuple[Tensor, Tensor]:
    x = Tensor(data=rng.standard_normal((n, 1, 8, 8)).astype(np.float32), requires_grad=False)
    y = Tensor(data=rng.integers(0, classes, n).astype(np.int32), requires_grad=False)
    return x, y


def built(cls=CNN, optimizer=None, **compile_kw) -> model.Model:
    m = cls()
    m.set_optimizer(optimizer or opt.SGD(0.05, momentum=0.9))
    m.compile([PlaceHolder((16, 1, 8, 8))], **compile_kw)
    return m


def test_compile_initialises_names_and_sets_mode():
    m = built(is_train=False)
    assert list(m.get_params()) == ["conv.W", "conv.b", "fc.W", "fc.b"]
    assert m.fc.W.shape == (96, 5) and m.conv.W.name == "conv.W"
    assert m.training is False and autograd.training is False
    m.train()
    assert m.training and m.fc.training and autograd.training
    with pytest.raises(BadInputError, match="inputs must be a non-empty list of Tensors"):
        CNN().compile([])


def test_call_dispatches_by_mode_and_training_lowers_loss():
    m = built()
    x, y = data()
    out, first = m(x, y)
    assert out.shape == (16, 5)
    for _ in range(15):
        _, loss = m(x, y)
    assert loss.item() < 0.5 * first.item()
    m.eval()
    assert m(x).shape == (16, 5)
    assert m.optimizer.step_counter == 16


def test_set_optimizer_and_missing_optimizer():
    with pytest.raises(BadInputError, match=r"expected a sonnx\.opt Optimizer, received dict"):
        CNN().set_optimizer({"lr": 0.1})
    m = CNN()
    m.compile([PlaceHolder((2, 1, 8, 8))])
    with pytest.raises(BadInputError, match="no optimizer"):
        m(*data(2))


@pytest.mark.parametrize("cls", [CNN, BNNet])
def test_graph_mode_equals_eager(cls):
    """Graph mode gives the same losses, outputs and states as eager (backend without
    numeric rewrites, so the comparison is exact)."""
    x, y = data(16, 3)
    results = []
    for use_graph in (False, True):
        torch.manual_seed(1)
        m = cls()
        m.graph_backend = "aot_eager"
        m.set_optimizer(opt.SGD(0.05, momentum=0.9))
        m.compile([x], is_train=True, use_graph=use_graph)
        losses = [m(x, y)[1].item() for _ in range(3)]
        m.eval()
        results.append((losses, m(x).data, {k: v.data for k, v in m.get_states().items()}))
    (eager_losses, eager_out, eager_states), (graph_losses, graph_out, graph_states) = results
    assert graph_losses == eager_losses
    torch.testing.assert_close(graph_out, eager_out, rtol=0, atol=0)
    for name, value in eager_states.items():
        torch.testing.assert_close(graph_states[name], value, rtol=0, atol=0, msg=name)


class DropoutNet(model.Model):
    def __init__(self) -> None:
        super().__init__()
        self.drop = layer.Dropout(0.5)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(x)


def test_graph_mode_draws_a_new_dropout_mask_every_call():
    m = DropoutNet()
    m.graph_backend = "aot_eager"
    x = Tensor(data=np.ones((4, 64), np.float32), requires_grad=False)
    m.compile([x], is_train=False, use_graph=True)
    m.train()
    masks = {tuple(m.forward(x).data.reshape(-1).tolist()) for _ in range(4)}
    assert len(masks) > 1, "graph mode replays one dropout mask"
    m.eval()
    torch.testing.assert_close(m(x).data, x.data)


def test_graph_mode_records_one_node_that_export_refuses():
    m = CNN()
    m.graph_backend = "aot_eager"
    m.compile([PlaceHolder((2, 1, 8, 8))], is_train=False, use_graph=True)
    out = m(data(2)[0])
    assert isinstance(out.creator, model.CompiledForward)
    with pytest.raises(ExportError, match="graph mode"):
        out.creator.export(GraphBuilder(17), ["x"], ["y"])
    m.graph(False)
    assert m(data(2)[0]).creator.op_type == "Gemm"


# ---- save_states / load_states --------------------------------------------------------------


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


def test_load_rejects_states_of_another_model(tmp_path):
    built(BNNet).save_states(tmp_path / "bn.zip")
    with pytest.raises(BadInputError, match=r"states missing from the file: \['conv.b'"):
        built().load_states(tmp_path / "bn.zip")
    with pytest.raises(BadInputError, match="compile it first"):
        CNN().load_states(tmp_path / "bn.zip")
    with pytest.raises(BadInputError, match="aux state 'note' must be a Tensor"):
        built().save_states(tmp_path / "x.zip", aux_states={"note": "hello"})
