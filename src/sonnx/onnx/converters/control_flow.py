"""Importer registrations for control flow: If, Loop and Scan (operators in
:mod:`sonnx.operators.control`).

Their graph attributes are compiled with the enclosing graph and arrive, for each run of the
node, bound to the enclosing scope (the runtime's
:class:`~sonnx.engine.subgraphs.BoundSubgraph`); nothing here runs them.
"""

from __future__ import annotations

from sonnx.onnx.registry import register_operators
from sonnx.operators.control import If, Loop, Scan

register_operators(If, Loop, Scan)
