#!/usr/bin/env bash
# Refresh constraints.txt deliberately: resolve the newest releases of everything the set-up
# installs (pip, setuptools, torch==2.13.0 and every extra of pyproject.toml) in a throw-away
# virtual environment and write their exact versions. Then run `bash scripts/test.sh` (which
# installs from the new pins) and commit constraints.txt only if it passes.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
pip="$tmp/venv/bin/python -m pip --quiet --disable-pip-version-check"
$pip install --upgrade pip setuptools
$pip install "torch==2.13.0"
extras=$(python3 -c 'import tomllib; print(",".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]))')
$pip install --no-build-isolation -e ".[${extras}]"
{
  echo "# Exact versions the set-up scripts install (pip -c constraints.txt)."
  echo "# Written by scripts/refresh-constraints.sh on $(date -u +%Y-%m-%d); edit by re-running it."
  $tmp/venv/bin/python -m pip freeze --all --exclude-editable | grep -v '^sonnx' \
    | sed 's/^torch==2.13.0+cpu$/torch==2.13.0/'
} > constraints.txt
echo "constraints.txt refreshed; now run: bash scripts/test.sh"
