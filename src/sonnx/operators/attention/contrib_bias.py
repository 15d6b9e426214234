"""com.microsoft RelativePositionBias: T5's bucketed relative position bias.

onnxruntime runs this operator on CUDA only; this follows its CUDA kernel and the transformer
optimizer that writes it (``onnx_model_t5.FusionRelativePositionBiasBlock``):

- ``bias_table`` is declared (num_buckets, num_heads) but holds its values head-major: the
  optimizer writes the transposed bytes of T5's (num_buckets, num_heads) embedding under the
  original dims, and the kernel reads element ``head * num_buckets + bucket``.
- The output is (1, num_heads, query_length, key_length) with query_length == key_length;
  key ``j`` of query ``i`` has relative position ``j - i``, bucketed as T5 does (exact below
  half the buckets, logarithmic up to ``max_distance``, future and past in separate halves
  when ``is_bidirectional``, the future clamped to 0 otherwise), the logarithm in float32.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from sonnx.engine.operator import OutputShape, host_ints
from sonnx.errors import BadInputError
from sonnx.operators.contrib import ContribOperator

__all__ = ["RelativePositionBias"]


def relative_position_buckets(
    length: int, num_buckets: int, max_distance: int, bidirectional: bool, device: torch.device
) -> torch.Tensor:
    """(length, length) bucket of each key position relative to each query position."""
    positions = torch.arange(length, device=device)
    relative = positions.reshape(1, -1) - positions.reshape(-1, 1)
    buckets = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative > 0).long() * num_buckets
        relative = relative.abs()
    else:
        relative = (-relative).clamp(min=0)
    max_exact = num_buckets // 2
    # logf(r / max_exact) / logf(max_distance / max_exact), each rounded to float32.
    ratio = relative.clamp(min=1).to(torch.float32) / max_exact
    denominator = float(np.log(np.float32(max_distance) / np.float32(max_exact)))
    scaled = torch.log(ratio) / np.float32(denominator) * (num_buckets - max_exact)
    large = (max_exact + scaled.to(torch.int64)).clamp(max=num_buckets - 1)
    return buckets + torch.where(relative < max_exact, relative, large)


class RelativePositionBias(ContribOperator):
    """com.microsoft RelativePositionBias (see the module docstring)."""

    op_type = "RelativePositionBias"
    since_versions = (1,)
    defaults: ClassVar[dict[str, Any]] = {"is_bidirectional": 0}
    output_shape = OutputShape.FROM_SHAPES
    # query_length and key_length are the output's sizes.
    shape_inputs = frozenset({1, 2})
    size_inputs = frozenset({1, 2})
    parameterising_inputs = frozenset({1, 2})

    def forward(
        self, bias_table: torch.Tensor, query_length: torch.Tensor, key_length: torch.Tensor
    ) -> torch.Tensor:
        (q_len,), (k_len,) = host_ints(query_length), host_ints(key_length)
        max_distance = self.attr("max_distance")
        if bias_table.dim() != 2 or q_len != k_len or not max_distance:
            raise BadInputError(
                f"{self.label()}: needs a 2-D bias_table (num_buckets, num_heads), equal "
                f"query_length and key_length and a max_distance; received table "
                f"{tuple(bias_table.shape)}, lengths {q_len} and {k_len}, max_distance "
                f"{max_distance}"
            )
        num_buckets, heads = bias_table.shape
        buckets = relative_position_buckets(
            q_len, num_buckets, int(max_distance), bool(self.attr("is_bidirectional")),
            bias_table.device,
        )  # fmt: skip
        head_major = bias_table.reshape(heads, num_buckets)
        return head_major[:, buckets].unsqueeze(0)
