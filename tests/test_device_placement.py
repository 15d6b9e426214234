"""Device placement: tensors an op creates live on its inputs' device.

The machine running the tests has no GPU, so CUDA paths are checked in three ways:

* statically: every torch factory call in the op, converter, layer, optimizer and model code
  names its ``device=`` (or moves the result with ``.to(device=...)``, or feeds a
  ``Tensor(data=..., device=...)``), unless a ``# host:`` comment says why host placement is
  intended;
* at run time on the CPU: outputs are on the inputs' device;
* at run time on torch's ``meta`` device, which like CUDA refuses to combine its tensors with
  CPU tensors of rank 1 or more (but, like CUDA, accepts 0-d CPU tensors): ops and an imported
  graph run there end to end without a host tensor sneaking in.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import sonnx
from sonnx import autograd
from sonnx.device import Device, get_default_device, set_default_device
from sonnx.errors import BadInputError
from sonnx.tensor import Tensor

SRC = Path(__file__).resolve().parents[1] / "src" / "sonnx"
AUDITED = [
    *sorted((SRC / "operators").rglob("*.py")),
    *sorted((SRC / "engine").glob("*.py")),
    *sorted((SRC / "onnx" / "converters").glob("*.py")),
    SRC / "runtime" / "program.py",
    *sorted((SRC / "lora").glob("*.py")),
    *sorted((SRC / "layer").glob("*.py")),
    *sorted((SRC / "opt").glob("*.py")),
    SRC / "model.py",
]
#: torch functions that create a tensor (on the CPU unless told otherwise).
FACTORIES = {
    "tensor",
    "as_tensor",
    "arange",
    "zeros",
    "ones",
    "full",
    "empty",
    "eye",
    "linspace",
    "rand",
    "randn",
    "randint",
    "randperm",
    "Generator",
    "from_numpy",
}
CPU = Device("cpu")
META = Device("meta")


def _has_device(call: ast.Call) -> bool:
    return any(k.arg == "device" for k in call.keywords)


def _moved(call: ast.Call, parents: dict[ast.AST, ast.AST]) -> bool:
    """``torch.f(...).to(<device>)``, or ``Tensor(data=torch.f(...), device=...)``."""
    parent = parents.get(call)
    if isinstance(parent, ast.Attribute) and parent.attr == "to":
        to_call = parents.get(parent)
        if isinstance(to_call, ast.Call):
            return _has_device(to_call) or any("device" in ast.unparse(a) for a in to_call.args)
    if isinstance(parent, ast.keyword) and parent.arg == "data":
        owner = parents.get(parent)
        return (
            isinstance(owner, ast.Call)
            and isinstance(owner.func, ast.Name)
            and owner.func.id == "Tensor"
            and _has_device(owner)
        )
    return False


def _marked_host(call: ast.Call, lines: list[str]) -> bool:
    """A ``# host: <reason>`` comment on the call's lines or in the comment block above."""
    first, last = call.lineno - 1, (call.end_lineno or call.lineno) - 1
    candidates = list(lines[first : last + 1])
    above = first - 1
    while above >= 0 and lines[above].lstrip().startswith("#"):
        candidates.append(lines[above])
        above -= 1
    for line in candidates:
        _, hash_, comment = line.partition("# host:")
        if hash_ and comment.strip():
            return True
    return False


def _unplaced_lines(path: Path) -> list[int]:
    """Lines of the torch factory calls in ``path`` that are neither placed nor marked host."""
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "torch"
        and node.func.attr in FACTORIES
        and not (_has_device(node) or _moved(node, parents) or _marked_host(node, lines))
    )


def test_every_factory_call_is_placed_or_marked_host():
    assert len(AUDITED) > 40  # the globs found the source tree
    unplaced = [
        f"{path.relative_to(SRC)}:{line}" for path in AUDITED for line in _unplaced_lines(path)
    ]
    assert unplaced == [], "tensors created without device= and without a '# host:' reason"


def test_the_scan_flags_unplaced_calls_and_dtype_only_moves(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import torch\n"
        "a = torch.tensor([1, 2])\n"
        "b = torch.zeros(3).to(torch.int64)\n"
        "c = torch.arange(3, device=x.device)\n"
        "d = torch.from_numpy(arr).to(device=dev)\n"
        "e = Tensor(data=torch.tensor(1.0), device=dev)\n"
        "f = torch.ones(2)  # host: serialised\n"
        "g = torch.ones(2)  # host:\n"
        "# host: the reason, on the line above\n"
        "h = torch.ones(2)\n"
        "i = torch.from_numpy(arr).to(x.device)\n"
    )
    assert _unplaced_lines(probe) == [2, 3, 8]


# ---- run time -------------------------------------------------------------------------------


def _on(dev: Device, array: np.ndarray) -> Tensor:
    return Tensor(data=array, device=dev, requires_grad=False)


def _devices(result) -> set[Device]:
    outs = result if isinstance(result, (tuple, list)) else [result]
    return {t.device for t in outs if t is not None}


def _ops(dev: Device) -> dict[str, object]:
    """Ops whose forward creates tensors from host values, on inputs living on ``dev``."""
    rng = np.random.default_rng(0)
    x = _on(dev, rng.random((1, 2, 3, 4), dtype=np.float32))
    ints = _on(dev, np.arange(12, dtype=np.int32).reshape(3, 4))
    return {
        "shrink on ints": lambda: autograd.shrink(ints, 1.0, 2.0),
        "attention": lambda: autograd.attention(x, x, x),
        "dynamic_quantize_linear": lambda: autograd.dynamic_quantize_linear(x),
        "relu": lambda: autograd.relu(x),
        "mul by a Python number": lambda: autograd.mul(x, 2.0),
    }


def _host_value_ops(dev: Device) -> dict[str, object]:
    """Ops that also read host values from their inputs (so they cannot run on ``meta``)."""
    rng = np.random.default_rng(0)
    x = _on(dev, rng.random((1, 2, 3, 4), dtype=np.float32))
    u8 = _on(dev, np.arange(12, dtype=np.uint8).reshape(3, 4))
    indices = _on(dev, np.array([0, 2], dtype=np.int64))
    return {
        "pad reflect": lambda: autograd.pad(x, "reflect", [0, 0, 1, 1, 0, 0, 1, 1]),
        "reduce_max on uint8": lambda: autograd.reduce_max(u8, [1]),
        "topk on uint8": lambda: autograd.topk(u8, 2),
        "range": lambda: autograd.range(_on(dev, np.float32(0)), 5.0, 1.0),
        "resize": lambda: autograd.resize(x, scales=[1, 1, 2, 2]),
        "onehot": lambda: autograd.onehot(0, indices, 3, [0.0, 1.0]),
        "array_feature_extractor": lambda: autograd.array_feature_extractor(x, [0, 1]),
        "gather": lambda: autograd.gather(x, 3, [0, 1]),
        "adagrad": lambda: autograd.adagrad(0.1, 1, [x], [x], [x]),
        "constant_of_shape": lambda: autograd.constant_of_shape(_on(dev, np.array([2, 3]))),
        "col2im": lambda: autograd.col2im(
            _on(dev, rng.random((1, 4, 4), dtype=np.float32)), [3, 3], [2, 2]
        ),
        "random_uniform_like": lambda: autograd.random_uniform_like(x, seed=1),
        "bernoulli seeded": lambda: autograd.bernoulli(_on(dev, np.full(4, 0.5)), seed=3),
        "multinomial seeded": lambda: autograd.multinomial(
            _on(dev, np.zeros((2, 3), np.float32)), 4, seed=3
        ),
    }


@pytest.mark.parametrize("name", sorted({**_ops(CPU), **_host_value_ops(CPU)}))
def test_outputs_follow_the_input_device_on_cpu(name):
    result = {**_ops(CPU), **_host_value_ops(CPU)}[name]()
    assert _devices(result) == {CPU}


@pytest.mark.parametrize("name", sorted(_ops(META)))
def test_ops_run_on_a_non_cpu_device(name):
    assert _devices(_ops(META)[name]()) == {META}


def _graph_with_input_less_nodes() -> onnx.ModelProto:
    """Y = (X + RandomUniform) * W + C, with W an initializer and C a Constant node."""
    nodes = [
        helper.make_node("RandomUniform", [], ["r"], shape=[2, 3]),
        helper.make_node("Add", ["X", "r"], ["s"]),
        helper.make_node("Mul", ["s", "W"], ["m"]),
        helper.make_node(
            "Constant", [], ["C"], value=helper.make_tensor("c", TensorProto.FLOAT, [3], [1, 2, 3])
        ),
        helper.make_node("Add", ["m", "C"], ["Y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "input_less",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor("W", TensorProto.FLOAT, [3], [1.0, 1.0, 1.0])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("dev", [CPU, META], ids=["cpu", "meta"])
def test_a_prepared_graph_keeps_everything_on_its_device(dev):
    before = get_default_device()
    rep = sonnx.prepare(_graph_with_input_less_nodes(), device=dev)
    assert {t.device for t in rep.tensor_map.values()} == {dev}  # initializers and constants
    (y,) = rep.run([np.zeros((2, 3), np.float32)])  # a NumPy input goes to the device
    assert y.device == dev
    assert get_default_device() == before  # running restored the default device


def test_graph_program_restores_the_default_device_after_a_failure():
    before = get_default_device()
    rep = sonnx.prepare(_graph_with_input_less_nodes(), device=META)
    with pytest.raises(BadInputError):
        rep.run([np.zeros((3, 3), np.float32)])
    assert get_default_device() == before


def test_sequence_length_of_an_empty_sequence_is_on_the_graph_device():
    nodes = [
        helper.make_node("SequenceEmpty", [], ["seq"]),
        helper.make_node("SequenceLength", ["seq"], ["n"]),
        helper.make_node("Add", ["n", "X"], ["Y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "seq",
        [helper.make_tensor_value_info("X", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("Y", TensorProto.INT64, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (y,) = sonnx.prepare(model, device=META).run([np.zeros(2, np.int64)])
    assert y.device == META
    (y,) = sonnx.prepare(model).run([np.ones(2, np.int64)])
    assert y.device == CPU and y.data.tolist() == [1, 1]


def test_an_imported_bert_runs_on_a_device_without_reading_values_back():
    """On torch's meta device any read of a device value fails, where on a GPU it would wait
    for the device. A BERT-style encoder's shape arithmetic (Shape, Gather, Concat, Range,
    Reshape) runs on the host and its index checks are deferred to one read at the end of
    the run (dropped on meta), so the whole run completes there."""
    import torch

    from sonnx.testing import torch_models as tm

    torch.manual_seed(0)
    module = tm.TinyBert(vocab=50, hidden=16, heads=2, layers=1, ffn=32, max_len=8)
    proto = tm.export(module, tm.bert_inputs(1, 8, 50), 17, ["input_ids", "attention_mask"])
    assert sum(n.op_type in ("Shape", "Range") for n in proto.graph.node) > 0
    rep = sonnx.prepare(proto, device=META)
    ids, mask = tm.bert_inputs(3, 8, 50)
    previous = autograd.training
    autograd.training = False
    try:
        (out,) = rep.run({"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    finally:
        autograd.training = previous
    cpu_out = sonnx.prepare(proto).run({"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    assert out.device == META and out.shape == cpu_out[0].shape


def test_a_bare_cuda_device_names_the_gpu_its_tensors_land_on():
    """torch puts a tensor sent to "cuda" on "cuda:N", and ``cuda != cuda:0``: a Device named
    "cuda" resolves the index, so it equals the device of its own tensors."""
    assert Device("cuda") == Device("cuda:0")
    assert Device("cuda").torch_device.index is not None
    assert Device("cpu").torch_device.index is None


def test_small_host_floats_join_device_tensors_and_float_constant_of_shape_goes_to_the_graph():
    """Seen on an H200: a Range limit computed on the host from a size (float) met a float
    constant on the GPU, and ConstantOfShape made an LSTM's zero state on the host from a host
    shape. Host floats of shape arithmetic are copied over; a float fill is data, made on the
    default device (the graph's while a graph runs)."""
    from sonnx.engine.host_values import place_inputs

    on_meta = torch.zeros(3, device="meta")
    placed = place_inputs("Range", [on_meta, torch.tensor(4.0), torch.tensor([1.0, 2.0])])
    assert {t.device.type for t in placed} == {"meta"}
    with pytest.raises(BadInputError, match="one device"):
        place_inputs("Add", [on_meta, torch.zeros(100)])  # data, not a host value
    before = get_default_device()
    set_default_device(META)
    try:
        shape = torch.tensor([2, 3])
        zeros = autograd.ConstantOfShape()(Tensor(data=shape, requires_grad=False))
        ones = autograd.ConstantOfShape(value=np.array([1], dtype=np.int64))(
            Tensor(data=shape, requires_grad=False)
        )
    finally:
        set_default_device(before)
    assert zeros.data.device.type == "meta" and zeros.shape == (2, 3)
    assert ones.data.device.type == "cpu"  # an integer fill from a host shape stays a host value
