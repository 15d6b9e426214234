"""``sonnx.__version__`` from the package metadata, else the source checkout's pyproject."""

from __future__ import annotations

from importlib import metadata

import sonnx
from sonnx.version import UNKNOWN, package_version


def test_the_installed_version_is_the_metadata_one() -> None:
    assert sonnx.__version__ == metadata.version("sonnx")


def test_a_checkout_without_metadata_reads_its_pyproject(tmp_path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[build-system]\nrequires = ["setuptools"]\n\n[project]\nname = "x"\nversion = "1.2.3"\n'
        '\n[tool.other]\nversion = "9.9"\n'
    )
    assert package_version("sonnx-not-installed", pyproject) == "1.2.3"


def test_nothing_to_read_is_unknown_not_an_import_error(tmp_path) -> None:
    assert package_version("sonnx-not-installed", tmp_path / "missing.toml") == UNKNOWN
    (tmp_path / "pyproject.toml").write_text('[tool.other]\nversion = "9.9"\n')
    assert package_version("sonnx-not-installed", tmp_path / "pyproject.toml") == UNKNOWN
