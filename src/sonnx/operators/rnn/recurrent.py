"""Recurrent operators: RNN, GRU and LSTM as ONNX defines them.

Each runs a Python loop over time steps built from torch ops, so torch autograd differentiates
it with respect to every float input. The input projection ``X @ W^T + Wb`` is computed for all
steps at once; only the recurrence is stepped. All three share :class:`_Recurrent` (in
:mod:`sonnx.operators.rnn.base`), which handles directions, ``layout``, ``sequence_lens``,
initial states, ``clip`` and the ``activations`` list; this module holds each one's time step,
the LSTM's paths through torch's own fused layer, and the SINGA-named functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from sonnx.engine.tracing import value_checks
from sonnx.operators.rnn.base import _Recurrent
from sonnx.tensor import Tensor

__all__ = ["GRU", "LSTM", "RNN", "gru", "lstm", "rnn"]


class RNN(_Recurrent):
    """ONNX RNN: ``H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)``; outputs Y and Y_h."""

    op_type = "RNN"
    since_versions = (7, 14, 22)
    gates = 1
    default_activations = ("Tanh",)

    def step(self, projected, states, r, rb, p, acts, product):
        pre = projected + product(states[0], r)
        if rb is not None:
            pre = pre + rb
        return [acts[0](pre)]


class GRU(_Recurrent):
    """ONNX GRU (gates z, r, h); ``linear_before_reset`` applies the reset gate after R_h."""

    op_type = "GRU"
    since_versions = (7, 14, 22)
    gates = 3
    default_activations = ("Sigmoid", "Tanh")

    def step(self, projected, states, r, rb, p, acts, product):
        f, g = acts
        h = states[0]
        hidden = h.shape[-1]
        recur = product(h, r[: 2 * hidden])
        if rb is not None:
            recur = recur + rb[: 2 * hidden]
        gates = projected[:, : 2 * hidden] + recur
        z, reset = f(gates[:, :hidden]), f(gates[:, hidden:])
        r_h, rb_h = r[2 * hidden :], None if rb is None else rb[2 * hidden :]
        if int(self.attr("linear_before_reset") or 0):
            candidate = product(h, r_h)
            if rb_h is not None:
                candidate = candidate + rb_h
            candidate = reset * candidate
        else:
            candidate = product(reset * h, r_h)
            if rb_h is not None:
                candidate = candidate + rb_h
        new_h = g(projected[:, 2 * hidden :] + candidate)
        return [(1 - z) * new_h + z * h]


class LSTM(_Recurrent):
    """ONNX LSTM (gates i, o, f, c; peepholes P = [Pi, Po, Pf]); outputs Y, Y_h and Y_c.

    ``input_forget`` couples the gates: the forget gate is ``1 - i``. ``clip`` bounds the gates'
    pre-activations only, not the cell state passed to ``h`` (as ONNX Runtime does).
    """

    op_type = "LSTM"
    since_versions = (7, 14, 22)
    gates = 4
    default_activations = ("Sigmoid", "Tanh", "Tanh")
    state_names = ("initial_h", "initial_c")
    unclipped = (2,)  # clip bounds the gates' inputs, not the cell state fed to h

    def _run_direction(self, x, weights, init, acts, lengths, reverse: bool):
        """torch's own LSTM (oneDNN's fused layer on the CPU, cuDNN's on a GPU) where it
        computes this node: one call for the whole sequence, of any (symbolic) length; a short
        one traced for graph mode is unrolled instead (see :func:`_small_traced_lstm`)."""
        if lengths is not None or weights[3] is not None or not self._standard(x):
            return super()._run_direction(x, weights, init, acts, lengths, reverse)
        if _small_traced_lstm(x, weights[1]):
            return super()._run_direction(x, weights, init, acts, None, reverse, _broadcast_t)
        flat = self._torch_weights(weights[:3], reverse)
        sequence = x.flip(0) if reverse else x
        state = (init[0].unsqueeze(0), init[1].unsqueeze(0))
        if not value_checks():
            # Traced for graph mode: inductor passes oneDNN's LSTM layer its input as a view
            # of the buffer it was computed in, whatever that view's strides, and the layer
            # reads it as contiguous (a transposed input traced at a batch of one came out
            # wrong). A copy in torch's layout is what the layer reads; it costs one pass.
            sequence = _contiguous_copy(sequence)
            state = (_contiguous_copy(state[0]), _contiguous_copy(state[1]))
        y, h, c = torch.lstm(sequence, state, flat, len(flat) == 4, 1, 0.0, False, False, False)
        return (y.flip(0) if reverse else y), [h[0], c[0]]

    def _torch_weights(self, weights: Sequence[torch.Tensor | None], reverse: bool) -> list:
        """One direction's W, R and B in torch's gate order and bias split. Reordering copies
        every weight, so without a gradient to keep the copies are made once per state of the
        weights (their tensors and versions, as ``sonnx.runtime.conv_fusions`` keys its folded
        weights): the direction's W is a view, so its base and place in it stand for it."""
        present = [t for t in weights if t is not None]
        if not value_checks() or (
            torch.is_grad_enabled() and any(t.requires_grad for t in present)
        ):
            return _torch_lstm_weights(*weights)
        state = [
            (t._base if t._base is not None else t, (t._version, t.storage_offset(), t.stride()))
            for t in present
        ]
        cache: dict[bool, Any] = self.__dict__.setdefault("_torch_weight_cache", {})
        kept = cache.get(reverse)
        if (
            kept is not None
            and len(kept[0]) == len(state)
            and all(t is k and v == kv for (t, v), (k, kv) in zip(state, kept[0], strict=True))
        ):
            return kept[1]
        flat = _torch_lstm_weights(*weights)
        cache[reverse] = (state, flat)
        return flat

    def _standard(self, x: torch.Tensor) -> bool:
        """Default activations, no ``clip``, no coupled gates, a float type torch's LSTM
        takes: the node is torch's LSTM."""
        names = [str(n).lower() for n in (self.attr("activations") or ())]
        defaults = [n.lower() for n in self.default_activations]
        return (
            names in ([], defaults, defaults * 2)
            and self.attr("clip") is None
            and not int(self.attr("input_forget") or 0)
            and x.dtype in (torch.float32, torch.float64)
        )

    def step(self, projected, states, r, rb, p, acts, product):
        f, g, h_act = acts
        h, c = states
        hidden = h.shape[-1]
        gates = projected + product(h, r)
        if rb is not None:
            gates = gates + rb
        i_pre, o_pre, f_pre, c_pre = gates.split(hidden, dim=1)
        if p is not None:
            i_pre = i_pre + p[:hidden] * c
            f_pre = f_pre + p[2 * hidden :] * c
        i = f(i_pre)
        forget = 1 - i if int(self.attr("input_forget") or 0) else f(f_pre)
        new_c = forget * c + i * g(c_pre)
        if p is not None:
            o_pre = o_pre + p[hidden : 2 * hidden] * new_c
        return [f(o_pre) * h_act(new_c), new_c]


#: Multiply-adds of one LSTM time step (all gates, input and recurrent products) up to which
#: a traced LSTM of a short fixed length is unrolled, its products as reductions (see
#: :func:`_broadcast_t`).
REDUCTION_STEP_MACS = 1 << 18
_UNROLLED_STEPS = 16


def _small_traced_lstm(x: torch.Tensor, r: torch.Tensor) -> bool:
    """Whether an LSTM traced for graph mode is small enough to unroll with :func:`_broadcast_t`:
    a fixed sequence of at most ``_UNROLLED_STEPS`` steps on the CPU, whose time step costs
    at most ``REDUCTION_STEP_MACS`` at this batch size. The batch comparison is a guard of
    the compiled graph when the batch is symbolic: a larger batch gets a graph of its own,
    with torch's LSTM."""
    steps, batch, width = x.shape
    if value_checks() or not isinstance(steps, int) or steps > _UNROLLED_STEPS:
        return False
    if x.device.type != "cpu":
        return False
    gates, hidden = r.shape
    return bool(batch * gates * (width + hidden) <= REDUCTION_STEP_MACS)


def _broadcast_t(a: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """``a @ m^T`` as a broadcast multiply and sum, which inductor compiles into its own loops.

    A streaming model's LSTM runs a few steps of a small state (a VAD: 3 steps of 64 units)
    per call. oneDNN's LSTM layer, or a GEMM per step, costs 50-100 us per call on the
    machines we measure, more than the arithmetic: compiled alone, an LSTM unrolled with this
    product took 0.5-0.9x torch's LSTM up to 2^18 multiply-adds per step, and 1.2-2.2x beyond.
    """
    return (a.unsqueeze(-1) * m.t()).sum(-2)


def _contiguous_copy(t: torch.Tensor) -> torch.Tensor:
    """A copy in torch's contiguous layout (a traced ``.contiguous()`` of a tensor that is
    contiguous at the example's sizes is no copy, and guards those sizes)."""
    return t.clone(memory_format=torch.contiguous_format)


def _torch_lstm_weights(w: torch.Tensor, r: torch.Tensor, b: torch.Tensor | None) -> list:
    """torch's LSTM weights for one direction: W and R, then the two biases if there is B."""
    hidden = r.shape[-1]
    flat = [_torch_gate_order(w, hidden), _torch_gate_order(r, hidden)]
    if b is not None:
        rows = 4 * hidden
        flat += [_torch_gate_order(b[:rows], hidden), _torch_gate_order(b[rows:], hidden)]
    return flat


def _torch_gate_order(t: torch.Tensor, hidden: int) -> torch.Tensor:
    """Rows of LSTM gates from ONNX's order (input, output, forget, cell) to torch's (input,
    forget, cell, output)."""
    i, o, f, c = t.split(hidden, dim=0)
    return torch.cat([i, f, c, o], 0)


def _attrs(
    hidden: int,
    direction: str,
    activations: Sequence[str] | None,
    activation_alpha: Sequence[float] | None,
    activation_beta: Sequence[float] | None,
    clip: float | None,
    layout: int,
) -> dict[str, Any]:
    attrs: dict[str, Any] = {"hidden_size": int(hidden), "direction": direction}
    if activations is not None:
        attrs["activations"] = list(activations)
    if activation_alpha is not None:
        attrs["activation_alpha"] = [float(a) for a in activation_alpha]
    if activation_beta is not None:
        attrs["activation_beta"] = [float(b) for b in activation_beta]
    if clip is not None:
        attrs["clip"] = float(clip)
    if layout:
        attrs["layout"] = int(layout)
    return attrs


def rnn(
    x: Tensor,
    w: Tensor,
    r: Tensor,
    b: Tensor | None = None,
    initial_h: Tensor | None = None,
    sequence_lens: Tensor | None = None,
    direction: str = "forward",
    activations: Sequence[str] | None = None,
    activation_alpha: Sequence[float] | None = None,
    activation_beta: Sequence[float] | None = None,
    clip: float | None = None,
    layout: int = 0,
) -> tuple[Tensor, Tensor]:
    """A simple RNN over ``x`` (seq, batch, input) — (batch, seq, input) when ``layout=1``.

    ``w`` (directions, hidden, input), ``r`` (directions, hidden, hidden) and ``b``
    (directions, 2*hidden) are usually parameter tensors (ONNX RNN).

    :param x: the input sequence.
    :param w: the input weights.
    :param r: the recurrence weights.
    :param b: the input and recurrence biases concatenated, or None.
    :param initial_h: the (directions, batch, hidden) initial state, or None for zeros.
    :param sequence_lens: the (batch,) length of each sequence, or None for all ``seq``.
    :param direction: ``"forward"``, ``"reverse"`` or ``"bidirectional"``.
    :param activations: the activation per direction (default ``Tanh``).
    :param activation_alpha: the activations' alpha values, where they take one.
    :param activation_beta: the activations' beta values, where they take one.
    :param clip: the bound the pre-activations are clipped to, or None.
    :param layout: 0 for seq-major tensors, 1 for batch-major.
    :returns: ``(y, y_h)``: every step's state (seq, directions, batch, hidden; batch first with
        ``layout=1``) and the last.
    :raises BadInputError: an input is not 3-D, a weight has the wrong shape, ``direction`` or
        ``layout`` is unknown, or a sequence length is out of range.
    """
    attrs = _attrs(
        r.shape[-1], direction, activations, activation_alpha, activation_beta, clip, layout
    )
    return RNN(**attrs)(x, w, r, b, sequence_lens, initial_h)


def gru(
    x: Tensor,
    w: Tensor,
    r: Tensor,
    b: Tensor | None = None,
    initial_h: Tensor | None = None,
    sequence_lens: Tensor | None = None,
    direction: str = "forward",
    linear_before_reset: bool = False,
    activations: Sequence[str] | None = None,
    activation_alpha: Sequence[float] | None = None,
    activation_beta: Sequence[float] | None = None,
    clip: float | None = None,
    layout: int = 0,
) -> tuple[Tensor, Tensor]:
    """A GRU; ``w`` is (directions, 3*hidden, input) in gate order z, r, h. Returns (y, y_h).

    :param x: the (seq, batch, input) sequence, (batch, seq, input) when ``layout=1``.
    :param w: the (directions, 3*hidden, input) input weights.
    :param r: the (directions, 3*hidden, hidden) recurrence weights.
    :param b: the (directions, 6*hidden) input and recurrence biases, or None.
    :param initial_h: the (directions, batch, hidden) initial state, or None for zeros.
    :param sequence_lens: the (batch,) length of each sequence, or None for all ``seq``.
    :param direction: ``"forward"``, ``"reverse"`` or ``"bidirectional"``.
    :param linear_before_reset: True applies the reset gate after the recurrence's product.
    :param activations: the gate and output activations per direction (default ``Sigmoid``,
        ``Tanh``).
    :param activation_alpha: the activations' alpha values, where they take one.
    :param activation_beta: the activations' beta values, where they take one.
    :param clip: the bound the pre-activations are clipped to, or None.
    :param layout: 0 for seq-major tensors, 1 for batch-major.
    :returns: ``(y, y_h)``: every step's state (seq, directions, batch, hidden; batch first with
        ``layout=1``) and the last (ONNX GRU).
    :raises BadInputError: an input is not 3-D, a weight has the wrong shape, ``direction`` or
        ``layout`` is unknown, or a sequence length is out of range.
    """
    attrs = _attrs(
        r.shape[-1], direction, activations, activation_alpha, activation_beta, clip, layout
    )
    if linear_before_reset:
        attrs["linear_before_reset"] = 1
    return GRU(**attrs)(x, w, r, b, sequence_lens, initial_h)


def lstm(
    x: Tensor,
    w: Tensor,
    r: Tensor,
    b: Tensor | None = None,
    initial_h: Tensor | None = None,
    initial_c: Tensor | None = None,
    p: Tensor | None = None,
    sequence_lens: Tensor | None = None,
    direction: str = "forward",
    input_forget: bool = False,
    activations: Sequence[str] | None = None,
    activation_alpha: Sequence[float] | None = None,
    activation_beta: Sequence[float] | None = None,
    clip: float | None = None,
    layout: int = 0,
) -> tuple[Tensor, Tensor, Tensor]:
    """An LSTM; ``w`` is (directions, 4*hidden, input) in gate order i, o, f, c and ``p``
    the optional peepholes (directions, 3*hidden). Returns ``(y, y_h, y_c)``.

    :param x: the (seq, batch, input) sequence, (batch, seq, input) when ``layout=1``.
    :param w: the (directions, 4*hidden, input) input weights.
    :param r: the (directions, 4*hidden, hidden) recurrence weights.
    :param b: the (directions, 8*hidden) input and recurrence biases, or None.
    :param initial_h: the (directions, batch, hidden) initial state, or None for zeros.
    :param initial_c: the (directions, batch, hidden) initial cell, or None for zeros.
    :param p: the (directions, 3*hidden) peephole weights, or None.
    :param sequence_lens: the (batch,) length of each sequence, or None for all ``seq``.
    :param direction: ``"forward"``, ``"reverse"`` or ``"bidirectional"``.
    :param input_forget: True couples the input and forget gates.
    :param activations: the gate, cell and output activations per direction (default
        ``Sigmoid``, ``Tanh``, ``Tanh``).
    :param activation_alpha: the activations' alpha values, where they take one.
    :param activation_beta: the activations' beta values, where they take one.
    :param clip: the bound the pre-activations are clipped to, or None.
    :param layout: 0 for seq-major tensors, 1 for batch-major.
    :returns: ``(y, y_h, y_c)``: every step's state, the last state and the last cell (ONNX
        LSTM).
    :raises BadInputError: an input is not 3-D, a weight has the wrong shape, ``direction`` or
        ``layout`` is unknown, or a sequence length is out of range.
    """
    attrs = _attrs(
        r.shape[-1], direction, activations, activation_alpha, activation_beta, clip, layout
    )
    if input_forget:
        attrs["input_forget"] = 1
    return LSTM(**attrs)(x, w, r, b, sequence_lens, initial_h, initial_c, p)
