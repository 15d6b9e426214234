"""Recurrent operators: RNN, GRU and LSTM as ONNX defines them.

Each runs a Python loop over time steps built from torch ops, so torch autograd differentiates
it with respect to every float input. The input projection ``X @ W^T + Wb`` is computed for all
steps at once; only the recurrence is stepped. All three share :class:`_Recurrent`, which handles
directions, ``layout``, ``sequence_lens`` (a batch entry's state stops changing after its last
step and its ``Y`` rows are zero there), initial states, ``clip`` and the ``activations`` list.

``activation_alpha`` / ``activation_beta`` are consumed in the order of the activations that use
them (LeakyRelu, Affine, …), as ONNX Runtime does; an activation with no value left takes its
ONNX operator's default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from sonnx.dtypes import dtype_name
from sonnx.engine.operator import Operator, OutputShape, TorchOutputs
from sonnx.engine.tracing import NotTraceableError, value_checks
from sonnx.errors import BadInputError
from sonnx.operators.normalization.common import check_float
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.symbolic_sizes import has_symbols
from sonnx.tensor import Tensor

__all__ = ["GRU", "LSTM", "RNN", "gru", "lstm", "rnn"]

Activation = Callable[[torch.Tensor], torch.Tensor]

# name -> (function of (x, alpha, beta), default alpha, default beta); None: not used.
_ACTIVATIONS: dict[str, tuple[Callable[..., torch.Tensor], float | None, float | None]] = {
    "relu": (lambda x, a, b: F.relu(x), None, None),
    "tanh": (lambda x, a, b: torch.tanh(x), None, None),
    "sigmoid": (lambda x, a, b: torch.sigmoid(x), None, None),
    "softsign": (lambda x, a, b: F.softsign(x), None, None),
    "softplus": (lambda x, a, b: F.softplus(x), None, None),
    "affine": (lambda x, a, b: a * x + b, 1.0, 0.0),
    "leakyrelu": (lambda x, a, b: F.leaky_relu(x, a), 0.01, None),
    "thresholdedrelu": (lambda x, a, b: torch.where(x > a, x, torch.zeros_like(x)), 1.0, None),
    "scaledtanh": (lambda x, a, b: a * torch.tanh(b * x), 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b: torch.clamp(a * x + b, 0.0, 1.0), 0.2, 0.5),
    "elu": (lambda x, a, b: F.elu(x, a), 1.0, None),
}


def _bind(fn: Callable[..., torch.Tensor], alpha: Any, beta: Any, clip: float | None) -> Activation:
    if clip is None:
        return lambda x: fn(x, alpha, beta)
    return lambda x: fn(torch.clamp(x, -clip, clip), alpha, beta)


class _Recurrent(Operator):
    """What RNN, GRU and LSTM share; a subclass defines its gates and one time step."""

    output_shape = OutputShape.FROM_SHAPES
    # The sequence lengths and initial states are data.
    parameterising_inputs = frozenset()

    gates: ClassVar[int] = 1
    default_activations: ClassVar[tuple[str, ...]] = ()
    #: The recurrent states: the hidden state, and the cell state for LSTM.
    state_names: ClassVar[tuple[str, ...]] = ("initial_h",)
    #: Positions in the activation list whose input ``clip`` leaves alone.
    unclipped: ClassVar[tuple[int, ...]] = ()

    # The last input signature that passed the checks, and the directions and layout found
    # for it: an imported graph runs one operator object many times on the same shapes.
    _checked: tuple[tuple[Any, ...], tuple[int, int]] | None = None

    def forward(  # type: ignore[override]
        self, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None
    ) -> TorchOutputs:
        states = [initial_h, initial_c][: len(self.state_names)]
        directions, layout = self._check(x, w, r, b, states, p)
        if layout == 1:
            x = x.transpose(0, 1)
            states = [s.transpose(0, 1) if s is not None else s for s in states]
        steps, batch, _ = x.shape
        hidden = r.shape[-1]
        lengths = self._lengths(sequence_lens, steps, batch)
        acts = self._activations(directions)
        ys, finals = [], []
        for d in range(directions):
            init = [
                torch.zeros(batch, hidden, dtype=x.dtype, device=x.device) if s is None else s[d]
                for s in states
            ]
            y, last = self._run_direction(
                x,
                (w[d], r[d], None if b is None else b[d], None if p is None else p[d]),
                init,
                acts[d],
                lengths,
                reverse=self.attr("direction") == "reverse" or d == 1,
            )
            ys.append(y)
            finals.append(last)
        if directions == 1 and value_checks():  # views, not copies (a trace keeps its copies)
            y = ys[0].unsqueeze(1)
            outs = [f.unsqueeze(0) for f in finals[0]]
        else:
            y = torch.stack(ys, 1)
            outs = [torch.stack([f[k] for f in finals], 0) for k in range(len(states))]
        if layout == 1:
            y = y.permute(2, 0, 1, 3)
            outs = [o.transpose(0, 1) for o in outs]
        return (y, *outs)

    # ---- pieces ---------------------------------------------------------------------------
    def _check(self, x, w, r, b, states, p) -> tuple[int, int]:
        """The number of directions and the layout, after checking the inputs' types and
        shapes (kept for the last input signature, outside graph tracing)."""
        kept = value_checks()
        signature = (
            tuple(None if t is None else (t.shape, t.dtype) for t in (x, w, r, b, *states, p))
            if kept
            else None
        )
        if kept and self._checked is not None and self._checked[0] == signature:
            return self._checked[1]
        op = self.op_type
        directions = self._num_directions()
        layout = int(self.attr("layout") or 0)
        for name, value in (("X", x), ("W", w), ("R", r)):
            check_float(op, name, value)
            if value.dim() != 3:
                raise BadInputError(
                    f"{op}: input {name} must be 3-D, received {tuple(value.shape)}"
                )
        if layout not in (0, 1):
            raise BadInputError(f"{op}: attribute layout must be 0 or 1, received {layout}")
        steps, batch, width = x.shape if layout == 0 else x.transpose(0, 1).shape
        if steps == 0:
            raise BadInputError(f"{op}: input X must have at least one time step")
        hidden = r.shape[-1]
        self._check_weights(w, r, b, directions, hidden, width)
        for name, s in zip(self.state_names, states, strict=True):
            s = s.transpose(0, 1) if s is not None and layout == 1 else s
            self._check_shape(name, s, (directions, batch, hidden))
        self._check_shape("P", p, (directions, 3 * hidden))
        if kept:
            self._checked = (signature, (directions, layout))
        return directions, layout

    def _num_directions(self) -> int:
        direction = self.attr("direction")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise BadInputError(
                f"{self.op_type}: attribute direction must be 'forward', 'reverse' or "
                f"'bidirectional', received {direction!r}"
            )
        return 2 if direction == "bidirectional" else 1

    def _check_shape(self, name: str, value: torch.Tensor | None, shape: tuple[int, ...]) -> None:
        if value is not None and tuple(value.shape) != shape:
            raise BadInputError(
                f"{self.op_type}: input {name} must have shape {shape}, "
                f"received {tuple(value.shape)}"
            )

    def _check_weights(self, w, r, b, directions: int, hidden: int, width: int) -> None:
        size = self.attr("hidden_size")
        if size is not None and int(size) != hidden:
            raise BadInputError(
                f"{self.op_type}: attribute hidden_size ({size}) must equal R's last dimension, "
                f"received R of shape {tuple(r.shape)}"
            )
        rows = self.gates * hidden
        self._check_shape("W", w, (directions, rows, width))
        self._check_shape("R", r, (directions, rows, hidden))
        self._check_shape("B", b, (directions, 2 * rows))

    def _lengths(self, sequence_lens, steps: int, batch: int) -> torch.Tensor | None:
        """The per-entry lengths, or None when every entry runs all ``steps``."""
        if sequence_lens is None:
            return None
        if sequence_lens.dtype.is_floating_point or tuple(sequence_lens.shape) != (batch,):
            raise BadInputError(
                f"{self.op_type}: input sequence_lens must be an integer tensor of shape "
                f"({batch},), received {dtype_name(sequence_lens.dtype)} of shape "
                f"{tuple(sequence_lens.shape)}"
            )
        if bool(((sequence_lens < 0) | (sequence_lens > steps)).any()):
            raise BadInputError(
                f"{self.op_type}: input sequence_lens must lie in [0, {steps}], received "
                f"{sequence_lens.tolist()}"
            )
        if bool((sequence_lens == steps).all()):
            return None
        return sequence_lens.to(torch.int64)

    def _activations(self, directions: int) -> list[list[Activation]]:
        """The activation functions of each direction, with alpha/beta and clip bound (made
        once per operator: they depend on its attributes alone)."""
        bound: dict[int, list[list[Activation]]]
        bound = self.__dict__.setdefault("_bound_activations", {})
        found = bound.get(directions)
        if found is None:
            found = bound[directions] = self._bind_activations(directions)
        return found

    def _bind_activations(self, directions: int) -> list[list[Activation]]:
        per = len(self.default_activations)
        names = list(self.attr("activations") or self.default_activations)
        if len(names) < per * directions:
            names = names[:per] if len(names) >= per else list(self.default_activations)
            names = names * directions
        alphas = list(self.attr("activation_alpha") or [])
        betas = list(self.attr("activation_beta") or [])
        clip = self.attr("clip")
        clip = None if clip is None else float(clip)
        bound: list[Activation] = []
        for k, name in enumerate(names[: per * directions]):
            entry = _ACTIVATIONS.get(str(name).lower())
            if entry is None:
                raise BadInputError(
                    f"{self.op_type}: unknown activation {name!r}; expected one of "
                    + ", ".join(sorted(_ACTIVATIONS))
                )
            fn, alpha, beta = entry
            if alpha is not None and alphas:
                alpha = float(alphas.pop(0))
            if beta is not None and betas:
                beta = float(betas.pop(0))
            bound.append(_bind(fn, alpha, beta, None if k % per in self.unclipped else clip))
        return [bound[d * per : (d + 1) * per] for d in range(directions)]

    def _run_direction(self, x, weights, init, acts, lengths, reverse: bool, product=None):
        """Run one direction; returns Y (steps, batch, hidden) and the final states.
        ``product(a, m)`` computes ``a @ m.T`` (by default, that)."""
        product = product or _matmul_t
        if has_symbols(x.shape[:1]):
            # A loop of symbolic length cannot be unrolled into one graph for every length.
            raise NotTraceableError("it steps through a sequence of symbolic length")
        w, r, b, p = weights
        rows = w.shape[0]
        projected = product(x, w)
        rb = None
        if b is not None:
            projected = projected + b[:rows]
            rb = b[rows:]
        states = list(init)
        ys: list[torch.Tensor] = [torch.empty(0)] * x.shape[0]  # host: each replaced below
        order = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
        for t in order:
            new = self.step(projected[t], states, r, rb, p, acts, product)
            if lengths is None:
                states = new
                ys[t] = new[0]
            else:
                live = (lengths > t).unsqueeze(1)
                states = [torch.where(live, n, s) for n, s in zip(new, states, strict=True)]
                ys[t] = torch.where(live, new[0], torch.zeros_like(new[0]))
        return torch.stack(ys, 0), states

    def step(self, projected, states, r, rb, p, acts, product) -> list[torch.Tensor]:
        """One time step: the new states (hidden first) from the projected input; recurrent
        products ``h @ R^T`` as ``product(h, R)``."""
        raise NotImplementedError

    # ---- export ---------------------------------------------------------------------------
    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        """Layout 1 is written as layout 0 between Transposes: ``layout`` exists only from
        opset 14 on, and ONNX Runtime runs only layout 0."""
        attrs = self.export_attrs(g)
        attrs.setdefault("hidden_size", int(self.inputs[2].shape[-1]))
        if not int(attrs.pop("layout", 0) or 0):
            g.add_node(self.op_type, inputs, outputs, **attrs)
            return
        ins = list(inputs)
        for k in (0, 5, 6):  # X, initial_h, initial_c: batch-major to sequence/direction-major
            if k < len(ins) and ins[k]:
                ins[k] = _transpose(g, ins[k], [1, 0, 2])
        raw = [g.fresh_name(f"{self.op_type.lower()}_seq_major") for _ in outputs]
        g.add_node(self.op_type, ins, raw, **attrs)
        g.add_node("Transpose", [raw[0]], [outputs[0]], perm=[2, 0, 1, 3])
        for name, out in zip(raw[1:], outputs[1:], strict=True):
            g.add_node("Transpose", [name], [out], perm=[1, 0, 2])


def _transpose(g: GraphBuilder, name: str, perm: list[int]) -> str:
    out = g.fresh_name(f"{name}_seq_major")
    g.add_node("Transpose", [name], [out], perm=perm)
    return out


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


def _matmul_t(a: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """``a @ m^T``."""
    return a @ m.T


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
