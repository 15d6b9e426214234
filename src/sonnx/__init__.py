"""sonnx: a deep-learning system in which ONNX is a first-class citizen.

Load any ONNX model (:func:`prepare`), run it, re-train it, cut it and extend it; build models
with the framework API (``device``, ``tensor``, ``autograd``, ``layer``, ``model``, ``opt``); and
export anything back to ONNX (:func:`to_onnx`, :func:`save`).

Importing sonnx changes nothing in the process; a server or a benchmark opts in to malloc and
garbage-collector settings with :func:`tune_process_for_serving`.
"""

from sonnx import autograd, device, layer, lora, model, opt, tensor
from sonnx.generation import generate
from sonnx.onnx.exporter import save, to_onnx
from sonnx.process_tuning import tune_process_for_serving
from sonnx.runtime.rep import SingaRep, prepare
from sonnx.sonnx_model import SONNXModel
from sonnx.version import package_version

__version__ = package_version()

__all__ = [
    "SONNXModel",
    "SingaRep",
    "__version__",
    "autograd",
    "device",
    "generate",
    "layer",
    "lora",
    "model",
    "opt",
    "prepare",
    "save",
    "tensor",
    "to_onnx",
    "tune_process_for_serving",
]
