"""Which inputs and outputs of a decoder graph carry what: the KV-cache layout.

Two conventions are read:

- onnxruntime-genai's ``genai_config.json`` (``model.decoder.inputs``/``outputs`` name the
  tensors, ``past_key_names`` is a printf pattern such as ``past_key_values.%d.key``), with
  ``past_present_share_buffer`` saying whether the past is a buffer of the full length that
  the present is written into;
- optimum's names, found on the graph itself: ``input_ids``, ``attention_mask``,
  ``position_ids`` (when present), ``past_key_values.N.key``/``.value`` in and
  ``present.N.key``/``.value`` out, ``logits`` (or the first output).

Either way the past inputs are (batch, kv heads, past length, head size); the heads, the head
size and the element type come from the declared input shapes, or from the config. A graph
whose attention is com.microsoft GroupQueryAttention keeps each sequence's cache rows from
row 0 on and reads a sequence's length from its attention mask's sum, so it takes padding on
the right (``right_padded``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sonnx.errors import BadModelError
from sonnx.generation.limits import DecoderLimits, decoder_limits

if TYPE_CHECKING:
    from sonnx.runtime.rep import SingaRep

_OPTIMUM_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")


@dataclass(frozen=True)
class CacheLayout:
    """The names and cache geometry a decode loop needs to feed a decoder graph.

    :param input_ids: the input that takes the token ids.
    :param logits: the output that gives the next-token logits.
    :param past_keys: the past-key input of each layer, in layer order.
    :param past_values: the past-value input of each layer.
    :param present_keys: the present-key output of each layer.
    :param present_values: the present-value output of each layer.
    :param kv_heads: the key/value heads of the cache.
    :param head_size: the size of each head.
    :param cache_dtype: the cache's element type.
    :param attention_mask: the attention-mask input, or None where the graph takes none.
    :param position_ids: the position-ids input, or None where the graph takes none.
    :param use_cache_branch: optimum's merged decoders' boolean input choosing the with-past
        branch, or None.
    :param share_buffer: the past is a buffer of the full length the present is written into.
    :param right_padded: padding goes after a sequence's tokens (GroupQueryAttention graphs).
    :param limits: the context length and vocabulary size, where known.
    """

    input_ids: str
    logits: str
    past_keys: tuple[str, ...]
    past_values: tuple[str, ...]
    present_keys: tuple[str, ...]
    present_values: tuple[str, ...]
    kv_heads: int
    head_size: int
    cache_dtype: torch.dtype
    attention_mask: str | None = None
    position_ids: str | None = None
    #: optimum's merged decoders choose the with-past branch by this boolean input.
    use_cache_branch: str | None = None
    #: The past is a buffer of ``max_length`` rows that the present reuses (genai's
    #: ``past_present_share_buffer``, for GroupQueryAttention graphs).
    share_buffer: bool = False
    #: Padding goes after a sequence's tokens (GroupQueryAttention), not before them.
    right_padded: bool = False
    #: The context length and vocabulary, checked before a run (:mod:`.limits`).
    limits: DecoderLimits = field(default_factory=DecoderLimits)

    @property
    def layers(self) -> int:
        """The number of decoder layers (one past key per layer)."""
        return len(self.past_keys)


def detect_layout(rep: SingaRep, config: dict[str, Any] | None = None) -> CacheLayout:
    """The cache layout of a prepared decoder ``rep``, from a ``genai_config.json`` dict when
    given, else from optimum's tensor names.

    :param rep: the prepared decoder graph.
    :param config: the parsed ``genai_config.json``, or None to read optimum's names.
    :returns: the layout.
    :raises BadModelError: the graph's inputs and outputs do not follow the layout (names
        missing, or a past input without a fixed head count and size).
    """
    specs = {s.name: s for s in rep.input_specs}
    if config is not None:
        layout = _from_genai_config(config, specs, rep.outputs)
    else:
        layout = _from_optimum_names(specs, rep.outputs)
    gqa = any(n.op_type == "GroupQueryAttention" for n in rep.model.graph.node)
    limits = decoder_limits(rep, layout.input_ids, layout.logits, config)
    return dataclasses.replace(layout, right_padded=gqa, limits=limits)


def read_genai_config(model_dir: Path) -> dict[str, Any] | None:
    """``model_dir/genai_config.json`` parsed, or None where there is none."""
    path = Path(model_dir) / "genai_config.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise BadModelError(f"{path}: not valid JSON ({e})") from e


def _from_optimum_names(specs: dict[str, Any], outputs: list[str]) -> CacheLayout:
    pasts: dict[tuple[int, str], str] = {}
    for name in specs:
        m = _OPTIMUM_PAST.match(name)
        if m:
            pasts[(int(m.group(1)), m.group(2))] = name
    layers = len(pasts) // 2
    if (
        "input_ids" not in specs
        or not pasts
        or set(pasts) != {(i, kind) for i in range(layers) for kind in ("key", "value")}
    ):
        raise BadModelError(
            "generate: not a decoder with a KV cache in optimum's layout (inputs input_ids and "
            "past_key_values.N.key/.value for N = 0, 1, ...) and no genai_config.json; the "
            f"model's inputs are {sorted(specs)}"
        )
    present = {n: n for n in outputs}
    keys = [f"present.{i}.key" for i in range(layers)]
    values = [f"present.{i}.value" for i in range(layers)]
    missing = [n for n in keys + values if n not in present]
    if missing:
        raise BadModelError(
            f"generate: the decoder takes past_key_values but has no output(s) {missing[:4]}; "
            f"its outputs are {outputs}"
        )
    first = specs[pasts[(0, "key")]]
    return CacheLayout(
        input_ids="input_ids",
        logits="logits" if "logits" in present else outputs[0],
        past_keys=tuple(pasts[(i, "key")] for i in range(layers)),
        past_values=tuple(pasts[(i, "value")] for i in range(layers)),
        present_keys=tuple(keys),
        present_values=tuple(values),
        kv_heads=_declared_size(first, 1, "kv heads"),
        head_size=_declared_size(first, 3, "head size"),
        cache_dtype=first.dtype or torch.float32,
        attention_mask="attention_mask" if "attention_mask" in specs else None,
        position_ids="position_ids" if "position_ids" in specs else None,
        use_cache_branch="use_cache_branch" if "use_cache_branch" in specs else None,
    )


def _from_genai_config(
    config: dict[str, Any], specs: dict[str, Any], outputs: list[str]
) -> CacheLayout:
    try:
        decoder = config["model"]["decoder"]
        inputs, outs = decoder["inputs"], decoder["outputs"]
        layers = int(decoder["num_hidden_layers"])
        key_pattern, value_pattern = inputs["past_key_names"], inputs["past_value_names"]
        present_keys, present_values = outs["present_key_names"], outs["present_value_names"]
    except (KeyError, TypeError, ValueError) as e:
        raise BadModelError(
            f"generate: genai_config.json lacks model.decoder's {e} (expected inputs, outputs, "
            "num_hidden_layers and the past/present name patterns)"
        ) from e
    past_keys = tuple(key_pattern % i for i in range(layers))
    missing = [n for n in (inputs.get("input_ids", "input_ids"), *past_keys) if n not in specs]
    if missing:
        raise BadModelError(
            f"generate: genai_config.json names input(s) {missing[:4]} the model does not "
            f"take; its inputs are {sorted(specs)}"
        )
    first = specs[past_keys[0]]
    search = config.get("search", {})

    def optional(key: str) -> str | None:
        name = inputs.get(key, key)
        return name if name in specs else None

    return CacheLayout(
        input_ids=inputs.get("input_ids", "input_ids"),
        logits=outs.get("logits", outputs[0]),
        past_keys=past_keys,
        past_values=tuple(value_pattern % i for i in range(layers)),
        present_keys=tuple(present_keys % i for i in range(layers)),
        present_values=tuple(present_values % i for i in range(layers)),
        kv_heads=int(decoder.get("num_key_value_heads") or _declared_size(first, 1, "kv heads")),
        head_size=int(decoder.get("head_size") or _declared_size(first, 3, "head size")),
        cache_dtype=first.dtype or torch.float32,
        attention_mask=optional("attention_mask"),
        position_ids=optional("position_ids"),
        share_buffer=bool(search.get("past_present_share_buffer", False)),
    )


def _declared_size(spec: Any, dim: int, what: str) -> int:
    shape = spec.shape
    if shape is None or len(shape) != 4 or not isinstance(shape[dim], int):
        raise BadModelError(
            f"generate: past input {spec.name!r} must be declared (batch, kv heads, past "
            f"length, head size) with a fixed {what}, received {spec.describe()}"
        )
    return shape[dim]
