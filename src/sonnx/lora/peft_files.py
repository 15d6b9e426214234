"""``save`` and ``load``: adapters as PEFT writes them (``adapter_model.safetensors`` and
``adapter_config.json``), so PEFT loads what sonnx trained and sonnx loads what PEFT trained.

PEFT names a tensor ``base_model.model.<module>.lora_A.weight`` with A as [r, in] and B as
[out, r], unscaled; the graph holds A as [in, r] and B as [r, out] (see
:mod:`sonnx.lora.graph`). A graph whose builder fused projections (``qkv_proj``,
``gate_up_proj``) loads PEFT's separate ones stacked: A side by side, B block-diagonal, which
computes exactly the separate adapters' sum.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch

from sonnx.errors import BadInputError
from sonnx.lora.adapters import adapter_values, rebuild, weight_float_type
from sonnx.lora.graph import Adapter, adapters_of, attach
from sonnx.lora.targets import LoraTargetError, Target, candidates, peft_module
from sonnx.runtime.rep import SingaRep

__all__ = ["load", "save"]

WEIGHTS_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"
#: A fused projection's parts, in the order the builder concatenates their outputs.
FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def save(rep: SingaRep, out_dir: str | Path) -> Path:
    """Write the rep's adapters to ``out_dir`` in PEFT's layout; returns the directory.

    The directory holds ``adapter_model.safetensors`` and ``adapter_config.json`` (needs the
    ``llm`` extra's safetensors).

    :param rep: a prepared model with adapters.
    :param out_dir: the directory to write (created if missing).
    :returns: ``out_dir``.
    :raises BadInputError: the model has no adapters.
    """
    adapters = adapters_of(rep.model)
    if not adapters:
        raise BadInputError("lora.save: the model has no adapters (call sonnx.lora.add first)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    from safetensors.numpy import save_file  # the llm extra

    tensors = {}
    values = adapter_values(rep)
    for a in adapters:
        lora_a, lora_b = (v.cpu().numpy() for v in values[a.module])
        for key, columns in _parts(rep.model, a):
            tensors[f"{key}.lora_A.weight"] = np.ascontiguousarray(lora_a.T)
            tensors[f"{key}.lora_B.weight"] = np.ascontiguousarray(lora_b[:, columns].T)
    save_file(tensors, str(out / WEIGHTS_FILE))
    (out / CONFIG_FILE).write_text(json.dumps(_config(adapters), indent=2))
    return out


def _fused_sizes(model: onnx.ModelProto, a: Adapter) -> list[int] | None:
    """The output sizes of a fused projection's parts: q, k, v from the attention node that
    reads it (its num_heads and kv_num_heads), gate and up as halves."""
    last = _last(a.module)
    if last == "gate_up_proj":
        return [a.out_features // 2] * 2
    if last != "qkv_proj":
        return None
    for node in model.graph.node:
        if a.y in node.input and node.op_type == "GroupQueryAttention":
            attrs = {at.name: at.i for at in node.attribute}
            heads, kv_heads = attrs.get("num_heads", 0), attrs.get("kv_num_heads", 0)
            if heads and kv_heads and a.out_features % (heads + 2 * kv_heads) == 0:
                head = a.out_features // (heads + 2 * kv_heads)
                return [heads * head, kv_heads * head, kv_heads * head]
    return None


def _parts(model: onnx.ModelProto, a: Adapter) -> list[tuple[str, slice]]:
    """PEFT module names and B's output columns for adapter ``a``: a fused projection is
    written as its parts, each with the shared A (exact: the parts' sum is the fused adapter)."""
    key = peft_module(a.module)
    sizes = _fused_sizes(model, a)
    if sizes is None:
        return [(key, slice(None))]
    stem, _, last = key.rpartition(".")
    bounds = np.cumsum([0, *sizes])
    return [
        (f"{stem}.{part}", slice(int(lo), int(hi)))
        for part, lo, hi in zip(FUSED[last], bounds[:-1], bounds[1:], strict=True)
    ]


def _last(module: str) -> str:
    return module.rsplit(".", 1)[-1]


def _config(adapters: list[Adapter]) -> dict[str, Any]:
    """PEFT's LoraConfig fields: the first adapter's rank and alpha, the others as patterns."""
    first = adapters[0]
    pattern = {
        peft_module(a.module).removeprefix("base_model.model."): a
        for a in adapters
        if (a.rank, a.scale) != (first.rank, first.scale)
    }
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": first.rank,
        "lora_alpha": first.scale * first.rank,
        "lora_dropout": first.dropout,
        "target_modules": sorted(
            {p for a in adapters for p in FUSED.get(_last(a.module), [_last(a.module)])}
        ),
        "rank_pattern": {m: a.rank for m, a in pattern.items()},
        "alpha_pattern": {m: a.scale * a.rank for m, a in pattern.items()},
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
    }


def _read(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    from safetensors.numpy import load_file  # the llm extra

    weights = path / WEIGHTS_FILE if path.is_dir() else path
    if not weights.is_file():
        raise BadInputError(f"lora.load: no adapter weights at {weights}")
    config_file = weights.parent / CONFIG_FILE
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    return load_file(str(weights)), config


def _pairs(tensors: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(A [r, in], B [out, r]) by PEFT module name (an adapter name such as ``default``
    before ``.weight`` is allowed)."""
    found: dict[str, dict[str, np.ndarray]] = {}
    for key, value in tensors.items():
        parts = key.split(".")
        which = next((p for p in parts if p in ("lora_A", "lora_B")), None)
        if which is None:
            raise BadInputError(f"lora.load: tensor {key!r} is not a lora_A/lora_B weight")
        found.setdefault(".".join(parts[: parts.index(which)]), {})[which] = value
    broken = [m for m, ab in found.items() if len(ab) != 2]
    if broken:
        raise BadInputError(f"lora.load: module(s) {broken} lack lora_A or lora_B")
    return {m: (ab["lora_A"], ab["lora_B"]) for m, ab in found.items()}


def _scale(config: dict[str, Any], module: str, rank: int) -> float:
    """PEFT's scaling for ``module``: alpha / r (alpha / sqrt(r) with rsLoRA)."""
    short = module.removeprefix("base_model.model.")
    r = next((v for k, v in config.get("rank_pattern", {}).items() if short.endswith(k)), None)
    r = r or config.get("r", rank)
    alphas = config.get("alpha_pattern", {})
    alpha = next((v for k, v in alphas.items() if short.endswith(k)), config.get("lora_alpha", r))
    return alpha / (math.sqrt(r) if config.get("use_rslora") else r)


def _for_module(
    key: str, pairs: dict[str, tuple[np.ndarray, np.ndarray]], config: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray, float, list[str]] | None:
    """(A [in, r], B [r, out], scale, PEFT modules used) for graph module ``key``, stacking
    the parts of a fused projection; None when the file has nothing for it."""
    if key in pairs:
        a, b = pairs[key]
        return a.T, b.T, _scale(config, key, a.shape[0]), [key]
    stem, _, last = key.rpartition(".")
    parts = [f"{stem}.{p}" for p in FUSED.get(last, ())]
    if not parts or not all(p in pairs for p in parts):
        return None
    scales = [_scale(config, p, pairs[p][0].shape[0]) for p in parts]
    # One scale for the stack: each part's B carries its own scale relative to the first.
    lora_a = np.concatenate([pairs[p][0] for p in parts], axis=0).T
    rows = sum(pairs[p][0].shape[0] for p in parts)
    cols = sum(pairs[p][1].shape[0] for p in parts)
    lora_b = np.zeros((rows, cols), lora_a.dtype)
    r0 = c0 = 0
    for p, s in zip(parts, scales, strict=True):
        a, b = pairs[p]
        lora_b[r0 : r0 + a.shape[0], c0 : c0 + b.shape[0]] = b.T * (s / scales[0])
        r0, c0 = r0 + a.shape[0], c0 + b.shape[0]
    return lora_a, lora_b, scales[0], parts


def load(rep: SingaRep, path: str | Path) -> list[str]:
    """Load adapters saved by :func:`save` or by PEFT into ``rep``; returns the graph's
    adapted modules. A rep without adapters gets them attached (rank and alpha from the
    file); a rep with adapters takes the values for those of the same names and ranks.

    :param rep: the prepared model to load into (in place).
    :param path: a directory written by :func:`save` or PEFT, or its safetensors file.
    :returns: the adapted modules' names.
    :raises BadInputError: no adapter weights at ``path``, a tensor that is not a
        lora_A/lora_B weight, a module lacking one of them, or weights whose shapes do not
        fit their node.
    :raises LoraTargetError: the file has adapters for modules the graph lacks.
    """
    tensors, config = _read(Path(path))
    pairs = _pairs(tensors)
    existing = {peft_module(a.module): a for a in adapters_of(rep.model)}
    graph_modules = existing or {peft_module(t.module): t for t in candidates(rep.model.graph)}
    loaded: dict[str, tuple[np.ndarray, np.ndarray, float]] = {}
    used: set[str] = set()
    for key in graph_modules:
        found = _for_module(key, pairs, config)
        if found is not None:
            loaded[key] = found[:3]
            used.update(found[3])
    unused = sorted(set(pairs) - used)
    if unused:
        what = "adapter" if existing else "node that can take an adapter"
        raise LoraTargetError(
            f"lora.load: the graph has no {what} for "
            f"{unused[:4]}{' ...' if len(unused) > 4 else ''}; its modules are e.g. "
            f"{list(graph_modules)[:4]}"
        )
    if existing:
        _set_values(rep, {existing[k]: v for k, v in loaded.items()})
    else:
        _attach(rep, {graph_modules[k]: v for k, v in loaded.items()}, config)
    return [graph_modules[k].module for k in loaded]


def _check_shape(
    a: Target | Adapter, lora_a: np.ndarray, lora_b: np.ndarray, rank: int | None
) -> None:
    want_a = (a.in_features, rank or lora_a.shape[1])
    want_b = (rank or lora_b.shape[0], a.out_features)
    if lora_a.shape != want_a or lora_b.shape != want_b:
        raise BadInputError(
            f"lora.load: module {a.module!r} expects A {want_a} and B {want_b} (in, r / r, "
            f"out), received {lora_a.shape} and {lora_b.shape}"
        )


def _set_values(rep: SingaRep, values: dict[Adapter, tuple]) -> None:
    with torch.no_grad():
        for a, (lora_a, lora_b, scale) in values.items():
            _check_shape(a, lora_a, lora_b, a.rank)
            # The graph's B is unscaled beside its own scale node.
            for name, v in ((a.a_name, lora_a), (a.b_name, lora_b * (scale / a.scale))):
                t = rep.constants[name].data
                # host: the file's values, moved onto the weight's device by copy_
                t.copy_(torch.from_numpy(np.ascontiguousarray(v)).to(t.dtype))


def _attach(rep: SingaRep, values: dict[Target, tuple], config: dict[str, Any]) -> None:
    adapters, arrays = [], {}
    for t, (lora_a, lora_b, scale) in values.items():
        _check_shape(t, lora_a, lora_b, None)
        a = Adapter.of(t, lora_a.shape[1], scale, config.get("lora_dropout", 0.0))
        dtype = weight_float_type(rep.model.graph, a)
        adapters.append(a)
        arrays[t.module] = (lora_a.astype(dtype, order="C"), lora_b.astype(dtype, order="C"))
    model = attach(rep.model, adapters, arrays, "train")
    rebuild(rep, model, {n for a in adapters for n in (a.a_name, a.b_name)})
