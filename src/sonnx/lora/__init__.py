"""LoRA and QLoRA fine-tuning of imported models, and their export for onnxruntime-genai.

``add`` attaches trainable low-rank adapters beside the MatMul / Gemm / MatMulNBits /
FusedMatMul nodes chosen by name pattern or op type (the base frozen; a 4-bit base stays
4-bit), ``save``/``load`` write and read them as PEFT does, ``merge`` folds them into float
weights, and ``export`` writes a model directory onnxruntime-genai opens: merged, or the base
graph plus an ``.onnx_adapter`` file for its multi-LoRA API.
"""

from sonnx.lora.adapters import add, merge
from sonnx.lora.causal_lm import CausalLM
from sonnx.lora.export import export
from sonnx.lora.peft_files import load, save
from sonnx.lora.targets import LoraTargetError

__all__ = ["CausalLM", "LoraTargetError", "add", "export", "load", "merge", "save"]
