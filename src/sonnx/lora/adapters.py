"""``add`` and ``merge``: LoRA adapters on a prepared model, trained with the base frozen.

``add`` rewrites the rep's ONNX graph (see :mod:`sonnx.lora.graph`) and prepares it again in
place, so the rep runs, trains (``SONNXModel``, sonnx's optimizers) and exports like any
imported model; the new A and B initializers are its only trainable weights. A is drawn as PEFT
draws it (Kaiming-uniform, a = sqrt(5)) and B starts at zero, so a fresh adapter changes nothing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import onnx
import torch

from sonnx.errors import BadInputError
from sonnx.lora.graph import Adapter, adapters_of, attach, strip
from sonnx.lora.targets import LoraTargetError, select
from sonnx.runtime.rep import SingaRep, prepare_rewritten

__all__ = ["adapter_values", "add", "merge", "rebuild", "weight_delta", "weight_float_type"]


def weight_float_type(graph: onnx.GraphProto, adapter: Adapter) -> np.dtype:
    """The float type of the adapted node's weight (its scales for a 4-bit weight)."""
    node = next(n for n in graph.node if n.name == adapter.node)
    weight = node.input[2] if adapter.op_type == "MatMulNBits" else node.input[1]
    init = next(i for i in graph.initializer if i.name == weight)
    return onnx.helper.tensor_dtype_to_np_dtype(init.data_type)


def _initial_values(a: Adapter, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    lora_a = torch.empty(a.rank, a.in_features)  # host: initial values, written into the graph
    torch.nn.init.kaiming_uniform_(lora_a, a=math.sqrt(5))
    return lora_a.t().numpy().astype(dtype), np.zeros((a.rank, a.out_features), dtype)


def adapter_values(rep: SingaRep) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Each adapter's current (A [in, r], B [r, out]) as detached torch tensors (sharing the
    parameters' storage), by module name."""
    return {
        a.module: (rep.constants[a.a_name].data.detach(), rep.constants[a.b_name].data.detach())
        for a in adapters_of(rep.model)
    }


def rebuild(rep: SingaRep, model: onnx.ModelProto, trainable: set[str] | None) -> None:
    """Prepare ``model`` into ``rep`` in place, its initializers that ``rep`` holds being
    ``rep``'s tensors, their storage shared (``model``, derived from ``rep.model``, lacks the
    bytes of the large ones): the weights are held once throughout; ``trainable`` names the
    weights that train (None: all of them)."""
    fresh = prepare_rewritten(model, rep)
    for name, t in fresh.params.items():
        t.requires_grad = trainable is None or name in trainable
    for field in dataclasses.fields(rep):
        setattr(rep, field.name, getattr(fresh, field.name))


def _check_hyper(rank: int, alpha: float, dropout: float) -> None:
    if not isinstance(rank, int) or rank < 1:
        raise BadInputError(f"lora.add: rank must be a positive int, received {rank!r}")
    if not alpha > 0:
        raise BadInputError(f"lora.add: alpha must be positive, received {alpha!r}")
    if not 0 <= dropout < 1:
        raise BadInputError(f"lora.add: dropout must be in [0, 1), received {dropout!r}")


def add(
    rep: SingaRep,
    targets: str | Sequence[str],
    rank: int = 8,
    alpha: float = 16.0,
    dropout: float = 0.0,
) -> list[str]:
    """Attach a rank-``rank`` adapter, scaled by ``alpha / rank``, to each node ``targets``
    selects (op types or node-name patterns, see :func:`sonnx.lora.targets.select`).

    The rep is changed in place: every other weight is frozen and the adapters' A and B are its
    trainable parameters. Returns the adapted modules' names. Adding again attaches more
    adapters and keeps the trained values of the ones already there.

    :param rep: the prepared model (:func:`sonnx.prepare`, or ``CausalLM.rep``).
    :param targets: op types (``"MatMul"``, ``"Gemm"``, ``"MatMulNBits"``, ``"FusedMatMul"``)
        or node-name patterns (regular expressions), one or several; each must select a
        node.
    :param rank: the adapters' rank, a positive int.
    :param alpha: the scale numerator (the adapter output is scaled by ``alpha / rank``), > 0.
    :param dropout: the dropout on the adapter's input in training, in [0, 1).
    :returns: the adapted modules' names (the node names' module paths).
    :raises BadInputError: ``rank``, ``alpha`` or ``dropout`` out of range.
    :raises LoraTargetError: a target selects no node, an invalid pattern, a node that
        already has an adapter, or two nodes that would share an adapter name.
    """
    _check_hyper(rank, alpha, dropout)
    existing = adapters_of(rep.model)
    base = strip(rep.model) if existing else rep.model
    taken = {a.node for a in existing}
    chosen = select(base.graph, targets)
    again = [t.node for t in chosen if t.node in taken]
    if again:
        raise LoraTargetError(f"lora.add: node(s) {again} already have an adapter")
    new = [Adapter.of(t, rank, alpha / rank, float(dropout)) for t in chosen]
    values = {m: (a.cpu().numpy(), b.cpu().numpy()) for m, (a, b) in adapter_values(rep).items()}
    for a in new:
        values[a.module] = _initial_values(a, weight_float_type(base.graph, a))
    adapters = existing + new
    model = attach(base, adapters, values, "train")
    rebuild(rep, model, {n for a in adapters for n in (a.a_name, a.b_name)})
    return [a.module for a in new]


def weight_delta(
    a: Adapter, lora_a: torch.Tensor, lora_b: torch.Tensor, node: onnx.NodeProto
) -> torch.Tensor:
    """What adding the adapter to the node's float weight adds, in the weight's layout."""
    delta = a.scale * (lora_a @ lora_b)
    attrs = {at.name: at for at in node.attribute}
    if "alpha" in attrs:  # Gemm and FusedMatMul scale the weight's product by alpha
        delta = delta / attrs["alpha"].f
    if "transB" in attrs and attrs["transB"].i:
        delta = delta.t()
    return delta


def merge(rep: SingaRep) -> SingaRep:
    """Add every adapter into its node's float weight and remove the adapters (in place).

    A 4-bit base cannot take the sum without quantizing it again: merging raises there, and
    :func:`sonnx.lora.export` with ``merged=True`` keeps its adapters as side nodes instead.

    :param rep: a prepared model with adapters.
    :returns: ``rep``, without adapters, its weights holding them.
    :raises BadInputError: the model has no adapters.
    :raises LoraTargetError: an adapted node has a 4-bit (MatMulNBits) weight.
    """
    adapters = adapters_of(rep.model)
    if not adapters:
        raise BadInputError("lora.merge: the model has no adapters (call sonnx.lora.add first)")
    quantized = [a.node for a in adapters if a.op_type == "MatMulNBits"]
    if quantized:
        raise LoraTargetError(
            f"lora.merge: node(s) {quantized[:3]} have a 4-bit weight, which cannot take the "
            "adapter without re-quantizing; use sonnx.lora.export(rep, dir, merged=True), which "
            "keeps them as side nodes"
        )
    nodes = {n.name: n for n in rep.model.graph.node}
    values = adapter_values(rep)
    with torch.no_grad():
        for a in adapters:
            node = nodes[a.node]
            weight = rep.constants[node.input[1]].data
            lora_a, lora_b = values[a.module]
            weight += weight_delta(a, lora_a, lora_b, node).to(weight.dtype)
    rebuild(rep, strip(rep.model), None)
    return rep
