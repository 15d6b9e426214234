"""Plain GEMMs for the linear layers of compiled graphs: an inductor post-grad pass.

When it freezes a graph's weights, inductor turns every float matrix product with a constant
weight (``addmm``/``mm``: a Gemm, a MatMul by an initializer, sonnx's small 1-D convolutions)
into oneDNN's ``mkldnn._linear_pointwise`` with the weight reordered for oneDNN. Ahead of time
it has no other choice (MKL's own packed format cannot be saved in a library). oneDNN then
builds and looks up its primitive on every call, which costs more than these products'
arithmetic when they are small, and its kernels were no faster than MKL's GEMM when they are
large. Measured on this project's bench models, one thread, in-process A/B against
onnxruntime: the streaming VAD model 0.48 -> 0.34 ms at batch 1 and 0.66 -> 0.51 ms at batch 8
(six products); the int8 BERT-style encoder 20.5 -> 16.9 ms at sequence 16 batch 8 and
21.3 -> 17.1 ms at sequence 128 batch 1; the CNNs (one or two products) unchanged.

This pass turns each such float32 product back into ``addmm``/``mm`` on the plain weight
(``to_dense`` of the packed one: the same numbers), which inductor runs as ``at::addmm`` (MKL).
Eager mode computes these products the same way, so the graph's results stay closer to it.
It runs before inductor's post-grad fusions, so no product has an activation fused into it yet.
"""

from __future__ import annotations

import torch
from torch.fx import Graph, GraphModule, Node

from sonnx.runtime.conv_prepack import erase_unused_constants

_LINEAR = torch.ops.mkldnn._linear_pointwise.default
_aten = torch.ops.aten


def keep_linears_plain(graph: Graph) -> None:
    """Replace every float32 ``_linear_pointwise`` with no fused operation whose weight is a
    packed constant by the plain matrix product on the unpacked weight."""
    module = graph.owning_module
    if not isinstance(module, GraphModule):
        return
    plain: dict[str, Node] = {}
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not _LINEAR:
            continue
        source, weight_node, bias, operation = node.args[:4]
        if operation != "none" or not isinstance(weight_node, Node) or weight_node.op != "get_attr":
            continue
        packed = getattr(module, weight_node.target, None)
        example = source.meta.get("val") if isinstance(source, Node) else None
        if (
            not isinstance(packed, torch.Tensor)
            or not packed.is_mkldnn
            or packed.dtype != torch.float32
            or not isinstance(example, torch.Tensor)
        ):
            continue
        with graph.inserting_before(node):
            if weight_node.target not in plain:
                plain[weight_node.target] = _plain_weight(graph, module, weight_node, example)
            product = _product(graph, source, example, plain[weight_node.target], bias)
        product.meta.update(node.meta)
        node.replace_all_uses_with(product)
        graph.erase_node(node)
    erase_unused_constants(graph)


def _plain_weight(graph: Graph, module: GraphModule, packed: Node, example: torch.Tensor) -> Node:
    """A new constant holding the packed weight's plain transpose, ``(in, out)``. Its example
    has static sizes: a symbolic one would let the product's shape check add guards, and a
    graph traced at batch 1 would serve batch 1 only."""
    name = f"{packed.target}_plain"
    module.register_buffer(name, getattr(module, packed.target).to_dense().t().contiguous())
    node = graph.get_attr(name)
    node.meta["val"] = example.fake_mode.from_tensor(getattr(module, name), static_shapes=True)
    return node


def _product(
    graph: Graph, source: Node, example: torch.Tensor, weight: Node, bias: Node | None
) -> Node:
    """``source @ weight (+ bias)``; a source of more than two dimensions is multiplied as rows
    and given its leading dimensions back."""
    rows = source
    if example.dim() != 2:
        rows = graph.call_function(_aten.reshape.default, (source, [-1, example.shape[-1]]))
        rows.meta["val"] = example.reshape(-1, example.shape[-1])
    if bias is None:
        product = graph.call_function(_aten.mm.default, (rows, weight))
    else:
        product = graph.call_function(_aten.addmm.default, (bias, rows, weight))
    product.meta["val"] = _aten.mm.default(rows.meta["val"], weight.meta["val"])
    if example.dim() == 2:
        return product
    leading = [_size(graph, source, i, size) for i, size in enumerate(example.shape[:-1])]
    return graph.call_function(_aten.reshape.default, (product, [*leading, -1]))


def _size(graph: Graph, source: Node, dim: int, size: int | torch.SymInt) -> int | Node:
    """Dimension ``dim`` of ``source``: the number, or a node reading a symbolic one."""
    if isinstance(size, int):
        return size
    node = graph.call_function(_aten.sym_size.int, (source, dim))
    node.meta["val"] = size
    return node
