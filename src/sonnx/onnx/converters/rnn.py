"""Importer registrations for RNN, GRU and LSTM (see sonnx.operators.rnn.recurrent) and
com.microsoft DynamicQuantizeLSTM (sonnx.operators.rnn.contrib_lstm).

The first versions (RNN-1, GRU-1/3, LSTM-1) also had ``output_sequence``, which only said
whether the optional output Y is wanted; the node's outputs already say that, so the adapter
drops it and records the version-7 form. GRU-1's schema misspells its default direction
``"foward"``; it means forward.
"""

from __future__ import annotations

from typing import Any

from sonnx.onnx.registry import NodeInfo, bind_node, converter
from sonnx.operators.rnn.recurrent import GRU, LSTM, RNN
from sonnx.tensor import Tensor

_CLASSES = {"RNN": RNN, "GRU": GRU, "LSTM": LSTM}


@converter("RNN", 1)
@converter("GRU", 1, 3)
@converter("LSTM", 1)
def convert_output_sequence(
    node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]
) -> Any:
    attrs = {k: v for k, v in attrs.items() if k != "output_sequence"}
    if attrs.get("direction") == "foward":
        attrs["direction"] = "forward"
    return bind_node(_CLASSES[node.op_type](version=7, **attrs), node)(*inputs)
