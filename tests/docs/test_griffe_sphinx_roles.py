"""The API reference shows Sphinx roles in docstrings as Sphinx would: the name as inline code."""

from __future__ import annotations

from scripts.griffe_sphinx_roles import plain_roles


def test_roles_become_inline_code_of_the_shown_name() -> None:
    text = (
        "Runs :func:`prepare`, records :class:`~sonnx.runtime.imported_graph.ImportedGraph` "
        "(see :mod:`sonnx.runtime.graph_mode` and :meth:`~SingaRep.run()`)."
    )
    assert plain_roles(text) == (
        "Runs `prepare`, records `ImportedGraph` (see `sonnx.runtime.graph_mode` and `run`)."
    )


def test_text_without_roles_is_unchanged() -> None:
    text = "``last_layers=-1`` runs the whole model; see `Tensor`."
    assert plain_roles(text) == text
