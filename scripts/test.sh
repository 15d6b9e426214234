#!/usr/bin/env bash
# The test suite on a fresh machine: set up .venv with the test extras, lint, build the docs, then run pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bootstrap.sh test
ruff check src tests bench examples scripts
ruff format --check src tests bench examples scripts
# The SINGA-named functions written from the classes' declarations are the current ones.
python -m sonnx.operators.singa_codegen --check
# The documentation site: a broken link, a missing page or an API reference that does not
# resolve fails here (strict), before the slower pytest run.
site="$(mktemp -d)"
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet --site-dir "$site"
rm -rf "$site"
# Two workers, one per core of the CI machine (tests/conftest.py gives each one torch thread and
# one inductor compile thread); a file's tests stay on one worker, so its module-scoped fixtures
# (compiled reps, exported models) are built once. SONNX_TEST_WORKERS=0 runs in this process.
# The slowest tests are listed at the end: the suite is to stay under ~25 minutes on 2 cores.
python -m pytest -p no:cacheprovider -n "${SONNX_TEST_WORKERS:-2}" --dist loadfile \
  --durations=25 "$@"
