#!/usr/bin/env bash
# The test suite on a fresh machine: set up .venv with the test extras, lint, then run pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bootstrap.sh test
ruff check src tests bench examples scripts
python -m pytest -p no:cacheprovider "$@"
