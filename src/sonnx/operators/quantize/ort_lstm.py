"""onnxruntime's ``DynamicQuantizeLSTM`` CPU kernel for sonnx's operator
(:class:`~sonnx.operators.rnn.contrib_lstm.DynamicQuantizeLSTM`), called on torch's memory.

sonnx's torch path steps through the sequence in Python, rounding each product's input to
uint8 as onnxruntime does: some ten torch calls per time step and direction, about 35x
onnxruntime's time for one node. onnxruntime's kernel runs the whole recurrence in one call,
so for frozen weights sonnx calls it: one single-node session per node and weights
(:mod:`sonnx.operators.quantize.ort_sessions`), X, sequence_lens and the initial states bound
at each call, Y, Y_h and Y_c written into new torch tensors whose shapes the inputs give.

The call is the torch custom op ``sonnx::dynamic_quantize_lstm_ort`` (a fake gives its three
outputs' shapes), so graph mode records one extern call for the whole sequence, of any length
(the torch path unrolls its steps and cannot trace a symbolic length). The attributes travel as
one JSON string: a compiled graph loaded in another process rebuilds the spec from it.

The session runs on torch's thread count; onnxruntime's kernel splits the batch between its
threads for the hidden state's product and quantizes each part from its own range, so results
equal onnxruntime's at the same thread count (the torch path equals its one-thread results).
The session declares all three outputs, as a node whose Y is an output: where Y is not,
onnxruntime's own run differs for entries that ended early (the torch path's module docstring).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from sonnx.engine.extern_ops import extern_op
from sonnx.operators.quantize.ort_kernels import BridgedNode, register_bridge
from sonnx.operators.quantize.ort_sessions import NodeSpec, kernel_for

__all__ = ["lstm_spec"]

OP_TYPE = "DynamicQuantizeLSTM"
_SLOTS = (
    "X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P",
    "W_scale", "W_zero_point", "R_scale", "R_zero_point",
)  # fmt: skip
#: X, sequence_lens, initial_h and initial_c: what a run feeds; the others are constants.
_BOUND = (0, 4, 5, 6)
_OUTPUTS = ("Y", "Y_h", "Y_c")
Outputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def lstm_spec(attrs: Mapping[str, Any]) -> NodeSpec:
    """The spec of a ``DynamicQuantizeLSTM`` node.

    :param attrs: its attributes (None values left out; hidden_size must be among them).
    :returns: the spec (one object for equal attributes).
    """
    pairs = tuple(
        sorted(
            (k, tuple(v) if isinstance(v, list) else v) for k, v in attrs.items() if v is not None
        )
    )
    return _spec(pairs)


@functools.lru_cache(maxsize=256)
def _spec(attrs: tuple[tuple[str, Any], ...]) -> NodeSpec:
    return NodeSpec(OP_TYPE, attrs, _SLOTS, _BOUND, _OUTPUTS)


@functools.lru_cache(maxsize=256)
def _spec_of_text(text: str) -> NodeSpec:
    """The spec whose attributes :func:`_text` wrote (lists read back as tuples)."""
    return _spec(tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in json.loads(text)))


def _text(spec: NodeSpec) -> str:
    """The attributes as the custom op's string argument."""
    return json.dumps([list(pair) for pair in spec.attrs])


def _run(spec: NodeSpec, inputs: Sequence[torch.Tensor | None]) -> Outputs:
    """Y ``[seq_length, num_directions, batch, hidden]``, Y_h and Y_c ``[num_directions,
    batch, hidden]`` by onnxruntime's kernel."""
    x, r = inputs[0], inputs[2]
    (steps, batch, _), (directions, hidden, _) = x.shape, r.shape
    y = torch.empty((steps, directions, batch, hidden), dtype=torch.float32, device=x.device)
    y_h = torch.empty((directions, batch, hidden), dtype=torch.float32, device=x.device)
    y_c = torch.empty((directions, batch, hidden), dtype=torch.float32, device=x.device)
    full = list(inputs)
    lengths = full[4]
    if lengths is not None and lengths.dtype != torch.int32:
        full[4] = lengths.to(torch.int32)  # the schema's type; an int64 feed holds the same
    for i in _BOUND:
        if full[i] is not None:
            full[i] = full[i].contiguous()
    kernel_for(spec, full)([full[i] for i in _BOUND], (y, y_h, y_c))
    return y, y_h, y_c


def _dynamic_quantize_lstm_ort_fake(
    x: torch.Tensor, w: Any, r: torch.Tensor, *rest: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    directions, hidden = r.shape[0], r.shape[1]
    state = (directions, x.shape[1], hidden)
    y = x.new_empty((x.shape[0], directions, x.shape[1], hidden))
    return y, x.new_empty(state), x.new_empty(state)


@extern_op(
    "dynamic_quantize_lstm_ort",
    "(Tensor x, Tensor w, Tensor r, Tensor? b, Tensor? sequence_lens, Tensor? initial_h,"
    " Tensor? initial_c, Tensor? p, Tensor w_scale, Tensor w_zero_point, Tensor r_scale,"
    " Tensor r_zero_point, str attrs) -> (Tensor, Tensor, Tensor)",
    _dynamic_quantize_lstm_ort_fake,
)
def dynamic_quantize_lstm_ort(
    x: torch.Tensor,
    w: torch.Tensor,
    r: torch.Tensor,
    b: torch.Tensor | None,
    sequence_lens: torch.Tensor | None,
    initial_h: torch.Tensor | None,
    initial_c: torch.Tensor | None,
    p: torch.Tensor | None,
    w_scale: torch.Tensor,
    w_zero_point: torch.Tensor,
    r_scale: torch.Tensor,
    r_zero_point: torch.Tensor,
    attrs: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """onnxruntime's DynamicQuantizeLSTM kernel as a torch operator (``attrs``: the node's
    attributes as JSON pairs)."""
    inputs = (x, w, r, b, sequence_lens, initial_h, initial_c, p)
    return _run(_spec_of_text(attrs), (*inputs, w_scale, w_zero_point, r_scale, r_zero_point))


def _eager(node: BridgedNode, inputs: Sequence[torch.Tensor | None]) -> Outputs:
    # The function itself: the dispatcher's custom-op overhead is not needed outside a trace.
    return _run(node.spec, inputs)


def _traced(node: BridgedNode, inputs: Sequence[torch.Tensor | None]) -> Outputs:
    return torch.ops.sonnx.dynamic_quantize_lstm_ort(*inputs, _text(node.spec))


register_bridge(OP_TYPE, _eager, _traced)
