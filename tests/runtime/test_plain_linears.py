"""Plain GEMMs for compiled graphs' linear layers (``sonnx.runtime.plain_linears``): inductor's
oneDNN linears with packed weights become ``addmm``/``mm`` on the plain weight, with the same
results, at every size of a symbolic graph."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import sonnx
from sonnx.runtime import compiled_graphs, plain_linears
from sonnx.tensor import to_numpy
from sonnx.testing import torch_models as tm

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="oneDNN linears are CPU-build only"
)


def _symbolic_batch(shape: tuple[int, ...]) -> torch.Tensor:
    """A fake tensor of ``shape`` whose first dimension is a symbol."""
    sizes = [DimDynamic.DYNAMIC] + [DimDynamic.STATIC] * (len(shape) - 1)
    return FakeTensorMode(shape_env=ShapeEnv()).from_tensor(
        torch.empty(shape), symbolic_context=StatelessSymbolicContext(dynamic_sizes=sizes)
    )


def _linear_graph(
    example: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, operation: str
) -> torch.fx.GraphModule:
    """``_linear_pointwise(x, packed weight, bias, operation)`` as inductor's freezing writes
    it, ``x``'s example ``example``."""
    module = torch.fx.GraphModule(nn.Module(), torch.fx.Graph())
    module.register_buffer("w", torch.ops.mkldnn._reorder_linear_weight(weight, 2))
    graph = module.graph
    x = graph.placeholder("x")
    x.meta["val"] = example
    b = None
    if bias is not None:
        module.register_buffer("b", bias)
        b = graph.get_attr("b")
        b.meta["val"] = example.fake_mode.from_tensor(bias)
    w = graph.get_attr("w")
    linear = graph.call_function(plain_linears._LINEAR, (x, w, b, operation, [], ""))
    linear.meta["val"] = example.new_empty(*example.shape[:-1], weight.shape[0])
    graph.output(linear)
    module.recompile()
    return module


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("shape", [(2, 12), (2, 5, 12)], ids=["rows", "batch-of-sequences"])
def test_a_packed_linear_becomes_a_plain_product_with_the_same_results(
    shape: tuple[int, ...], with_bias: bool
) -> None:
    torch.manual_seed(0)
    weight, bias = torch.randn(7, 12), torch.randn(7) if with_bias else None
    module = _linear_graph(_symbolic_batch(shape), weight, bias, "none")
    plain_linears.keep_linears_plain(module.graph)
    module.recompile()
    targets = {n.target for n in module.graph.nodes if n.op == "call_function"}
    assert plain_linears._LINEAR not in targets
    assert not any(getattr(module, n.target).is_mkldnn for n in module.graph.nodes
                   if n.op == "get_attr")  # fmt: skip
    for batch in (1, 3):
        x = torch.randn(batch, *shape[1:])
        expected = nn.functional.linear(x, weight, bias)
        torch.testing.assert_close(module(x), expected, rtol=1e-5, atol=1e-5)


def test_a_linear_with_a_fused_operation_stays_as_it_is() -> None:
    module = _linear_graph(_symbolic_batch((2, 12)), torch.randn(7, 12), None, "relu")
    plain_linears.keep_linears_plain(module.graph)
    targets = [n.target for n in module.graph.nodes if n.op == "call_function"]
    assert targets == [plain_linears._LINEAR]


class _Projections(nn.Module):
    """A token-wise projection of a sequence (MatMul by an initializer), a GELU, and a Gemm
    on the pooled features: the linear layers of a small encoder."""

    def __init__(self) -> None:
        super().__init__()
        self.project = nn.Linear(16, 32)
        self.classify = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = nn.functional.gelu(self.project(x))
        return self.classify(hidden.mean(dim=1))


def test_graph_mode_runs_linear_layers_as_plain_products_at_every_batch_and_length(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    replaced: list[int] = []

    def counting(graph: torch.fx.Graph) -> None:
        before = sum(n.target is plain_linears._LINEAR for n in graph.nodes)
        plain_linears.keep_linears_plain(graph)
        replaced.append(before - sum(n.target is plain_linears._LINEAR for n in graph.nodes))

    monkeypatch.setattr(compiled_graphs, "keep_linears_plain", counting)
    torch.manual_seed(0)
    axes = {"x": {0: "batch", 1: "length"}}
    model = tm.export(_Projections(), (torch.randn(2, 6, 16),), 17, ["x"], dynamic_axes=axes)
    graph, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    rng = np.random.default_rng(0)
    for shape in [(1, 6, 16), (2, 9, 16), (5, 3, 16)]:
        x = rng.standard_normal(shape).astype(np.float32)
        got, expected = to_numpy(graph.run([x])[0]), to_numpy(eager.run([x])[0])
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert graph.graph_runner.fallback is None
    assert graph.graph_runner.compile_count == 1
    assert replaced == [2]
