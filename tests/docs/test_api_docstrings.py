"""The API reference documents every argument and return value of the public API.

The docs site renders docstrings with mkdocstrings (``docstring_style: sphinx``), so a public
callable whose docstring lacks a ``:param NAME:`` for one of its arguments, or a ``:returns:``
while it returns something, shows a user a reference with holes (and one without a docstring
is left off the page). This walks a curated list of what a user calls (the order of the API
reference), and every export of the modules in WALKED with the public methods and properties
of their classes (so a new public function there fails until it is documented), and fails on
each such hole. What a module exports but its page deliberately leaves out is listed in
OFF_PAGE; every other export must be on a page of docs/reference.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# Dotted paths of the public callables; a class stands for its constructor (its parameters
# are documented in the docstring of the class that defines ``__init__``, as Sphinx and
# mkdocstrings expect).
PUBLIC = [
    # sonnx.__all__ and the imported-model runtime
    "sonnx.prepare",
    "sonnx.save",
    "sonnx.to_onnx",
    "sonnx.tune_process_for_serving",
    "sonnx.SingaRep.run",
    "sonnx.SingaRep.explain",
    "sonnx.SingaRep.summary",
    "sonnx.SingaRep.generate",
    "sonnx.SONNXModel",
    "sonnx.SONNXModel.forward",
    "sonnx.SONNXModel.train_one_batch",
    "sonnx.SONNXModel.freeze",
    "sonnx.SONNXModel.unfreeze",
    "sonnx.autograd.backward",
    # models
    "sonnx.model.Model",
    "sonnx.model.Model.compile",
    "sonnx.model.Model.graph",
    "sonnx.model.Model.set_optimizer",
    "sonnx.model.Model.train_one_batch",
    "sonnx.model.Model.to_onnx",
    "sonnx.model.Model.save_states",
    "sonnx.model.Model.load_states",
    # layers
    "sonnx.layer.Layer.forward",
    "sonnx.layer.Layer.get_params",
    "sonnx.layer.Layer.get_states",
    "sonnx.layer.Layer.set_params",
    "sonnx.layer.Layer.set_states",
    "sonnx.layer.Layer.train",
    "sonnx.layer.Layer.eval",
    "sonnx.layer.Sequential",
    "sonnx.layer.Sequential.append",
    "sonnx.layer.Linear",
    "sonnx.layer.Embedding",
    "sonnx.layer.Flatten",
    "sonnx.layer.Conv1d",
    "sonnx.layer.Conv2d",
    "sonnx.layer.Conv3d",
    "sonnx.layer.MaxPool1d",
    "sonnx.layer.MaxPool2d",
    "sonnx.layer.MaxPool3d",
    "sonnx.layer.AvgPool1d",
    "sonnx.layer.AvgPool2d",
    "sonnx.layer.AvgPool3d",
    "sonnx.layer.BatchNorm1d",
    "sonnx.layer.BatchNorm2d",
    "sonnx.layer.LayerNorm",
    "sonnx.layer.Dropout",
    "sonnx.layer.SoftMax",
    "sonnx.layer.LogSoftMax",
    "sonnx.layer.GELU",
    "sonnx.layer.LeakyReLU",
    "sonnx.layer.ELU",
    "sonnx.layer.HardSigmoid",
    # optimizers and distribution
    "sonnx.opt.SGD",
    "sonnx.opt.Adam",
    "sonnx.opt.AdamW",
    "sonnx.opt.AdaGrad",
    "sonnx.opt.RMSProp",
    "sonnx.opt.Optimizer.add_param_group",
    "sonnx.opt.Optimizer.update",
    "sonnx.opt.Optimizer.step",
    "sonnx.opt.Optimizer.backward_and_update",
    "sonnx.opt.Optimizer.get_states",
    "sonnx.opt.Optimizer.set_states",
    "sonnx.opt.Constant",
    "sonnx.opt.ExponentialDecay",
    "sonnx.opt.StepDecay",
    "sonnx.opt.CosineDecay",
    "sonnx.opt.DistOpt",
    "sonnx.opt.DistOpt.update",
    "sonnx.opt.DistOpt.step",
    "sonnx.opt.DistOpt.get_states",
    "sonnx.opt.DistOpt.set_states",
    "sonnx.opt.DistOpt.backward_and_update",
    "sonnx.opt.DistOpt.backward_and_update_half",
    "sonnx.opt.DistOpt.backward_and_partial_update",
    "sonnx.opt.DistOpt.backward_and_sparse_update",
    "sonnx.dist.is_initialized",
    "sonnx.dist.init",
    "sonnx.dist.rank",
    "sonnx.dist.world_size",
    "sonnx.dist.local_rank",
    "sonnx.dist.is_main",
    "sonnx.dist.device",
    "sonnx.dist.barrier",
    "sonnx.dist.shard",
    "sonnx.dist.destroy",
    # devices and tensors
    "sonnx.device.create_cpu_device",
    "sonnx.device.create_cuda_gpu",
    "sonnx.device.create_cuda_gpu_on",
    "sonnx.device.get_default_device",
    "sonnx.device.set_default_device",
    "sonnx.device.set_seed",
    "sonnx.device.Device",
    "sonnx.device.Device.id",
    "sonnx.device.Device.is_cuda",
    "sonnx.device.Device.set_rand_seed",
    "sonnx.device.Device.synchronize",
    "sonnx.tensor.Tensor",
    "sonnx.tensor.Tensor.to_device",
    "sonnx.tensor.Tensor.to_host",
    "sonnx.tensor.Tensor.to_type",
    "sonnx.tensor.Tensor.as_type",
    "sonnx.tensor.Tensor.copy_from_numpy",
    "sonnx.tensor.Tensor.copy_data",
    "sonnx.tensor.Tensor.set_value",
    "sonnx.tensor.Tensor.gaussian",
    "sonnx.tensor.Tensor.uniform",
    "sonnx.tensor.Tensor.bernoulli",
    "sonnx.tensor.Tensor.clone",
    "sonnx.tensor.Tensor.item",
    "sonnx.tensor.Tensor.numpy",
    "sonnx.tensor.Tensor.reshape",
    "sonnx.tensor.Tensor.transpose",
    "sonnx.tensor.from_numpy",
    "sonnx.tensor.from_torch",
    "sonnx.tensor.to_numpy",
    "sonnx.tensor.to_host",
    "sonnx.tensor.zeros",
    "sonnx.tensor.ones",
    "sonnx.tensor.random",
    # LoRA
    "sonnx.lora.add",
    "sonnx.lora.merge",
    "sonnx.lora.save",
    "sonnx.lora.load",
    "sonnx.lora.export",
    "sonnx.lora.CausalLM",
    "sonnx.lora.CausalLM.feeds",
    "sonnx.lora.CausalLM.forward",
    "sonnx.lora.CausalLM.train_one_batch",
    # serving configuration
    "sonnx.serve.config.ModelConfig",
    "sonnx.serve.config.load_config",
    "sonnx.serve.config.parse_config",
]

# Modules checked whole, the modules docs/reference renders: every function and class they
# export (``__all__``, else the public ones they define, as mkdocstrings renders them), and
# with True the public methods and properties those classes define (the operator classes'
# ``forward``/``export`` are the contract of :class:`~sonnx.autograd.Operator`, documented
# there once; ``sonnx``'s names are walked with their own modules).
WALKED = {
    "sonnx": False,
    "sonnx.autograd": False,
    "sonnx.device": True,
    "sonnx.dist": True,
    "sonnx.dtypes": True,
    "sonnx.errors": True,
    "sonnx.generation": True,
    "sonnx.layer": True,
    "sonnx.lora": True,
    "sonnx.model": True,
    "sonnx.onnx.exporter": True,
    "sonnx.opt": True,
    "sonnx.runtime.input_specs": True,
    "sonnx.runtime.rep": True,
    "sonnx.serve.config": True,
    "sonnx.sonnx_model": True,
    "sonnx.tensor": True,
}

# Modules that re-export other modules' names with ``from family import *``, as SINGA's
# ``autograd`` does: every public sonnx function or class bound in them is theirs. Elsewhere
# a name a module imports is not its own (mkdocstrings renders it only if ``__all__`` lists it).
REEXPORTING = {"sonnx.autograd"}

# Exports the reference leaves out on purpose (its ``members:`` lists skip them), so they need
# no reference docs: sonnx's own plumbing, exported for its other modules, that a user never
# calls. Anything else a walked module exports must be rendered (test_walked_exports_are_rendered).
OFF_PAGE = {
    # the device a run resolves ``device=None`` to, and a run's thread-local default
    "sonnx.device.as_device",
    "sonnx.device.default_device_for_run",
    # the CUDA check behind create_cuda_gpu_on, shared with the generate CLI's own wording
    "sonnx.device.require_cuda",
    # DistOpt's wrapper of a torch.distributed call (a dead peer becomes a DistributedError)
    "sonnx.dist.run_collective",
    # how prepare reads a graph input's declared type into an InputSpec
    "sonnx.runtime.input_specs.declared_dims",
    "sonnx.runtime.input_specs.input_spec",
    # how SingaRep.run words a fed value's type problem, and tells a list of maps
    "sonnx.runtime.input_specs.cast_hint",
    "sonnx.runtime.input_specs.is_map_list",
    # the update step SONNXModel.train_one_batch shares with CausalLM and the walkthrough
    "sonnx.sonnx_model.apply_update",
    # the tensors an operator or a graph-mode trace makes, and their fast constructors
    "sonnx.tensor.RecordedTensor",
    "sonnx.tensor.SymbolicTensor",
    "sonnx.tensor.computed_tensor",
    "sonnx.tensor.string_tensor",
    "sonnx.tensor.symbolic_tensor",
}

ROOT = Path(__file__).resolve().parents[2]

# Parameters a caller never passes by name.
UNNAMED = {"self", "cls"}
PARAM = re.compile(r"^\s*:param\s+(?:[^:]*\s)?(\w+):", re.MULTILINE)
RETURNS = re.compile(r"^\s*:returns?:", re.MULTILINE)
# A mkdocstrings block of a reference page and its options.
BLOCK = re.compile(r"^::: (\S+)\n((?:    .*\n)*)", re.MULTILINE)
MEMBERS = re.compile(r"^\s+members: (false|\[.*\])$", re.MULTILINE)
PROPERTIES = (property, functools.cached_property)


def resolve(path: str) -> Any:
    """The object a dotted path names, as a user reaches it: attributes first (``sonnx.lora``'s
    ``export`` is the function, not the module of that name), submodules where needed."""
    first, *rest = path.split(".")
    obj = importlib.import_module(first)
    for name in rest:
        obj = (
            getattr(obj, name)
            if hasattr(obj, name)
            else importlib.import_module(f"{obj.__name__}.{name}")
        )
    return obj


def documented_callable(obj: Any) -> tuple[str, Callable[..., Any], bool]:
    """The docstring that documents ``obj``'s arguments, the callable whose signature it
    documents, and whether a return value must be documented (not for a constructor)."""
    if inspect.isclass(obj):
        # The class that defines the constructor documents it (a shared private base for
        # Conv1d/2d/3d, for one; the API reference renders those bases too).
        owner = next(c for c in obj.__mro__ if "__init__" in c.__dict__)
        docs = [obj.__doc__, owner.__doc__, owner.__init__.__doc__]
        return "\n".join(d for d in docs if d), owner.__init__, False
    return obj.__doc__ or "", obj, True


def holes(obj: Any) -> list[str]:
    """What the docstring of ``obj`` leaves undocumented (of a property: only a docstring)."""
    if not (obj.__doc__ or "").strip():  # its own, not only its base's
        return ["no docstring"]
    if isinstance(obj, PROPERTIES):
        return []
    doc, fn, may_return = documented_callable(obj)
    sig = inspect.signature(fn)
    named = set(PARAM.findall(doc))
    missing = [
        f":param {p.name}:"
        for p in sig.parameters.values()
        if p.name not in UNNAMED
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and p.name not in named
    ]
    if may_return and sig.return_annotation not in (None, "None") and not RETURNS.search(doc):
        missing.append(":returns:")
    return missing


def is_own(module: types.ModuleType, obj: Any) -> bool:
    """Whether ``module`` exports ``obj`` without an ``__all__``: a sonnx function or class
    it defines (or, in a REEXPORTING module, any)."""
    defined_in = getattr(obj, "__module__", None) or ""
    if module.__name__ in REEXPORTING:
        return defined_in.startswith("sonnx.")
    return defined_in == module.__name__


def exported(module: types.ModuleType, methods: bool) -> list[str]:
    """The dotted paths of what ``module`` exports: its functions and classes, and with
    ``methods`` the public methods and properties each class defines itself."""
    listed = getattr(module, "__all__", None)
    names = listed or [n for n in dir(module) if not n.startswith("_")]
    paths = []
    for name in names:
        obj = getattr(module, name)
        defined_in_sonnx = (getattr(obj, "__module__", None) or "").startswith("sonnx.")
        if not (inspect.isfunction(obj) or inspect.isclass(obj)) or not defined_in_sonnx:
            continue
        if listed is None and not is_own(module, obj):
            continue
        paths.append(f"{module.__name__}.{name}")
        if methods and inspect.isclass(obj):
            paths += [
                f"{module.__name__}.{name}.{m}"
                for m, member in vars(obj).items()
                if not m.startswith("_")
                and (
                    inspect.isfunction(member)
                    or isinstance(member, (*PROPERTIES, classmethod, staticmethod))
                )
            ]
    return paths


def block_object(path: str) -> Any:
    """The object a ``::: path`` block renders, found as griffe does: the longest importable
    module first (``sonnx.lora.export.export`` is the function in the submodule)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ModuleNotFoundError(path)


def rendered_objects() -> set[int]:
    """The ids of the functions and classes the reference pages render: a block's object, and
    for a module its exports, only those of its ``members:`` list when there is one."""
    shown: set[int] = set()
    for page in sorted((ROOT / "docs" / "reference").glob("*.md")):
        for path, options in BLOCK.findall(page.read_text()):
            obj = block_object(path)
            shown.add(id(obj))
            if not inspect.ismodule(obj):
                continue
            found = MEMBERS.search(options)
            members = None if found is None else found.group(1)
            if members == "false":
                continue
            listed = None if members is None else set(members.strip("[]").split(", "))
            for export in exported(obj, methods=False):
                name = export.rsplit(".", 1)[1]
                if listed is None or name in listed:
                    shown.add(id(getattr(obj, name)))
    return shown


@pytest.mark.parametrize("path", PUBLIC)
def test_public_callable_documents_its_arguments_and_result(path: str) -> None:
    missing = holes(resolve(path))
    assert missing == [], f"{path}'s docstring lacks {missing}"


def off_page(path: str) -> bool:
    """Whether ``path`` is, or belongs to, an export kept off the reference on purpose."""
    return any(path == kept or path.startswith(kept + ".") for kept in OFF_PAGE)


@pytest.mark.parametrize("module", WALKED)
def test_every_export_documents_its_arguments_and_result(module: str) -> None:
    paths = exported(importlib.import_module(module), WALKED[module])
    missing = {
        path: found for path in paths if not off_page(path) and (found := holes(resolve(path)))
    }
    assert missing == {}, f"{len(missing)} of {len(paths)} exports of {module} lack docs: {missing}"


def test_walked_exports_are_rendered() -> None:
    """Each export of a walked module is on a page of docs/reference (its module's block, a
    block of its own, or the block of the module that defines it: sonnx.autograd's operations
    by family), so a new function or operator family shows up in the API reference; OFF_PAGE
    lists exactly those left out."""
    shown = rendered_objects()
    paths = [p for module in WALKED for p in exported(importlib.import_module(module), False)]
    unrendered = {p for p in paths if id(resolve(p)) not in shown}
    assert unrendered == OFF_PAGE, (
        f"not rendered and not in OFF_PAGE: {sorted(unrendered - OFF_PAGE)}; "
        f"in OFF_PAGE but rendered or not exported: {sorted(OFF_PAGE - unrendered)}"
    )


def test_holes_are_found() -> None:
    """The checker itself: an undocumented argument and result are reported."""

    def half(x: int, y: int) -> int:
        """Half of it.

        :param x: the number.
        """
        return x // y

    assert holes(half) == [":param y:", ":returns:"]

    class Undocumented:
        def __init__(self, size: int) -> None:
            """:param size: the size."""

    assert holes(Undocumented) == ["no docstring"]

    class Sized:
        """Has a size."""

        @property
        def size(self) -> int:
            return 1

    assert holes(vars(Sized)["size"]) == ["no docstring"]


def test_exports_are_walked() -> None:
    """The walker itself: a module's new function, its classes' own public methods and
    properties, and not what it merely imports (unless its ``__all__`` lists it)."""
    module = types.ModuleType("sonnx.fake")

    class Shown:
        def method(self) -> None:
            """Documented."""

        @property
        def value(self) -> int:
            """Documented."""
            return 1

        def _hidden(self) -> None:
            pass

    def added(x: int) -> int:
        return x

    def borrowed(x: int) -> int:
        return x

    for obj in (Shown, added):
        obj.__module__ = "sonnx.fake"
    borrowed.__module__ = "sonnx.elsewhere"
    module.Shown, module.added, module.imported = Shown, added, Callable
    module.borrowed = borrowed
    assert exported(module, methods=True) == [
        "sonnx.fake.Shown",
        "sonnx.fake.Shown.method",
        "sonnx.fake.Shown.value",
        "sonnx.fake.added",
    ]
    assert exported(module, methods=False) == ["sonnx.fake.Shown", "sonnx.fake.added"]
    module.__all__ = ["added", "borrowed"]
    assert exported(module, methods=False) == ["sonnx.fake.added", "sonnx.fake.borrowed"]
