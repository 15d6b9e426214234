"""ValueFlow under make_fx: shape arithmetic folds into constants, value-dependence is refused."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from sonnx.engine.tracing import NotTraceableError, ValueFlow, tracing, value_checks


def _trace(fn, *args: torch.Tensor):
    def traced(*xs: torch.Tensor):
        with tracing(), ValueFlow(list(xs)):
            return fn(*xs)

    return make_fx(traced)(*args)


def test_value_checks_are_off_only_while_tracing() -> None:
    assert value_checks()
    with tracing():
        assert not value_checks()
    assert value_checks()


def test_shape_arithmetic_runs_untraced_and_only_value_ops_are_recorded() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        shape = torch.tensor(x.shape)  # Shape
        rows = torch.index_select(shape, 0, torch.tensor([0]))  # Gather
        target = torch.cat([rows, torch.tensor([-1])])  # Concat
        return torch.relu(x.reshape(target.tolist()))  # Reshape reads its target on the host

    graph = _trace(fn, torch.randn(2, 3, 4))
    ops = {str(n.target) for n in graph.graph.nodes if n.op == "call_function"}
    assert not any(name.startswith(("aten.index_select", "aten.cat")) for name in ops), ops
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(graph(x), torch.relu(x.reshape(2, -1)))


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (lambda x: x.sum().item(), "reads a computed tensor on the host"),
        (lambda x: x.numpy(), "reads a computed tensor on the host"),
        (torch.nonzero, "output shape depends on tensor values"),
        (lambda x: x[x > 0], "output shape depends on tensor values"),
    ],
)
def test_value_dependence_is_refused(fn, message) -> None:
    with pytest.raises(NotTraceableError, match=message):
        _trace(fn, torch.randn(2, 3))


def test_deferred_checks_are_read_once_at_the_end_of_the_outermost_run() -> None:
    from sonnx.engine.tracing import defer_check, deferred_checks, defers_checks_on
    from sonnx.errors import BadInputError

    assert not defers_checks_on(torch.device("meta"))  # outside a run: checked at once
    with pytest.raises(BadInputError, match="Gather: index 7 out of range"), deferred_checks():
        assert defers_checks_on(torch.device("meta")) and not defers_checks_on(torch.device("cpu"))
        defer_check(torch.tensor(False), lambda: "never shown")
        with deferred_checks():  # a nested subgraph run leaves the reading to the outer one
            defer_check(torch.tensor(True), lambda: "Gather: index 7 out of range")
        reached_after_the_nested_run = True
    assert reached_after_the_nested_run
    with deferred_checks():  # all passed: nothing raised
        defer_check(torch.tensor(False), lambda: "fine")
    with deferred_checks():  # meta values have no contents: their checks are dropped
        defer_check(torch.ones((), dtype=torch.bool, device="meta"), lambda: "unreadable")


def test_random_draws_stay_in_the_graph_so_each_run_draws_afresh() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * (torch.rand(x.shape) >= 0.5)  # a dropout mask: no traced input

    graph = _trace(fn, torch.ones(64))
    masks = {tuple(graph(torch.ones(64)).tolist()) for _ in range(4)}
    assert len(masks) > 1, "the traced graph replays one draw"
