"""The language-model head on the rows generation reads: each sequence's last position.

A decoder graph computes the logits of every new position, so a prompt of 32 tokens multiplies
32 hidden states by the head's ``[hidden, vocab]`` weight. That is the largest product of a
small model: at hidden 768 and a 32,000-token vocabulary it holds a third of a 100M model's
weights, and without it a 32-token prompt's prefill took a fifth (int4) to a third (fp32)
less time (``bench/history.md``). Generation reads one row of
those logits per sequence. transformers asks its models for the last position's logits only
(``logits_to_keep``); an ONNX file cannot be asked, so the decoder runs a rewrite of the graph
(:func:`head_on_kept_rows`) in which the head's input is gathered first: one row per sequence,
at the position the new graph input :data:`KEPT_ROWS` (``(batch,)`` int64) gives. The logits
come out ``(batch, 1, vocab)``, as the rewrite's output declares.

The head is found from the logits output back through a ``Cast`` or an ``Add``, ``Sub``,
``Mul`` or ``Div`` by a constant (a bias, a scale), to a ``MatMul`` or ``MatMulNBits`` whose
other inputs are constants or computed from constants alone (a transposed tied embedding, a
dequantized weight), reading a 3-D input. A graph whose logits come otherwise is run as it is.

The rewrite holds the weights once with the model it came from
(:func:`~sonnx.runtime.rep.prepare_rewritten`), and it is made once per prepared model and kept
while that model's graph, program and rewrites stay the ones it was made from (LoRA's
``add`` prepares a new program into the same object; QAT adds a rewrite).
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

import onnx
from onnx import TensorProto, helper

from sonnx.onnx.model_loading import opset_versions

if TYPE_CHECKING:
    from sonnx.runtime.rep import SingaRep

__all__ = ["KEPT_ROWS", "head_on_kept_rows", "kept_rows_model"]

#: The rewritten graph's input: each sequence's row (position among the new tokens) whose
#: logits are computed.
KEPT_ROWS = "sonnx_kept_rows"

_PRODUCTS = frozenset({"MatMul", "MatMulNBits"})
_BY_CONSTANT = frozenset({"Add", "Sub", "Mul", "Div"})
_LOCK = threading.Lock()
#: id(rep) -> (the model, program and rewrites it was made from, the rewrite or None).
_MADE: dict[int, tuple[Any, Any, tuple[Any, ...], SingaRep | None]] = {}


def head_on_kept_rows(rep: SingaRep, logits: str) -> SingaRep | None:
    """``rep`` with its head computed on the kept rows only (see the module docstring), made
    on the first call for this model and kept; None where the head is not found.

    :param rep: the prepared decoder graph.
    :param logits: the name of its logits output.
    :returns: the rewrite, prepared, reading :data:`KEPT_ROWS`; or None.
    """
    with _LOCK:
        made = _MADE.get(id(rep))
        if made is not None and _made_from(made, rep):
            return made[3]
        from sonnx.runtime.rep import prepare_rewritten

        model = kept_rows_model(rep.model, logits)
        rewritten = None if model is None else prepare_rewritten(model, rep)
        if made is None:
            weakref.finalize(rep, _MADE.pop, id(rep), None)
        _MADE[id(rep)] = (rep.model, rep.program, rep.rewrites, rewritten)
        return rewritten


def _made_from(made: tuple[Any, ...], rep: SingaRep) -> bool:
    """Whether ``made`` came from ``rep``'s model, program and rewrites as they are now: by
    identity (a model or program compared by value would be walked whole), the rewrites as a
    tuple of the same functions."""
    return made[0] is rep.model and made[1] is rep.program and made[2] == rep.rewrites


def kept_rows_model(model: onnx.ModelProto, logits: str) -> onnx.ModelProto | None:
    """A copy of ``model`` whose head reads the rows :data:`KEPT_ROWS` gives, or None where
    its head is not found (or the default domain's opset is older than 13, whose
    ``Unsqueeze`` takes its axes as an attribute)."""
    graph = model.graph
    if opset_versions(model)[""] < 13 or KEPT_ROWS in {v.name for v in graph.input}:
        return None
    head = _head(graph, logits)
    if head is None:
        return None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    at = next(i for i, n in enumerate(out.graph.node) if n.output == head.output)
    node = out.graph.node[at]
    axis, index, rows, kept = (
        f"{KEPT_ROWS}/{part}" for part in ("axis", "index", "rows", "hidden")
    )
    out.graph.initializer.append(helper.make_tensor(axis, TensorProto.INT64, [1], [1]))
    gather = [
        helper.make_node("Unsqueeze", [KEPT_ROWS, axis], [index], name=index),
        helper.make_node("GatherND", [node.input[0], index], [rows], name=rows, batch_dims=1),
        helper.make_node("Unsqueeze", [rows, axis], [kept], name=kept),
    ]
    node.input[0] = kept
    # Just before the head, which reads them: the hidden states are computed before it.
    nodes = list(out.graph.node)
    del out.graph.node[:]
    out.graph.node.extend([*nodes[:at], *gather, *nodes[at:]])
    out.graph.input.append(helper.make_tensor_value_info(KEPT_ROWS, TensorProto.INT64, ["batch"]))
    for declared in out.graph.output:  # the logits' positions: one now
        dims = declared.type.tensor_type.shape.dim
        if declared.name == logits and len(dims) == 3:
            dims[1].Clear()
            dims[1].dim_value = 1
    return out


def _head(graph: onnx.GraphProto, logits: str) -> onnx.NodeProto | None:
    """The product computing ``logits`` (through a Cast or arithmetic by a constant), with
    constant weights and a 3-D input, or None."""
    producers = {out: n for n in graph.node for out in n.output}
    constants = {i.name for i in graph.initializer}
    for n in graph.node:  # values computed from constants alone: Constant, Transpose, ...
        reads_constants = n.op_type != "If" and all(i in constants or i == "" for i in n.input)
        if reads_constants or n.op_type == "Constant":
            constants.update(n.output)
    node = producers.get(logits)
    while node is not None and node.op_type not in _PRODUCTS:
        by_constant = node.op_type in _BY_CONSTANT and node.input[1] in constants
        if node.op_type != "Cast" and not by_constant:
            return None
        node = producers.get(node.input[0])
    if node is None or not all(i in constants or i == "" for i in node.input[1:]):
        return None
    declared = {v.name: v for v in [*graph.value_info, *graph.input, *graph.output]}
    hidden = declared.get(node.input[0])
    shape = None if hidden is None else hidden.type.tensor_type
    if shape is not None and shape.HasField("shape") and len(shape.shape.dim) != 3:
        return None
    return node
