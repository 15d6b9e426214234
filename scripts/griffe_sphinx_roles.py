"""A griffe extension for the API reference: sonnx's docstrings cross-reference in Sphinx's
roles (``:class:`~sonnx.tensor.Tensor```, ``:func:`prepare```), which mkdocstrings would show
as written. Each role becomes inline code of the name as Sphinx shows it: the last part after a
leading ``~``, the whole target otherwise.

mkdocs.yml loads it (``extensions: [scripts/griffe_sphinx_roles.py]``).
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):`(~?)([^`]+)`")


def plain_roles(text: str) -> str:
    """``text`` with every Sphinx cross-reference role written as inline code."""

    def shown(match: re.Match[str]) -> str:
        target = match[2].rstrip("()")
        return f"`{target.rsplit('.', 1)[-1] if match[1] else target}`"

    return ROLE.sub(shown, text)


class SphinxRoles(Extension):
    """Rewrites the roles in every docstring griffe loads."""

    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain_roles(obj.docstring.value)
