"""Recurrent transformer operators of opset 27: LinearAttention and CausalConvWithState.

LinearAttention runs its recurrence token by token, exactly as the ONNX definition states it
(float32 state or wider, per-step decay and delta correction), with torch ops so that it is
differentiable. CausalConvWithState is a depthwise ``F.conv1d`` over the carried state
concatenated with the input.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from sonnx.engine.operator import Operator, OutputShape
from sonnx.engine.singa_functions import (
    Input,
    Keyword,
    SingaFunction,
)
from sonnx.errors import BadInputError
from sonnx.tensor import Tensor

__all__ = ["CausalConvWithState", "LinearAttention", "causal_conv_with_state", "linear_attention"]

_UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")


def _at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """The reference keeps the state in float32 for every input type; float64 stays float64."""
    return x if x.dtype == torch.float64 else x.float()


def _heads(x: torch.Tensor, heads: int, name: str) -> torch.Tensor:
    """(B, T, H*D) -> (B, H, T, D), in at least float32."""
    if x.dim() != 3 or x.shape[2] % heads:
        raise BadInputError(
            f"LinearAttention: input {name} must be 3-D (B, T, {heads} * D), received shape "
            f"{tuple(x.shape)}"
        )
    b, t, hd = x.shape
    return _at_least_float32(x.reshape(b, t, heads, hd // heads).transpose(1, 2))


class LinearAttention(Operator):
    """ONNX LinearAttention (27): linear / gated / delta / gated-delta recurrent attention.

    Inputs ``(query, key, value, past_state, decay, beta)``; outputs ``(output, present_state)``
    with the state (B, H_kv, d_k, d_v).
    """

    op_type = "LinearAttention"
    since_versions = (27,)
    output_shape = OutputShape.FROM_SHAPES

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        past_state: torch.Tensor | None = None,
        decay: torch.Tensor | None = None,
        beta: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        rule = self.attr("update_rule")
        q_heads, kv_heads = self.attr("q_num_heads"), self.attr("kv_num_heads")
        if rule not in _UPDATE_RULES:
            raise BadInputError(
                f"LinearAttention: update_rule must be one of {', '.join(_UPDATE_RULES)}, "
                f"received {rule!r}"
            )
        if not q_heads or not kv_heads or q_heads % kv_heads:
            raise BadInputError(
                "LinearAttention: q_num_heads must be a positive multiple of kv_num_heads, "
                f"received {q_heads} and {kv_heads}"
            )
        gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
        if gated != (decay is not None) or delta != (beta is not None):

            def state(flag: bool) -> str:
                return "given" if flag else "absent"

            raise BadInputError(
                f"LinearAttention: update_rule {rule!r} needs decay {state(gated)} and beta "
                f"{state(delta)}, received decay {state(decay is not None)} and beta "
                f"{state(beta is not None)}"
            )
        q, k = _heads(query, q_heads, "query"), _heads(key, kv_heads, "key")
        v = _heads(value, kv_heads, "value")
        b, _, t, d_k = k.shape
        d_v = v.shape[3]
        if past_state is None:
            state = q.new_zeros((b, kv_heads, d_k, d_v))
            state_dtype = query.dtype
        elif tuple(past_state.shape) != (b, kv_heads, d_k, d_v):
            raise BadInputError(
                f"LinearAttention: past_state must have shape {(b, kv_heads, d_k, d_v)}, "
                f"received {tuple(past_state.shape)}"
            )
        else:
            state, state_dtype = _at_least_float32(past_state), past_state.dtype
        gates = None if decay is None else self._decay(decay, b, t, kv_heads, d_k)
        rates = (
            None if beta is None else _at_least_float32(beta.reshape(b, t, -1, 1).transpose(1, 2))
        )
        scale = self.attr("scale")
        scale = float(scale) if scale else 1 / math.sqrt(q.shape[3])
        group = q_heads // kv_heads
        outputs = []
        for i in range(t):
            k_t, v_t = k[:, :, i], v[:, :, i]
            if gates is not None:
                state = state * torch.exp(gates[:, :, i]).unsqueeze(-1)
            if rates is not None:
                retrieved = torch.einsum("bhdm,bhd->bhm", state, k_t)
                v_t = rates[:, :, i] * (v_t - retrieved)
            state = state + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)
            shared = state.repeat_interleave(group, 1) if group > 1 else state
            outputs.append(scale * torch.einsum("bhd,bhdm->bhm", q[:, :, i], shared))
        out = torch.stack(outputs, 2) if outputs else q.new_zeros((b, q_heads, 0, d_v))
        out = out.transpose(1, 2).reshape(b, t, q_heads * d_v).to(query.dtype)
        return out, state.to(state_dtype)

    @staticmethod
    def _decay(decay: torch.Tensor, b: int, t: int, heads: int, d_k: int) -> torch.Tensor:
        """Decay as (B, H, T, 1) per head or (B, H, T, d_k) per key feature."""
        if decay.dim() != 3 or decay.shape[2] not in (heads, heads * d_k):
            raise BadInputError(
                f"LinearAttention: decay must be (B, T, {heads}) or (B, T, {heads * d_k}), "
                f"received shape {tuple(decay.shape)}"
            )
        per = 1 if decay.shape[2] == heads else d_k
        return _at_least_float32(decay.reshape(b, t, heads, per).transpose(1, 2))


class CausalConvWithState(Operator):
    """ONNX CausalConvWithState (27): causal depthwise 1-D convolution with a carried state.

    Inputs ``(input (B, C, L), weight (C, 1, k), bias (C,), past_state (B, C, k - 1))``;
    outputs ``(output (B, C, L), present_state (B, C, k - 1))``.
    """

    op_type = "CausalConvWithState"
    since_versions = (27,)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "causal_conv_with_state",
            (
                "Causal depthwise 1-D convolution (ONNX CausalConvWithState): (output, "
                "present_state)."
            ),
            inputs=(
                Input("x", "the (B, C, L) input."),
                Input("weight", "the (C, 1, k) per-channel kernels."),
                Input("bias", "the (C,) bias, or None."),
                Input(
                    "past_state",
                    "the (B, C, k - 1) last inputs of the previous call, or None for zeros.",
                ),
            ),
            returns="``(output, present_state)``: (B, C, L) and (B, C, k - 1).",
            keywords=(
                Keyword(
                    "activation", '``"none"``, ``"silu"`` or ``"swish"``, applied to the output.'
                ),
            ),
            raises=(("BadInputError", "``activation`` is unknown or the shapes do not fit."),),
            result="tuple[Tensor, Tensor]",
        ),
    )

    def forward(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
        past_state: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        activation = self.attr("activation")
        if activation not in ("none", "silu", "swish"):
            raise BadInputError(
                "CausalConvWithState: activation must be none, silu or swish, received "
                f"{activation!r}"
            )
        if x.dim() != 3 or weight.dim() != 3 or tuple(weight.shape[:2]) != (x.shape[1], 1):
            raise BadInputError(
                "CausalConvWithState: input must be (B, C, L) and weight (C, 1, k), received "
                f"shapes {tuple(x.shape)} and {tuple(weight.shape)}"
            )
        batch, channels, _ = x.shape
        k = weight.shape[2]
        if past_state is None:
            past_state = x.new_zeros((batch, channels, k - 1))
        elif tuple(past_state.shape) != (batch, channels, k - 1):
            raise BadInputError(
                f"CausalConvWithState: past_state must have shape {(batch, channels, k - 1)}, "
                f"received {tuple(past_state.shape)}"
            )
        padded = torch.cat([past_state.to(x.dtype), x], 2)
        out = F.conv1d(padded, weight, bias, groups=channels)
        if activation != "none":
            out = F.silu(_at_least_float32(out)).to(x.dtype)
        return out, padded[:, :, padded.shape[2] - (k - 1) :]


def linear_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    q_num_heads: int,
    kv_num_heads: int,
    update_rule: str = "linear",
    past_state: Tensor | None = None,
    decay: Tensor | None = None,
    beta: Tensor | None = None,
    scale: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """Recurrent linear attention (ONNX LinearAttention): returns (output, present_state).

    :param query: the (B, T, q_num_heads * d_k) queries.
    :param key: the (B, T, kv_num_heads * d_k) keys.
    :param value: the (B, T, kv_num_heads * d_v) values.
    :param q_num_heads: the query heads, a multiple of ``kv_num_heads``.
    :param kv_num_heads: the key/value heads.
    :param update_rule: ``"linear"``, ``"gated"``, ``"delta"`` or ``"gated_delta"``.
    :param past_state: the (B, kv_num_heads, d_k, d_v) state carried in, or None for zeros.
    :param decay: the gates of the gated rules, (B, T, heads) or (B, T, heads * d_k); None
        otherwise.
    :param beta: the (B, T, heads) write strengths of the delta rules; None otherwise.
    :param scale: the factor on the queries; 0 for ``1 / sqrt(d_k)``.
    :returns: ``(output, present_state)``: (B, T, q_num_heads * d_v) and the new state.
    :raises BadInputError: ``update_rule`` is unknown, the head counts do not fit, ``decay`` or
        ``beta`` is given or missing against the rule, or a shape is wrong.
    """
    op = LinearAttention(
        q_num_heads=int(q_num_heads),
        kv_num_heads=int(kv_num_heads),
        update_rule=update_rule,
        scale=float(scale),
    )
    return op(query, key, value, past_state, decay, beta)


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def causal_conv_with_state(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    past_state: Tensor | None = None,
    activation: str = "none",
) -> tuple[Tensor, Tensor]:
    """Causal depthwise 1-D convolution (ONNX CausalConvWithState): (output, present_state).

    :param x: the (B, C, L) input.
    :param weight: the (C, 1, k) per-channel kernels.
    :param bias: the (C,) bias, or None.
    :param past_state: the (B, C, k - 1) last inputs of the previous call, or None for zeros.
    :param activation: ``"none"``, ``"silu"`` or ``"swish"``, applied to the output.
    :returns: ``(output, present_state)``: (B, C, L) and (B, C, k - 1).
    :raises BadInputError: ``activation`` is unknown or the shapes do not fit.
    """
    return CausalConvWithState(activation=activation)(x, weight, bias, past_state)
