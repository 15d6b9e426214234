"""com.microsoft QEmbedLayerNormalization: EmbedLayerNormalization over 8-bit tables.

``onnxruntime.quantization.quantize_dynamic`` writes it in place of an optimized BERT
encoder's EmbedLayerNormalization: the word, position and segment tables, gamma and beta are
int8/uint8 with one float scale and one zero point each. onnxruntime's CPU kernel dequantizes
every value it reads (``(q - zero_point) * scale`` in float32) and runs the float layer norm;
so does this class, through :class:`EmbedLayerNormalization`. The tables are integers: no
gradient reaches them (nor anything else: ids are integers too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from sonnx.engine.operator import TorchOutputs
from sonnx.errors import BadInputError
from sonnx.operators.normalization.contrib_skip import EmbedLayerNormalization
from sonnx.operators.quantize.contrib_qlinear import dequantize

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = ["QEmbedLayerNormalization"]


class QEmbedLayerNormalization(EmbedLayerNormalization):
    """Inputs: input_ids, segment_ids (optional), the quantized word, position and segment
    (optional) tables, gamma and beta, mask (optional), then their five scales and five zero
    points in the same order (the segment's optional). Outputs: layernorm_out and
    mask_index_out, as EmbedLayerNormalization's first two; positions are 0 .. S-1."""

    op_type = "QEmbedLayerNormalization"
    since_versions = (1,)
    # The scales and zero points parameterise the dequantization of the tables.
    parameterising_inputs = frozenset(range(8, 18))

    def forward(self, *xs: torch.Tensor | None) -> TorchOutputs:  # type: ignore[override]
        xs = tuple(xs) + (None,) * (18 - len(xs))
        input_ids, segment_ids, *tables = xs[:7]
        mask, scales, zero_points = xs[7], xs[8:13], xs[13:18]
        names = ["word_embedding", "position_embedding", "segment_embedding", "gamma", "beta"]
        self.require({f"{n}_quant": t for n, t in zip(names, tables, strict=True)
                      if n != "segment_embedding"})  # fmt: skip
        floats = []
        for name, table, scale, zero_point in zip(names, tables, scales, zero_points, strict=True):
            if table is None:
                floats.append(None)
                continue
            if scale is None or zero_point is None:
                raise BadInputError(
                    f"{self.label()}: input {name}_quant needs its {name}_scale and "
                    f"{name}_zero_point, received "
                    f"{'no scale' if scale is None else 'no zero point'}"
                )
            floats.append(dequantize(self, f"{name}_quant", table, scale, zero_point))
        word, position, segment, gamma, beta = floats
        return super().forward(input_ids, segment_ids, word, position, segment, gamma, beta, mask)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        """The node with both its outputs: onnxruntime's schema requires mask_index_out even
        where nothing reads it."""
        if len(outputs) < 2:
            outputs = [*outputs, g.fresh_name("mask_index_out")]
        super().export(g, inputs, outputs)
