"""Serving a sonnx checkpoint: ``<model>/<version>/model.sonnx`` plus the class that reads it.

A checkpoint is what :meth:`sonnx.model.Model.save_states` writes. Its ``config.json`` names
the model class as ``"model_class": "package.module:ClassName"`` (importable, constructed with
no arguments) and declares the inputs with their shapes (``-1`` for any size) and, where not
FP32, their datatypes. The server builds the model, compiles it on example inputs (size 1 for
the ``-1`` dims), loads the states and exports it to ONNX with those dims symbolic; from there it
is served like any ``model.onnx``, so a checkpoint and its export answer identically.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import onnx

from sonnx.model import Model
from sonnx.serve.config import ModelConfig
from sonnx.serve.datatypes import DATATYPES
from sonnx.serve.errors import ConfigError
from sonnx.tensor import Tensor

CHECKPOINT_FILE = "model.sonnx"


def checkpoint_to_onnx(path: Path, config: ModelConfig, where: str) -> onnx.ModelProto:
    """The ONNX form of the checkpoint at ``path`` (see the module docstring)."""
    model = _instantiate(config.model_class, where)
    if not config.inputs:
        raise ConfigError(
            f"{where}: a checkpoint needs 'inputs' with their shapes, e.g. "
            '{"inputs": {"x": {"shape": [-1, 1, 28, 28]}}}'
        )
    names = list(config.inputs)
    examples = [
        Tensor(
            data=np.zeros([1 if d == -1 else d for d in shape], DATATYPES[_datatype(config, n)]),
            requires_grad=False,
            name=n,
        )
        for n, shape in config.inputs.items()
    ]
    model.compile(examples, is_train=False)
    model.load_states(path)
    axes = {
        n: {axis: f"{n}_{axis}" for axis, d in enumerate(shape) if d == -1}
        for n, shape in config.inputs.items()
    }
    return model.to_onnx(None, examples, input_names=names, dynamic_axes=axes)


def _datatype(config: ModelConfig, name: str) -> str:
    return config.input_datatypes.get(name, "FP32")


def _instantiate(spec: str | None, where: str) -> Model:
    if not spec or spec.count(":") != 1:
        raise ConfigError(
            f"{where}: a checkpoint needs 'model_class' as \"package.module:ClassName\", "
            f"received {spec!r}"
        )
    module_name, class_name = spec.split(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"{where}: cannot import model_class {spec!r}: {e}") from None
    if not (isinstance(cls, type) and issubclass(cls, Model)):
        raise ConfigError(f"{where}: model_class {spec!r} is not a sonnx Model subclass")
    return cls()
