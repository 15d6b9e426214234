"""oneDNN convolutions in a compiled graph get an input whose strides say channels-last.

On the CPU, inductor runs every convolution as oneDNN's ``_convolution_pointwise`` and decides
the layout of its output when it compiles: channels-last, unless the input is contiguous. With a
packed weight (inductor packs it for static sizes, :mod:`~sonnx.runtime.conv_prepack` where only
the batch is a symbol) the kernel writes channels-last whatever its input, so that decision
holds. With a plain weight (an input height or width that is a symbol) the kernel decides at
each call: channels-last only where the input's or the weight's strides say so (torch's
``suggest_memory_format``).

An input inductor hands over as a view of a buffer computed in the graph gets a stride of 0
for each dimension of size 1. A transposed ``(N, T, C)`` tensor unsqueezed to ``(N, C, 1, T)``,
as sonnx runs a 1-D convolution (a 2-D one of height 1), became ``(C*T, 1, 0, C)``: the same
memory, but not channels-last to torch's test, so the kernel wrote NCHW where the graph read
channels-last. The results were eager's numbers in the wrong places, with no error: a speech
model's scores 10% off (Transpose -> Reshape -> Transpose -> ``Conv1d``, torch 2.13).

torch offers no hook for this, so while inductor compiles, the input view of a convolution
whose output it lays out channels-last gets, for each dimension of size 1, the stride a dense
tensor of the convolution's stride order has (what eager torch's ``unsqueeze`` gives): the
memory read is the same and the kernel's choice agrees with inductor's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sympy
import torch._inductor.ir as inductor_ir
import torch._inductor.mkldnn_ir as mkldnn_ir
from torch._inductor.virtualized import V
from torch._prims_common import make_channels_last_strides_for


@contextmanager
def channels_last_convolution_inputs() -> Iterator[None]:
    """While inductor compiles: a oneDNN convolution whose output inductor lays out
    channels-last gets its input view with channels-last strides for its dimensions of size 1
    (see the module docstring). Swapped process-wide, as the other patches of
    :mod:`sonnx.runtime.symbolic_graphs`."""
    prepare = mkldnn_ir._prepare_convolution_fusion_create

    def prepare_agreeing(*args: Any, **kwargs: Any) -> Any:
        inputs, constant_args, layout, order, other = prepare(*args, **kwargs)
        if _channels_last(layout):
            inputs[0] = _size_one_strides_in_order(inputs[0], order)
        return inputs, constant_args, layout, order, other

    mkldnn_ir._prepare_convolution_fusion_create = prepare_agreeing
    try:
        yield
    finally:
        mkldnn_ir._prepare_convolution_fusion_create = prepare


def _channels_last(layout: inductor_ir.Layout) -> bool:
    """Whether inductor lays the convolution's output out channels-last."""
    size = list(layout.size)
    return 3 <= len(size) <= 5 and list(layout.stride) == list(make_channels_last_strides_for(size))


def _size_one_strides_in_order(x: Any, order: Sequence[int]) -> Any:
    """``x``, or where it is a view with dimensions of size 1, the same view with their strides
    those of a dense tensor of stride order ``order`` (``order[d]``: the rank of dimension
    ``d``'s stride, 0 the smallest)."""
    view = x.data if isinstance(x, inductor_ir.TensorBox) else x
    if not isinstance(view, inductor_ir.ReinterpretView):
        return x
    layout = view.layout
    sizes, strides = list(layout.size), list(layout.stride)
    dense = sympy.S.One
    for dim in sorted(range(len(order)), key=order.__getitem__):
        if V.graph.sizevars.statically_known_equals(sizes[dim], 1):
            strides[dim] = dense
        dense = strides[dim] * sizes[dim]
    if strides == list(layout.stride):
        return x
    fixed = inductor_ir.FixedLayout(layout.device, layout.dtype, sizes, strides, layout.offset)
    return inductor_ir.TensorBox(inductor_ir.ReinterpretView(data=view.data, layout=fixed))
