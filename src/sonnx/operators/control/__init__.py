"""Control flow and graph values: If, Loop, Scan, the sequence operators (SequenceConstruct,
SequenceEmpty, SequenceInsert, SequenceAt, SequenceErase, SequenceLength, ConcatFromSequence,
SplitToSequence, SequenceMap) and the optional operators (Optional, OptionalHasElement,
OptionalGetElement).

They run on graph values by calling other operators (see
:class:`~sonnx.operators.control.common.GraphValueOperator`); a graph attribute reaches them
as a :class:`~sonnx.engine.subgraphs.BoundSubgraph`, which the runtime implements.
"""

# ruff: noqa: F403, F405
from sonnx.engine.operator import Operator
from sonnx.operators.control.branch import *
from sonnx.operators.control.branch import __all__ as _branch_all
from sonnx.operators.control.common import *
from sonnx.operators.control.common import __all__ as _common_all
from sonnx.operators.control.loop import *
from sonnx.operators.control.loop import __all__ as _loop_all
from sonnx.operators.control.optional import *
from sonnx.operators.control.optional import __all__ as _optional_all
from sonnx.operators.control.scan import *
from sonnx.operators.control.scan import __all__ as _scan_all
from sonnx.operators.control.sequence import *
from sonnx.operators.control.sequence import __all__ as _sequence_all

__all__ = [
    *_branch_all,
    *_common_all,
    *_loop_all,
    *_optional_all,
    *_scan_all,
    *_sequence_all,
]

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    If,
    Loop,
    Scan,
    SequenceConstruct,
    SequenceEmpty,
    SequenceInsert,
    SequenceAt,
    SequenceErase,
    SequenceLength,
    ConcatFromSequence,
    SplitToSequence,
    SequenceMap,
    Optional,
    OptionalHasElement,
    OptionalGetElement,
)
