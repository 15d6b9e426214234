"""If: runs one of its two branches, chosen by a condition read on the host."""

from __future__ import annotations

from typing import Any, ClassVar

from sonnx.operators.control.common import GraphValueOperator, host_bool, own

__all__ = ["If"]


class If(GraphValueOperator):
    """Runs ``then_branch`` when ``cond`` is true, else ``else_branch``; each output is a fresh
    tensor (an Identity) so that naming it in the outer scope never renames a tensor of the
    branch's scope. Only the taken branch runs, so only it gets gradients."""

    op_type = "If"
    since_versions: ClassVar[tuple[int, ...]] = (1, 11, 13, 16, 19, 21, 23, 24, 25)

    def run(self, inputs: list[Any]) -> list[Any]:
        """The taken branch's outputs.

        :param inputs: ``[cond]``, a one-element boolean tensor.
        :returns: the branch's outputs, each a fresh tensor.
        """
        cond = host_bool(inputs[0], False, f"{self.where()}: cond")
        taken = self.subgraph("then_branch" if cond else "else_branch")
        return [own(t) for t in taken.run([])]
