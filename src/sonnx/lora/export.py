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
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import torch

from sonnx.errors import BadInputError
from sonnx.generation.cache_layout import read_genai_config
from sonnx.lora.adapters import adapter_values, weight_delta
from sonnx.lora.graph import Adapter, adapters_of, attach, strip
from sonnx.runtime.kept_model import save_with_values
from sonnx.runtime.rep import SingaRep

__all__ = ["export"]

#: Files of a model directory that are the model itself, not carried over.
_MODEL_SUFFIXES = (".onnx", ".onnx.data", ".onnx_data", ".onnx_adapter")


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
    model_dir: str | Path,
    merged: bool = True,
    adapter_name: str = "adapter",
) -> Path:
    """Write the rep (with adapters) to ``out_dir`` as an onnxruntime-genai model directory,
    merged or as base + ``<adapter_name>.onnx_adapter``; returns ``out_dir``.

    ``model_dir`` is the directory the rep was prepared from: its ``genai_config.json``
    names the decoder file written here, and it and the tokenizer files are copied.

    :param rep: a prepared model with adapters.
    :param out_dir: the directory to write (created if missing; not ``model_dir``).
    :param model_dir: the onnxruntime-genai directory ``rep`` was prepared from.
    :param merged: fold the adapters into the weights (4-bit weights keep them as side
        nodes); False writes the base graph and a separate adapter file.
    :param adapter_name: the adapter file's name, without ``.onnx_adapter``.
    :returns: ``out_dir``.
    :raises BadInputError: the model has no adapters, ``model_dir`` has no
        ``genai_config.json``, or ``out_dir`` is ``model_dir``.
    """
    adapters = adapters_of(rep.model)
    if not adapters:
        raise BadInputError("lora.export: the model has no adapters (call sonnx.lora.add first)")
    source, out = Path(model_dir), Path(out_dir)
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
        _write_adapter_file(out / f"{adapter_name}.onnx_adapter", values, adapters)
    for f in source.iterdir():
        if f.is_file() and not f.name.endswith(_MODEL_SUFFIXES):
            shutil.copy2(f, out / f.name)
    save_with_values(model, out / filename, _weight_values(rep, base, merging, values))
    return out
