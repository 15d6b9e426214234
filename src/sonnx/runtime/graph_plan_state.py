"""Graph mode's plan as one immutable snapshot (:class:`GraphPlan`), swapped whole on a replan.

A :class:`~sonnx.runtime.graph_mode.GraphRunner` serves runs from many threads at once (a
server's workers share one rep). What it has decided so far (which steps run eagerly and why,
where segments were split, which segments spent the compile budget and which are not worth a
compile (:mod:`sonnx.runtime.segment_costs`), the segments themselves, the choice made for each
input signature and the graphs compiled for each segment) is one frozen :class:`GraphPlan`. A
run reads the runner's plan once and uses that snapshot from start to end; a change (a step
found not traceable, a split, a dropped graph, a spent budget, a segment timed cheap, a new
shape's choice, a changed weight) is a new plan made from the *current* one and swapped in
under the runner's lock, so no thread ever sees a plan half changed, and two changes made at
once are both kept. Compiling happens outside the lock: only the swap holds it. A plan shares
the segments that stay with the plan before it; what a compile learns about one
(``Segment.per_shape``: its steps trace only with fixed sizes) and a graph's ``checked`` flag
are facts about the steps and the graph, written once, not decisions of the plan.

:class:`~sonnx.runtime.array_runs.ArrayRuns` reads the plan the same way (the whole graph's
segment and its choices), never the runner's own fields.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from sonnx.runtime.compiled_graphs import CompiledGraph
from sonnx.runtime.graph_keys import RECENT_SIGNATURES, baked_values, signature
from sonnx.runtime.program import GraphProgram
from sonnx.runtime.segment_costs import CheapSegment
from sonnx.runtime.segments import RunPart, Segment, plan_segments, whole_graph

__all__ = ["Bounds", "Choice", "GraphPlan", "bounds_of"]

#: A segment's steps ``[start, stop)``: the key its choices and graphs are kept under.
Bounds = tuple[int, int]

_EMPTY: Mapping[Any, Any] = MappingProxyType({})


def _frozen(mapping: dict[Any, Any]) -> Mapping[Any, Any]:
    return MappingProxyType(mapping)


def bounds_of(segment: Segment) -> Bounds:
    """The steps ``segment`` computes, as the plan keys them.

    :param segment: a segment of a plan.
    :returns: ``(start, stop)``.
    """
    return segment.start, segment.stop


@dataclass(frozen=True)
class Choice:
    """What a segment does with inputs of one set of layouts: which inputs are baked in and
    which traced (by position), and the graph chosen for each tuple of baked values. A new
    graph makes a new choice (:meth:`with_graph`): one held by a run never changes under it."""

    baked: tuple[int, ...]
    traced: tuple[int, ...]
    graphs: Mapping[tuple[Any, ...], CompiledGraph] = field(default_factory=lambda: _EMPTY)

    def with_graph(self, key: tuple[Any, ...], graph: CompiledGraph) -> Choice:
        """This choice with ``graph`` chosen for the baked values ``key`` (past
        :data:`~sonnx.runtime.graph_keys.RECENT_SIGNATURES` values, the memo starts afresh).

        :param key: the baked inputs' values (:func:`~sonnx.runtime.graph_keys.baked_values`).
        :param graph: the graph serving them.
        :returns: the new choice.
        """
        graphs = {} if len(self.graphs) >= RECENT_SIGNATURES else dict(self.graphs)
        graphs[key] = graph
        return replace(self, graphs=_frozen(graphs))


@dataclass(frozen=True)
class GraphPlan:
    """One snapshot of a graph runner's decisions; every change makes a new one (see the
    module docstring). ``segments`` are the compiled segments and the indices of the steps
    run eagerly between them, in order; ``whole`` is the one segment computing every output
    when it is the only part, with the outputs' positions among its outputs."""

    #: Why the steps that run eagerly do, by step index.
    eager_steps: Mapping[int, str]
    #: Where segments inductor failed on were split (the first step of each second half).
    splits: frozenset[int]
    #: The halves of the splits made: one that fails too runs eagerly, unsplit.
    halves: frozenset[Bounds]
    #: The segments left eager because the compile budget was spent.
    over_budget: frozenset[Bounds]
    segments: tuple[Segment | int, ...]
    whole: tuple[Segment, tuple[int, ...]] | None
    #: The constants' identities and versions the choices were made under.
    versions: tuple[Any, ...]
    #: Each segment's choices, by its bounds and then its inputs' signature.
    choices: Mapping[Bounds, Mapping[tuple[Any, ...], Choice]]
    #: Each segment's compiled graphs, by its bounds and then the graphs' compiled key.
    graphs: Mapping[Bounds, Mapping[tuple[Any, ...], tuple[CompiledGraph, ...]]]
    #: The segments found cheap eagerly, not worth a compile (see
    #: :mod:`sonnx.runtime.segment_costs`), by their bounds.
    cheap: Mapping[Bounds, CheapSegment] = field(default_factory=lambda: _EMPTY)

    @classmethod
    def first(
        cls, program: GraphProgram, eager_steps: dict[int, str], versions: tuple[Any, ...]
    ) -> GraphPlan:
        """The plan before any run: segments between ``eager_steps``, nothing compiled.

        :param program: the steps planned.
        :param eager_steps: the steps known to run eagerly, with why.
        :param versions: the constants' identities and versions now.
        :returns: the plan.
        """
        empty = cls(
            _frozen({}), frozenset(), frozenset(), frozenset(), (), None, versions, _EMPTY, _EMPTY
        )
        return empty._planned(program, dict(eager_steps), frozenset(), frozenset())

    def _planned(
        self,
        program: GraphProgram,
        eager_steps: dict[int, str],
        splits: frozenset[int],
        halves: frozenset[Bounds],
    ) -> GraphPlan:
        """This plan with its segments planned anew; the segments that stay keep their
        choices and graphs (and their objects: what was learnt compiling them)."""
        before = {bounds_of(s): s for s in self.segments if isinstance(s, Segment)}
        parts = [
            before.get(bounds_of(p), p) if isinstance(p, Segment) else p
            for p in plan_segments(program, set(eager_steps), set(splits))
        ]
        kept = {bounds_of(p) for p in parts if isinstance(p, Segment)}
        whole = whole_graph(parts, program.output_names)
        return replace(
            self,
            eager_steps=_frozen(eager_steps),
            splits=splits,
            halves=halves,
            segments=tuple(parts),
            whole=None if whole is None else (whole[0], tuple(whole[1])),
            choices=_frozen({b: c for b, c in self.choices.items() if b in kept}),
            graphs=_frozen({b: g for b, g in self.graphs.items() if b in kept}),
            cheap=_frozen({b: c for b, c in self.cheap.items() if b in kept}),
        )

    def with_eager(self, program: GraphProgram, indices: range, reason: str) -> GraphPlan:
        """Steps ``indices`` run eagerly from now on, for ``reason``.

        :param program: the steps planned.
        :param indices: the steps.
        :param reason: why they run eagerly.
        :returns: the new plan.
        """
        eager = {**self.eager_steps, **dict.fromkeys(indices, reason)}
        return self._planned(program, eager, self.splits, self.halves)

    def split(self, program: GraphProgram, bounds: Bounds, reason: str) -> GraphPlan:
        """After inductor failed on the segment ``bounds``: it is split in halves, each to
        be compiled on its own; a half that fails too (or a one-step segment) runs eagerly,
        for ``reason``, and the split's other halves go (the steps before and after the eager
        ones are segments again).

        :param program: the steps planned.
        :param bounds: the segment inductor failed on.
        :param reason: why its steps run eagerly, if they do.
        :returns: the new plan; its ``eager_steps`` say whether the segment's steps went eager.
        """
        start, stop = bounds
        if stop - start > 1 and bounds not in self.halves:
            middle = (start + stop) // 2
            halves = self.halves | {(start, middle), (middle, stop)}
            return self._planned(program, dict(self.eager_steps), self.splits | {middle}, halves)
        others = [i for i in self.eager_steps if not start <= i < stop]
        before = max((i for i in others if i < start), default=-1)
        after = min((i for i in others if i >= stop), default=len(program.steps))
        splits = frozenset(i for i in self.splits if not before < i <= after)
        eager = {**self.eager_steps, **dict.fromkeys(range(start, stop), reason)}
        return self._planned(program, eager, splits, self.halves)

    def dropped(self, program: GraphProgram, bounds: Bounds, reason: str) -> GraphPlan:
        """The segment ``bounds``'s graphs and choices go; its steps run eagerly, for
        ``reason``.

        :param program: the steps planned.
        :param bounds: the segment whose graphs are wrong.
        :param reason: why.
        :returns: the new plan.
        """
        plan = replace(
            self,
            choices=_frozen({b: c for b, c in self.choices.items() if b != bounds}),
            graphs=_frozen({b: g for b, g in self.graphs.items() if b != bounds}),
        )
        return plan.with_eager(program, range(*bounds), reason)

    def with_over_budget(self, bounds: Bounds) -> GraphPlan:
        """The segment ``bounds`` runs eagerly: the compile budget is spent.

        :param bounds: the segment.
        :returns: the new plan.
        """
        return replace(self, over_budget=self.over_budget | {bounds})

    def with_cheap(self, bounds: Bounds, cheap: CheapSegment) -> GraphPlan:
        """The segment ``bounds`` runs eagerly for inputs ``cheap`` covers: a compile would
        not pay.

        :param bounds: the segment.
        :param cheap: its eager time and the inputs' size it was measured at.
        :returns: the new plan (this one, if the plan no longer has that segment).
        """
        if not self._has(bounds):
            return self
        return replace(self, cheap=_frozen({**self.cheap, bounds: cheap}))

    def with_choice(
        self, bounds: Bounds, layouts: tuple[Any, ...], choice: Choice, versions: tuple[Any, ...]
    ) -> GraphPlan:
        """The segment ``bounds`` remembers ``choice`` for inputs of ``layouts``, if this plan
        still has that segment and was made under the same weight ``versions`` (a choice made
        for weights since changed is not kept).

        :param bounds: the segment.
        :param layouts: its inputs' signature (:func:`~sonnx.runtime.graph_keys.signature`).
        :param choice: the choice made.
        :param versions: the weight versions it was made under.
        :returns: the new plan (this one, if the choice is not kept).
        """
        if versions != self.versions or not self._has(bounds):
            return self
        known = self.choices.get(bounds, _EMPTY)
        mine = {} if len(known) >= RECENT_SIGNATURES and layouts not in known else dict(known)
        mine[layouts] = choice
        return replace(self, choices=_frozen({**self.choices, bounds: _frozen(mine)}))

    def with_graph(self, bounds: Bounds, key: tuple[Any, ...], graph: CompiledGraph) -> GraphPlan:
        """The segment ``bounds`` keeps ``graph`` among its graphs of compiled ``key``; those
        of other weight versions go.

        :param bounds: the segment.
        :param key: the graph's compiled key (:func:`~sonnx.runtime.graph_keys.compiled_key`).
        :param graph: the graph compiled or loaded.
        :returns: the new plan (this one, if the plan no longer has that segment).
        """
        if not self._has(bounds):
            return self
        mine = dict(self.graphs.get(bounds, _EMPTY))
        same = [g for g in mine.get(key, ()) if g.versions == graph.versions]
        mine[key] = (*same, graph)
        return replace(self, graphs=_frozen({**self.graphs, bounds: _frozen(mine)}))

    def for_versions(self, versions: tuple[Any, ...]) -> GraphPlan:
        """This plan under other weight versions: the choices made under the old go (the
        graphs stay; each is chosen again only if it froze in the current versions).

        :param versions: the constants' identities and versions now.
        :returns: the new plan.
        """
        return replace(self, versions=versions, choices=_EMPTY)

    def choice(self, bounds: Bounds, layouts: tuple[Any, ...]) -> Choice | None:
        """The choice the segment ``bounds`` made for inputs of ``layouts``, if any.

        :param bounds: the segment.
        :param layouts: its inputs' signature.
        :returns: the choice, or None.
        """
        return self.choices.get(bounds, _EMPTY).get(layouts)

    def chosen_graph(
        self, segment: Segment, datas: list[Any]
    ) -> tuple[Choice, CompiledGraph] | None:
        """The choice ``segment`` made for inputs of the layouts of ``datas``, and the graph it
        chose for their baked values; None if it made none.

        :param segment: a segment of this plan.
        :param datas: its inputs' values.
        :returns: the choice and its graph, or None.
        """
        choice = self.choice(bounds_of(segment), signature(datas))
        entry = None if choice is None else choice.graphs.get(baked_values(datas, choice.baked))
        return None if entry is None else (choice, entry)

    def graphs_of(self, bounds: Bounds, key: tuple[Any, ...]) -> tuple[CompiledGraph, ...]:
        """The segment ``bounds``'s graphs compiled for ``key``.

        :param bounds: the segment.
        :param key: the compiled key.
        :returns: the graphs, oldest first.
        """
        return self.graphs.get(bounds, _EMPTY).get(key, ())

    def all_graphs(self) -> Iterator[CompiledGraph]:
        """Every graph of this plan's segments.

        :returns: an iterator over them.
        """
        for bounds in self.graphs:
            yield from self.all_graphs_of(bounds)

    def all_graphs_of(self, bounds: Bounds) -> Iterator[CompiledGraph]:
        """Every graph of the segment ``bounds``.

        :param bounds: the segment.
        :returns: an iterator over its graphs.
        """
        for graphs in self.graphs.get(bounds, _EMPTY).values():
            yield from graphs

    def compiled_of_planned(self) -> tuple[int, int]:
        """How many segments have a compiled graph, of those planned to have one (not eager by
        design, not found cheap eagerly): the compile's progress.

        :returns: (compiled, planned).
        """
        planned = [
            bounds_of(s)
            for s in self.segments
            if isinstance(s, Segment) and not s.runs_eagerly and bounds_of(s) not in self.cheap
        ]
        done = sum(1 for b in planned if any(self.graphs.get(b, _EMPTY).values()))
        return done, len(planned)

    def parts(self, names: list[str], over_budget: str) -> list[RunPart]:
        """What a run of this plan does, part by part: each compiled segment and each step
        run eagerly (the steps of one dropped segment as one part).

        :param names: the steps' node names.
        :param over_budget: why a segment left eager by the spent budget is (the budget's
            description).
        :returns: the parts, in the order they run.
        """
        found: list[RunPart] = []
        for part in self.segments:
            if isinstance(part, int):
                why = self.eager_steps[part]
                last = found[-1] if found else None
                if last is not None and last.why_eager == why and last.steps.stop == part:
                    steps = range(last.steps.start, part + 1)
                    found[-1] = RunPart(steps, (*last.nodes, names[part]), False, why)
                else:
                    found.append(RunPart(range(part, part + 1), (names[part],), False, why))
                continue
            bounds = bounds_of(part)
            steps = range(*bounds)
            compiled = any(self.graphs.get(bounds, _EMPTY).values())
            why = part.runs_eagerly
            if bounds in self.over_budget:
                why = over_budget
            elif not compiled and bounds in self.cheap:
                why = self.cheap[bounds].reason
            elif not compiled and why is None:
                chosen = self.choices.get(bounds, _EMPTY).values()
                constant = any(not c.traced for c in chosen)
                why = "it reads only constants and shape values" if constant else "not run yet"
            found.append(RunPart(steps, tuple(names[i] for i in steps), compiled, why))
        return found

    def _has(self, bounds: Bounds) -> bool:
        return any(isinstance(s, Segment) and bounds_of(s) == bounds for s in self.segments)
