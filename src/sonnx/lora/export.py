"""``export``: a trained rep's adapters written as a model directory onnxruntime-genai opens.

``merged=True`` writes the base graph with each adapter added into its float weight; a 4-bit
(MatMulNBits) base keeps its adapters as side nodes with constant weights instead. ``merged=False``
writes the base graph with adapter nodes whose A and B are graph inputs defaulting to zero (so
the file alone is the base model) and ``<adapter_name>.onnx_adapter``, written with
``onnxruntime.AdapterFormat``, holding the trained A and B (the scale folded into B): what
onnxruntime-genai's ``og.Adapters`` loads and ``Generator.set_active_adapter`` switches on, so
several fine-tunes share one base (the adapters' rank is a free dimension of those inputs, so
fine-tunes of different ranks share it too). Either way ``genai_config.json`` and the tokenizer
files are copied from ``model_dir`` unchanged: onnxruntime-genai needs no declaration of the
adapter inputs, which onnxruntime overrides as it does any initializer-backed input.

``quantize="int4"`` writes the float base's MatMul weights (merged with the adapters when
``merged=True``) as ``MatMulNBits``, as onnxruntime-genai's builder writes an int4 CPU model
(:func:`sonnx.quantization.quantize_weights` with block 32, symmetric, accuracy level 4: the
builder's ``MatMulNBitsQuantizer`` defaults, byte for byte); the adapters' own products stay
float, and the builder's int4 ``genai_config.json`` is the fp32 one, so it is copied too.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from sonnx.errors import BadInputError
from sonnx.generation.cache_layout import read_genai_config
from sonnx.lora.adapters import adapter_values, weight_delta
from sonnx.lora.graph import Adapter, adapters_of, attach, strip
from sonnx.quantization.weights import rewrite_matmuls
from sonnx.runtime.kept_model import save_with_values
from sonnx.runtime.rep import SingaRep

__all__ = ["export"]

#: Files of a model directory that are the model itself, not carried over.
_MODEL_SUFFIXES = (".onnx", ".onnx.data", ".onnx_data", ".onnx_adapter")
#: ``quantize=`` values: MatMulNBits options as onnxruntime-genai's builder sets them for an
#: int4 CPU model (bits, block size, symmetric, accuracy level).
_QUANTIZE = {"int4": (4, 32, True, 4)}


def _model_dir(rep: SingaRep, model_dir: str | Path | None) -> Path:
    """The model directory: ``model_dir`` when given, else that of the rep's file."""
    if model_dir is not None:
        return Path(model_dir)
    if rep.origin is None:
        raise BadInputError(
            "lora.export: the rep was not prepared from a file, so it does not know its model "
            "directory; pass model_dir= (the onnxruntime-genai directory it came from)"
        )
    return Path(rep.origin).parent


def _decoder_file(model_dir: Path) -> str:
    config = read_genai_config(model_dir)
    if config is None:
        raise BadInputError(
            f"lora.export: {model_dir} has no genai_config.json; model_dir must be the "
            "onnxruntime-genai model directory the rep was prepared from"
        )
    return config["model"]["decoder"]["filename"]


def _scaled_values(rep: SingaRep, adapters: list[Adapter]) -> dict[str, tuple]:
    """(A, B * scale) as NumPy arrays by module: what the exported graphs hold."""
    values = adapter_values(rep)
    out = {}
    for a in adapters:
        lora_a, lora_b = (v.cpu().numpy() for v in values[a.module])
        out[a.module] = (lora_a, (lora_b * a.scale).astype(lora_b.dtype))
    return out


def _weight_values(
    rep: SingaRep, base: onnx.ModelProto, merging: list[Adapter], values: dict
) -> Callable[[str], torch.Tensor | None]:
    """The value to write for each initializer of ``base`` by name: the rep's current weight,
    with the adapters in ``merging`` added to theirs (each sum made as it is written, so one
    merged weight at a time exists); None for any other initializer (the adapters' own, written
    as the graph holds them)."""
    nodes = {n.name: n for n in base.graph.node}
    by_weight: dict[str, list[Adapter]] = {}
    for a in merging:
        by_weight.setdefault(nodes[a.node].input[1], []).append(a)
    held = {i.name for i in base.graph.initializer if i.name in rep.constants}

    def value_of(name: str) -> torch.Tensor | None:
        if name not in held:
            return None
        weight = rep.constants[name].data
        if name not in by_weight:
            return weight
        merged = weight.detach().clone()
        for a in by_weight[name]:
            # host: the trained values (B already scaled: merge with scale 1)
            lora_a, lora_b = (torch.from_numpy(v).to(weight.device) for v in values[a.module])
            unit = dataclasses.replace(a, scale=1.0)
            merged += weight_delta(unit, lora_a, lora_b, nodes[a.node]).to(weight.dtype)
        return merged

    return value_of


def _quantized(
    model: onnx.ModelProto,
    adapters: list[Adapter],
    value_of: Callable[[str], torch.Tensor | None],
    quantize: str,
) -> onnx.ModelProto:
    """A copy of ``model`` whose base MatMuls read MatMulNBits weights made from
    ``value_of``'s values (one float weight at a time); the adapters' products stay float."""
    skip = {f"{a.prefix}/{part}/MatMul" for a in adapters for part in ("lora_A", "lora_B")}

    def array(tensor: onnx.TensorProto) -> np.ndarray:
        value = value_of(tensor.name)
        if value is None:
            return numpy_helper.to_array(tensor)
        value = value.detach().cpu()  # host: the weight is quantized in NumPy
        # NumPy has no bfloat16: such a weight goes as float32 (quantized in float32 anyway)
        return (value.float() if value.dtype == torch.bfloat16 else value).numpy()

    out = onnx.ModelProto()
    out.CopyFrom(model)
    if not rewrite_matmuls(out, array, *_QUANTIZE[quantize], skip):
        raise BadInputError(
            f"lora.export: quantize={quantize!r} found no MatMul with a float32/float16 "
            "weight in the base model (a 4-bit base is int4 already: export it without "
            "quantize)"
        )
    return out


def _write_adapter_file(path: Path, values: dict[str, tuple], adapters: list[Adapter]) -> None:
    import onnxruntime as ort

    params = {}
    for a in adapters:
        lora_a, lora_b = values[a.module]
        params[a.a_name] = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(lora_a))
        params[a.b_name] = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(lora_b))
    adapter = ort.AdapterFormat()
    adapter.set_adapter_version(1)
    adapter.set_model_version(1)
    adapter.set_parameters(params)
    adapter.export_adapter(str(path))


def export(
    rep: SingaRep,
    out_dir: str | Path,
    model_dir: str | Path | None = None,
    merged: bool = True,
    adapter_name: str = "adapter",
    quantize: str | None = None,
) -> Path:
    """Write the rep (with adapters) to ``out_dir`` as an onnxruntime-genai model directory,
    merged or as base + ``<adapter_name>.onnx_adapter``, in float or with int4 base weights;
    returns ``out_dir``.

    The directory the rep was prepared from (its ``genai_config.json`` names the decoder file
    written here; it and the tokenizer files are copied) is the one the rep remembers
    (:attr:`SingaRep.origin`); ``model_dir`` names it for a rep prepared from a ModelProto
    or bytes, or overrides it.

    :param rep: a prepared model with adapters.
    :param out_dir: the directory to write (created if missing; not the model's directory).
    :param model_dir: the onnxruntime-genai directory ``rep`` was prepared from (None: the
        directory of the file the rep was prepared from).
    :param merged: fold the adapters into the weights (4-bit weights keep them as side
        nodes); False writes the base graph and a separate adapter file.
    :param adapter_name: the adapter file's name, without ``.onnx_adapter``.
    :param quantize: None keeps the weights' type; ``"int4"`` writes the float base's MatMul
        weights (merged ones with ``merged=True``) as MatMulNBits, as onnxruntime-genai's
        builder writes an int4 CPU model.
    :returns: ``out_dir``.
    :raises BadInputError: the model has no adapters; no ``model_dir`` was given and the rep
        was not prepared from a file; the model directory has no ``genai_config.json``;
        ``out_dir`` is the model directory; ``quantize`` is not None or ``"int4"``, or finds no
        float MatMul weight to quantize (a 4-bit base).
    """
    adapters = adapters_of(rep.model)
    if not adapters:
        raise BadInputError("lora.export: the model has no adapters (call sonnx.lora.add first)")
    if quantize is not None and quantize not in _QUANTIZE:
        raise BadInputError(
            f"lora.export: quantize must be None or one of {sorted(_QUANTIZE)}, received "
            f"{quantize!r}"
        )
    source, out = _model_dir(rep, model_dir), Path(out_dir)
    filename = _decoder_file(source)
    if out.resolve() == source.resolve():
        raise BadInputError(f"lora.export: out_dir must differ from model_dir ({source})")
    out.mkdir(parents=True, exist_ok=True)
    base = strip(rep.model)  # headers: the weights are written from the rep's tensors
    values = _scaled_values(rep, adapters)
    merging: list[Adapter] = []
    if merged:
        # A 4-bit weight cannot take the sum: its adapters stay, as constant side nodes.
        side = [a for a in adapters if a.op_type == "MatMulNBits"]
        merging = [a for a in adapters if a.op_type != "MatMulNBits"]
        model = attach(base, side, values, "constants") if side else base
    else:
        zeros = {m: (np.zeros_like(a), np.zeros_like(b)) for m, (a, b) in values.items()}
        model = attach(base, adapters, zeros, "inputs")
    value_of = _weight_values(rep, base, merging, values)
    if quantize is not None:
        model = _quantized(model, adapters, value_of, quantize)
    if not merged:
        _write_adapter_file(out / f"{adapter_name}.onnx_adapter", values, adapters)
    for f in source.iterdir():
        if f.is_file() and not f.name.endswith(_MODEL_SUFFIXES):
            shutil.copy2(f, out / f.name)
    save_with_values(model, out / filename, value_of)
    return out
