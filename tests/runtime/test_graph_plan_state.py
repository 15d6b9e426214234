"""Graph mode's plan as one immutable snapshot (:mod:`sonnx.runtime.graph_plan_state`): every
change is a new plan, the old one stays as a run holding it saw it. No graph is compiled here:
the plans are made from a prepared program's steps."""

from __future__ import annotations

import dataclasses

import pytest

import sonnx
from sonnx.runtime.graph_plan_state import Choice, GraphPlan
from sonnx.runtime.program import GraphProgram
from sonnx.runtime.segments import Segment
from tests.runtime.graph_mode_models import chain_with_a_tanh

VERSIONS = (1, 0)


@pytest.fixture(scope="module")
def program() -> GraphProgram:
    return sonnx.prepare(chain_with_a_tanh()).program


def _kinds(plan: GraphPlan) -> list[tuple[int, int] | int]:
    return [(p.start, p.stop) if isinstance(p, Segment) else p for p in plan.segments]


def test_a_split_then_a_failing_half_leave_the_first_plan_as_it_was(program) -> None:
    first = GraphPlan.first(program, {}, VERSIONS)
    assert _kinds(first) == [(0, 6)] and first.whole is not None
    halves = first.split(program, (0, 6), "inductor could not compile it: planted")
    assert _kinds(halves) == [(0, 3), (3, 6)] and halves.whole is None
    assert halves.splits == {3} and dict(halves.eager_steps) == {}
    # The second half fails too: its steps run eagerly, and the split before them goes.
    eager = halves.split(program, (3, 6), "inductor could not compile it: planted")
    assert _kinds(eager) == [(0, 3), 3, 4, 5]
    assert dict(eager.eager_steps) == dict.fromkeys(
        range(3, 6), "inductor could not compile it: planted"
    )
    assert eager.splits == frozenset()
    # A run holding an earlier snapshot still sees it whole.
    assert _kinds(first) == [(0, 6)] and _kinds(halves) == [(0, 3), (3, 6)]


def test_a_plan_cannot_be_changed_in_place(program) -> None:
    plan = GraphPlan.first(program, {2: "it draws random numbers (planted)"}, VERSIONS)
    with pytest.raises(TypeError):
        plan.eager_steps[3] = "another reason"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.splits = frozenset({1})  # type: ignore[misc]
    choice = Choice((), (0,))
    with pytest.raises(TypeError):
        choice.graphs[()] = None  # type: ignore[index]


def test_a_choice_is_kept_for_a_segment_the_plan_has_under_the_weights_it_was_made_for(
    program,
) -> None:
    plan = GraphPlan.first(program, {}, VERSIONS)
    choice = Choice((), (0,))
    chosen = plan.with_choice((0, 6), ("layouts",), choice, VERSIONS)
    assert (
        chosen.choice((0, 6), ("layouts",)) is choice and plan.choice((0, 6), ("layouts",)) is None
    )
    assert plan.with_choice((0, 3), ("layouts",), choice, VERSIONS) is plan  # no such segment
    assert plan.with_choice((0, 6), ("layouts",), choice, (2, 0)) is plan  # weights changed since
    # A changed weight empties the choices; a replan keeps those of the segments that stay.
    assert chosen.for_versions((2, 0)).choices == {}
    split = chosen.split(program, (0, 6), "planted")
    assert split.choices == {}
    kept = split.with_choice((0, 3), ("layouts",), choice, VERSIONS)
    dropped = kept.dropped(program, (3, 6), "its compiled graph raised: planted")
    assert dropped.choice((0, 3), ("layouts",)) is choice
    assert _kinds(dropped) == [(0, 3), 3, 4, 5]
