"""com.microsoft DynamicQuantizeLSTM: the LSTM ``quantize_dynamic`` writes, with 8-bit weights.

The node is ONNX's LSTM but for its weights: W ``[num_directions, input_size, 4*hidden_size]``
and R ``[num_directions, hidden_size, 4*hidden_size]`` are int8 or uint8 codes, transposed
relative to LSTM's, with a scale and zero point per direction (``[num_directions]``) or per gate
row (``[num_directions, 4*hidden_size]``) in inputs 8-11. onnxruntime's CPU kernel (its
``DynamicQuantizeLSTM`` over ``UniDirectionalLstm``) runs every product as a uint8 x 8-bit
integer GEMM: the left operand is quantized to uint8 from its own range (widened to hold 0, as
DynamicQuantizeLinear does), once for the input projection of all steps and once per time step
for the hidden state, and the int32 sum is scaled by ``a_scale * w_scale``.

sonnx runs the same recurrence as :class:`~sonnx.operators.rnn.recurrent.LSTM` (its time step,
directions, ``sequence_lens``, clip and activations), on the dequantized float32 weights, with
each product's left operand rounded to onnxruntime's uint8 steps first. The rounding and the
values each range covers are the same, ``sequence_lens`` included; what is left is float
rounding (the scaled float products against onnxruntime's exact int32 sums, torch's sigmoid
and tanh against MLAS's approximations), under 1e-6 on the tested cases, unless such a
difference moves a value across a rounding boundary (one uint8 step of that range). Two
differences remain: onnxruntime splits the batch between threads for the hidden state's
product when it has several (more than 4 rows, or 2 or more of at most 256 units), quantizing
each part from its own range, so its results move by about 1e-3 with its thread count (sonnx
equals its one-thread results); and where Y is not an output, onnxruntime keeps an ended
entry's last state in later steps' ranges (sonnx leaves it out, as onnxruntime does when Y is
an output).

Gradients reach X, B, the initial states and the peepholes through the dequantized weights,
straight through the rounding (a step function), as :func:`int8_blocks` does for MatMulNBits;
the integer weights are frozen.

That path costs Python time at every step (some 35x onnxruntime's time for one node). On the
CPU in float32, without a gradient to keep and with its weights the program's constants, the
node runs onnxruntime's own kernel instead (:mod:`sonnx.operators.quantize.ort_lstm`), equal to
onnxruntime at the same thread count; ``prepare(..., kernels="torch")`` keeps the torch path,
and a node onnxruntime refuses falls back to it with one warning.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from sonnx.dtypes import dtype_name
from sonnx.engine.tracing import value_checks
from sonnx.errors import BadInputError
from sonnx.operators.contrib import ContribOperator
from sonnx.operators.quantize.contrib_nbits import KeptWeight
from sonnx.operators.quantize.linear import uint8_range
from sonnx.operators.quantize.ort_kernels import KernelChoice
from sonnx.operators.quantize.ort_lstm import lstm_spec
from sonnx.operators.rnn.base import _Recurrent
from sonnx.operators.rnn.recurrent import LSTM
from sonnx.proto.graph_builder import GraphBuilder

__all__ = ["DynamicQuantizeLSTM"]

_BYTES = (torch.int8, torch.uint8)


def rounded_to_uint8(a: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
    """``a`` rounded to the uint8 steps of ``seen``'s range (DynamicQuantizeLinear's scale and
    zero point), as float values: ``(code - zero_point) * scale``. The gradient passes straight
    through the rounding.

    :param a: the float32 values to round.
    :param seen: the values whose range sets the steps (``a`` itself, or its first rows).
    :returns: the rounded values, shaped as ``a``.
    """
    scale, zero_point = uint8_range(seen.detach())
    codes = (torch.round(a.detach() / scale) + zero_point).clamp_(0.0, 255.0)
    stepped = (codes - zero_point).mul_(scale)
    return a + (stepped - a).detach() if a.requires_grad else stepped


class _Uint8Product:
    """``a @ m^T`` with ``a`` rounded to uint8 steps first, each from the range onnxruntime's
    kernel quantizes: a 3-D ``a`` (the input projection of every step) from its first
    ``steps`` steps (up to the longest of ``sequence_lens``), the k-th 2-D ``a`` (the hidden
    state at step k, the steps taken in order) without the rows of entries that ended before
    step k - 1 (onnxruntime reads the previous step's Y, zero there)."""

    def __init__(self, steps: int, lengths: torch.Tensor | None) -> None:
        self.steps = steps
        self.lengths = lengths
        self._step = 0

    def __call__(self, a: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        if a.dim() == 3:
            seen = a[: self.steps]
        else:
            step, self._step = self._step, self._step + 1
            seen = a
            if self.lengths is not None and step > 0:
                seen = torch.where((self.lengths >= step).unsqueeze(1), a, torch.zeros_like(a))
        return rounded_to_uint8(a, seen) @ m.T


def _reversed_within(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Each entry's first ``length`` steps in reverse order, the padding after them in place
    (onnxruntime's ReverseSequence); its own inverse."""
    t = torch.arange(x.shape[0], device=x.device).unsqueeze(1)
    order = torch.where(t < lengths, lengths - 1 - t, t)
    return x.gather(0, order.unsqueeze(-1).expand_as(x))


class DynamicQuantizeLSTM(KernelChoice, ContribOperator, LSTM):
    """LSTM with 8-bit weights and dynamically quantized activations (onnxruntime's contrib
    operator). Inputs: X, W, R, B, sequence_lens, initial_h, initial_c, P as LSTM's (W and R
    int8/uint8 and transposed: ``[num_directions, input_size | hidden_size, 4*hidden_size]``),
    then W_scale, W_zero_point, R_scale, R_zero_point (``[num_directions]`` or
    ``[num_directions, 4*hidden_size]``; zero points of the weights' type). Outputs Y, Y_h,
    Y_c. No ``layout`` attribute: X is ``[seq_length, batch_size, input_size]``."""

    op_type = "DynamicQuantizeLSTM"
    since_versions = (1,)
    # The scales and zero points parameterise; W and R are integers (frozen), B and P train.
    parameterising_inputs = frozenset({8, 9, 10, 11})
    defaults: ClassVar[dict[str, Any]] = {"direction": "forward", "input_forget": 0}

    def __init__(self, version: int | None = None, **attrs: Any) -> None:
        super().__init__(version, **attrs)
        self._w = KeptWeight()
        self._r = KeptWeight()

    def forward(  # type: ignore[override]
        self,
        x: torch.Tensor,
        w: torch.Tensor,
        r: torch.Tensor,
        b: torch.Tensor | None = None,
        sequence_lens: torch.Tensor | None = None,
        initial_h: torch.Tensor | None = None,
        initial_c: torch.Tensor | None = None,
        p: torch.Tensor | None = None,
        w_scale: torch.Tensor | None = None,
        w_zero_point: torch.Tensor | None = None,
        r_scale: torch.Tensor | None = None,
        r_zero_point: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        self.require(
            {
                "W_scale": w_scale,
                "W_zero_point": w_zero_point,
                "R_scale": r_scale,
                "R_zero_point": r_zero_point,
            }
        )
        if x.dtype != torch.float32 or x.dim() != 3:
            raise BadInputError(
                f"{self.label()}: input X must be float32 [seq_length, batch_size, "
                f"input_size], received {dtype_name(x.dtype)} {tuple(x.shape)}"
            )
        directions = self._num_directions()
        hidden = r.shape[1] if r.dim() == 3 else -1
        self._check_codes("R", r, (directions, hidden, 4 * hidden))
        self._check_codes("W", w, (directions, x.shape[2], 4 * hidden))
        scales = (w_scale, w_zero_point, r_scale, r_zero_point)
        for name, (codes, scale, zero_point) in (("W", (w, *scales[:2])), ("R", (r, *scales[2:]))):
            self._check_scales(name, codes, scale, zero_point)
        states = (sequence_lens, initial_h, initial_c)
        bridged = self._onnxruntime((x, w, r, b, *states, p, *scales))
        if bridged is not None:
            return bridged
        weights = []
        for codes, scale, zero_point, kept in (
            (w, w_scale, w_zero_point, self._w),
            (r, r_scale, r_zero_point, self._r),
        ):
            weights.append(
                kept.get((codes, scale, zero_point), _dequantizer(codes, scale, zero_point))
            )
        return super().forward(x, *weights, b, sequence_lens, initial_h, initial_c, p)

    def _onnxruntime(self, inputs: tuple[torch.Tensor | None, ...]) -> tuple | None:
        """Y, Y_h and Y_c by onnxruntime's kernel, or None where the torch path runs (and sets
        ``kernel_used``). The inputs the torch path would check are checked first, so a bad
        input raises the same typed error on either path."""
        x, w, r, b, sequence_lens, initial_h, initial_c, p = inputs[:8]
        (steps, batch, width), (directions, hidden, _) = x.shape, r.shape
        y = None
        if steps and batch:
            self._check_weights(w.transpose(1, 2), r.transpose(1, 2), b, directions, hidden, width)
            for name, state in (("initial_h", initial_h), ("initial_c", initial_c)):
                self._check_shape(name, state, (directions, batch, hidden))
            self._check_shape("P", p, (directions, 3 * hidden))
            if value_checks():  # the lengths' values: not readable while graph mode traces
                self._lengths(sequence_lens, steps, batch)
            attrs = {**self.attrs, "direction": self.attr("direction"), "hidden_size": hidden}
            y = self.onnxruntime_outputs(lstm_spec(attrs), inputs)
        self.kernel_used = f"onnxruntime's {self.op_type}" if y is not None else "torch's"
        return y

    def _run_direction(self, x, weights, init, acts, lengths, reverse: bool):
        """The generic recurrence with every product rounding its left operand (never LSTM's
        path through torch's fused layer, whose products are float)."""
        if lengths is None:
            product = _Uint8Product(x.shape[0], None)
            return _Recurrent._run_direction(self, x, weights, init, acts, None, reverse, product)
        # As onnxruntime groups them: each step quantizes the hidden states of every entry at
        # the same distance from its start, so a reverse direction runs forward over each
        # entry reversed within its length.
        product = _Uint8Product(int(lengths.max()), lengths)
        x = _reversed_within(x, lengths) if reverse else x
        run = _Recurrent._run_direction
        y, states = run(self, x, weights, init, acts, lengths, False, product)
        return (_reversed_within(y, lengths) if reverse else y), states

    # ---- checks ---------------------------------------------------------------------------
    def _check_codes(self, name: str, codes: torch.Tensor, shape: tuple[int, ...]) -> None:
        if codes.dtype not in _BYTES or tuple(codes.shape) != shape:
            raise BadInputError(
                f"{self.label()}: input {name} must be int8 or uint8 of shape {shape} "
                "([num_directions, input_size or hidden_size, 4*hidden_size]), received "
                f"{dtype_name(codes.dtype)} {tuple(codes.shape)}"
            )

    def _check_scales(
        self, name: str, codes: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor
    ) -> None:
        """A scale per direction or per gate row, float32; zero points alike, of the codes'
        type, and (as onnxruntime's kernel requires of per-row ones) zero for int8 codes and
        all equal for uint8 codes."""
        directions, rows = codes.shape[0], codes.shape[2]
        if scale.dtype != torch.float32 or tuple(scale.shape) not in (
            (directions,),
            (directions, rows),
        ):
            raise BadInputError(
                f"{self.label()}: input {name}_scale must be float32 of shape ({directions},) or "
                f"({directions}, {rows}), received {dtype_name(scale.dtype)} {tuple(scale.shape)}"
            )
        if zero_point.dtype != codes.dtype or zero_point.shape != scale.shape:
            raise BadInputError(
                f"{self.label()}: input {name}_zero_point must be {dtype_name(codes.dtype)} (as "
                f"{name}) of {name}_scale's shape {tuple(scale.shape)}, received "
                f"{dtype_name(zero_point.dtype)} {tuple(zero_point.shape)}"
            )
        if zero_point.dim() == 2 and value_checks():
            expected = 0 if codes.dtype == torch.int8 else zero_point.reshape(-1)[0]
            if bool((zero_point != expected).any()):
                raise BadInputError(
                    f"{self.label()}: per-row input {name}_zero_point must be "
                    + ("all 0 for int8 codes" if codes.dtype == torch.int8 else "one value")
                    + f" (onnxruntime's kernel reads one), received {zero_point.unique().tolist()}"
                )

    # ---- export ---------------------------------------------------------------------------
    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        """One node with the attributes set; hidden_size from R (``[.., hidden, 4*hidden]``)."""
        attrs = self.export_attrs(g)
        attrs.setdefault("hidden_size", int(self.inputs[2].shape[1]))
        g.add_node(self.op_type, inputs, outputs, domain=self.domain, **attrs)


def _dequantizer(codes: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor):
    """A function computing the float32 weight in LSTM's layout, ``[num_directions,
    4*hidden_size, input_size | hidden_size]``, from the transposed codes."""

    def dequantize() -> torch.Tensor:
        # [directions] or [directions, rows] broadcast over [directions, columns, rows]
        s = scale.reshape(scale.shape[0], 1, -1)
        z = zero_point.reshape(zero_point.shape[0], 1, -1).float()
        return ((codes.float() - z) * s).transpose(1, 2)

    return dequantize
