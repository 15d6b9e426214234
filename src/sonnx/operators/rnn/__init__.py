"""RNN, GRU and LSTM (``recurrent``) and com.microsoft DynamicQuantizeLSTM (``contrib_lstm``).
Their first versions are adapted in :mod:`sonnx.onnx.converters.rnn`.
"""

from sonnx.engine.operator import Operator
from sonnx.operators.rnn import contrib_lstm, recurrent

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    recurrent.RNN,
    recurrent.GRU,
    recurrent.LSTM,
    contrib_lstm.DynamicQuantizeLSTM,
)
