"""An ``onnx.backend.base.Backend`` over sonnx, so ``onnx.backend.test.BackendTest`` can drive it.

Outputs are returned as NumPy arrays, as the ONNX backend API expects.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from sonnx import device as sonnx_device
from sonnx.runtime.rep import SingaRep, prepare
from sonnx.tensor import to_numpy


def _sonnx_device(name: str) -> sonnx_device.Device:
    parsed = Device(name)
    if parsed.type == DeviceType.CUDA:
        return sonnx_device.create_cuda_gpu_on(int(parsed.device_id or 0))
    return sonnx_device.create_cpu_device()


class SonnxBackendRep(BackendRep):
    """A prepared model whose ``run`` takes and returns NumPy arrays."""

    def __init__(self, rep: SingaRep) -> None:
        self.rep = rep

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        outputs = self.rep.run(inputs, **kwargs)
        return tuple(to_numpy(t) for t in outputs)


class SonnxBackend(Backend):
    """sonnx as an ONNX backend."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        try:
            cls.prepare(model, device, **kwargs)
        except Exception:  # any failure to prepare means "not compatible" in this API
            return False
        return True

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> SonnxBackendRep:
        return SonnxBackendRep(prepare(model, device=_sonnx_device(device), **kwargs))

    @classmethod
    def run_model(
        cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device).run(inputs, **kwargs)

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Any = None,
        **kwargs: Any,
    ) -> tuple[np.ndarray, ...]:
        """Run one node by wrapping it in a one-node model at the newest opset."""
        arrays = [np.asarray(x) for x in inputs]
        graph = onnx.helper.make_graph(
            [node],
            "run_node",
            [
                onnx.helper.make_tensor_value_info(
                    n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape
                )
                for n, a in zip(node.input, arrays, strict=False)
                if n
            ],
            [onnx.helper.make_empty_tensor_value_info(n) for n in node.output if n],
        )
        model = onnx.helper.make_model(graph)
        return cls.run_model(model, arrays, device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        parsed = Device(device)
        if parsed.type == DeviceType.CPU:
            return True
        import torch

        return parsed.type == DeviceType.CUDA and torch.cuda.is_available()


backend = SonnxBackend
