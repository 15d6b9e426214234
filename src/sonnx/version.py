"""``sonnx.__version__``: the installed distribution's version, or the source checkout's.

An installed sonnx (``pip install``, editable or not) answers from its package metadata. A
source checkout used without installing (``PYTHONPATH=src``) has no metadata, so the version
is read from the ``pyproject.toml`` beside ``src/``; anything else says ``0+unknown`` (a valid
version that sorts before every release) rather than failing an import.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

UNKNOWN = "0+unknown"
#: Where a source checkout keeps its version: ``src/sonnx/version.py`` -> ``pyproject.toml``.
CHECKOUT_PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
_PYPROJECT_VERSION = re.compile(r'^version\s*=\s*"([^"]+)"', re.MULTILINE)


def package_version(
    distribution: str = "sonnx",
    pyproject: Path = CHECKOUT_PYPROJECT,
) -> str:
    """The version of ``distribution`` from its metadata, else from ``pyproject``'s
    ``[project]`` table, else :data:`UNKNOWN`."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        pass
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return UNKNOWN
    project = text.split("[project]", 1)[1] if "[project]" in text else ""
    found = _PYPROJECT_VERSION.search(project.split("\n[", 1)[0])
    return found.group(1) if found else UNKNOWN
