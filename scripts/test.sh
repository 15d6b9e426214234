#!/usr/bin/env bash
# The test suite on a fresh machine: set up .venv with the test extras, lint, build the docs, then run pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bootstrap.sh test
ruff check src tests bench examples scripts
# The documentation site: a broken link, a missing page or an API reference that does not
# resolve fails here (strict), before the slower pytest run.
site="$(mktemp -d)"
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet --site-dir "$site"
rm -rf "$site"
python -m pytest -p no:cacheprovider "$@"
