"""sonnx: a deep-learning system in which ONNX is a first-class citizen.

Load any ONNX model (:func:`prepare`), run it, re-train it, cut it and extend it; build models
with the framework API (``device``, ``tensor``, ``autograd``, ``layer``, ``model``, ``opt``); and
export anything back to ONNX (:func:`to_onnx`, :func:`save`).
"""

from sonnx.gc_pause import collector_paused
from sonnx.host_memory import keep_freed_memory

keep_freed_memory()  # before the first tensor: see sonnx.host_memory (SONNX_KEEP_HOST_MEMORY=0)

with collector_paused():  # 0.2-0.3 s of collections otherwise: see sonnx.gc_pause
    from sonnx import autograd, device, layer, model, opt, tensor
    from sonnx.onnx.exporter import save, to_onnx
    from sonnx.onnx.importer import SingaRep, prepare
    from sonnx.onnx.sonnx_model import SONNXModel

__all__ = [
    "SONNXModel",
    "SingaRep",
    "autograd",
    "device",
    "layer",
    "model",
    "opt",
    "prepare",
    "save",
    "tensor",
    "to_onnx",
]
