"""What RNN, GRU and LSTM share: :class:`_Recurrent`, which handles directions, ``layout``,
``sequence_lens`` (a batch entry's state stops changing after its last step and its ``Y`` rows
are zero there), initial states, ``clip`` and the ``activations`` list, checks the inputs, steps
through the sequence and exports; the classes and their time steps are in
:mod:`sonnx.operators.rnn.recurrent`.

``activation_alpha`` / ``activation_beta`` are consumed in the order of the activations that use
them (LeakyRelu, Affine, …), as ONNX Runtime does; an activation with no value left takes its
ONNX operator's default.
"""

from __future__ import annotations

from collections.abc import Callable
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


def _matmul_t(a: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """``a @ m^T``."""
    return a @ m.T
