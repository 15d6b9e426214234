#!/usr/bin/env bash
# Sourced by demo.sh and test.sh: creates .venv on a fresh machine and installs what sonnx needs.
# torch==2.13.0 is installed first: it is the CPU build these machines hold locally; any other torch
# request would download a multi-GB CUDA build. pyproject.toml itself only asks for torch>=2.4.
set -euo pipefail
extras="${1:-demo}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
# Every package comes at the exact version in constraints.txt (what CI tested); refresh it only
# with scripts/refresh-constraints.sh. The package is built in this venv (no build isolation)
# so its build backend is pinned too.
pip_install() { python -m pip install --quiet --disable-pip-version-check -c constraints.txt "$@"; }
pip_install pip setuptools
pip_install "torch==2.13.0"
pip_install --no-build-isolation -e ".[${extras}]"
# pip writes a package's bytecode when it installs it, but not for an editable install; where
# PYTHONDONTWRITEBYTECODE is set (these machines) every `import sonnx` would then compile its
# ~140 modules from source again: 0.4-0.5 s of each process's start. Stale files are harmless
# (Python checks each against its source's modification time).
python -m compileall -q src/sonnx
# The default demo data: Debian's real Fashion-MNIST. Where apt-get is missing (or we are not
# root) sonnx falls back to scikit-learn's bundled digits.
if [ ! -d /usr/share/datasets/fashion-mnist ] && command -v apt-get >/dev/null 2>&1 \
   && [ "$(id -u)" = "0" ]; then
  (apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist >/dev/null) \
    || echo "dataset-fashion-mnist not installed; sonnx will use scikit-learn's digits"
fi
