#!/usr/bin/env bash
# Install (if needed) and run the test suite. Extra arguments go to pytest
# (e.g. `bash scripts/test.sh -m slow` for the slow tests). `--quick` first: the
# everyday loop, without the tests marked heavy (byte trunks and MiniLM bundles
# trained, graphs exported, servers, browsers and Ray started, writers killed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
# where setup could install chromium, the browser test must run, not skip
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && [ -z "${MANYHEADS_NO_BROWSER:-}" ]; then
  export MANYHEADS_REQUIRE_BROWSER=1
fi
if [ "${1:-}" = "--quick" ]; then
  shift
  exec .venv/bin/python -m pytest -m "not slow and not heavy" "$@"
fi
exec .venv/bin/python -m pytest "$@"
