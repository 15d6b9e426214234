"""Prepacked convolution weights in graphs of symbolic sizes: an inductor post-grad pass.

On the CPU, inductor turns every convolution with a constant weight into oneDNN's
``mkldnn._convolution_pointwise`` and, when the input's sizes are static, reorders the weight
once, at compile time, into oneDNN's blocked layout. With symbolic sizes it leaves the weight
plain ("we need to pack weight in runtime"), and oneDNN reorders it at every call: measured on
ResNet-50 at batch 1, a symbolic graph took 1.49x onnxruntime's time where the per-shape graph
(packed weights) took about 1.1x.

This pass packs those weights anyway, for the sizes the graph is compiled at (the symbols'
hints), when only the batch is symbolic. The blocked layout oneDNN picks depends on the input's
shape through its choice of kernel, and the image size changes that choice: a YOLOv8-style
graph packed at 320x320 ran 480x640 at 2.5x onnxruntime's time, most of it in oneDNN's generic
reorder from the packed layout (ONEDNN_VERBOSE: 107 of 215 ms), against 1.36x with plain
weights. Another batch keeps the layout (ResNet-50: 2-3 %). So convolutions whose input height
or width is a symbol keep a plain weight. Results are the same either way (the same convolution
on the same numbers), which the tests check at several shapes.

oneDNN writes a convolution with a packed weight channels-last, whatever the layout of its
input; with a plain weight it follows the input. So only convolutions the graph already expects
to write channels-last (inductor's layout choice for CNNs) get a packed weight: packing one that
writes NCHW would hand the next kernel memory in a layout it does not expect. Nor do
convolutions of a one-channel input (an STFT as a convolution of the waveform): the graph's
answers with such a weight packed were wrong (by about the outputs' own size) whenever the
input was computed in the graph (a reflect pad before it), though the same call outside a
graph is right; one channel is the case where NCHW and channels-last strides describe the
same memory. The tests hold both cases.
"""

from __future__ import annotations

import torch
from torch.fx import Graph, GraphModule

from sonnx.symbolic_sizes import known_true

_POINTWISE = torch.ops.mkldnn._convolution_pointwise.default


def prepack_convolution_weights(graph: Graph) -> None:
    """Give every 2-D ``_convolution_pointwise`` of an input whose batch, and no other size,
    is a symbol and whose weight is a plain constant a weight reordered once into oneDNN's
    layout (the graph's module holds it)."""
    module = graph.owning_module
    if not isinstance(module, GraphModule):
        return
    packed: dict[tuple[str, tuple[int, ...]], torch.fx.Node] = {}
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not _POINTWISE:
            continue
        source, weight_node = node.args[0], node.args[1]
        if not isinstance(weight_node, torch.fx.Node) or weight_node.op != "get_attr":
            continue
        weight = getattr(module, weight_node.target, None)
        example = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
        if (
            not isinstance(weight, torch.Tensor)
            or weight.is_mkldnn
            or weight.dim() != 4
            or weight.dtype != torch.float32
            or example is None
            or isinstance(example.shape[0], int)
            or not all(isinstance(s, int) for s in example.shape[1:])
            or not _writes_channels_last(node)
            or known_true(example.shape[1] == 1)
        ):
            continue
        sizes = tuple(_hint(s) for s in example.shape)
        key = (weight_node.target, sizes)
        if key not in packed:
            padding, stride, dilation, groups = node.args[3:7]
            value = torch.ops.mkldnn._reorder_convolution_weight(
                weight, padding, stride, dilation, groups, list(sizes)
            )
            name = f"{weight_node.target}_packed_{len(packed)}"
            module.register_buffer(name, value)
            with graph.inserting_before(node):
                packed[key] = graph.get_attr(name)
            packed[key].meta.update(weight_node.meta)
        node.replace_input_with(weight_node, packed[key])
    erase_unused_constants(graph)


def erase_unused_constants(graph: Graph) -> None:
    """Drop the constants (``get_attr`` nodes) a rewrite left without readers."""
    for node in list(graph.nodes):
        if node.op == "get_attr" and not node.users:
            graph.erase_node(node)


def _writes_channels_last(node: torch.fx.Node) -> bool:
    """Whether the graph expects the convolution's output channels-last (or has one channel,
    where both layouts are the same memory)."""
    out = node.meta.get("val")
    if not isinstance(out, torch.Tensor) or out.dim() != 4:
        return False
    return known_true(out.stride(1) == 1) or known_true(out.size(1) == 1)


def _hint(size: int | torch.SymInt) -> int:
    """A size's value in the example the graph is compiled at."""
    if isinstance(size, int):
        return size
    hint = size.node.hint
    return int(hint) if hint is not None else 1
