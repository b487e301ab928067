#!/usr/bin/env bash
# Install (if needed) and run the test suite. Extra arguments go to pytest
# (e.g. `bash scripts/test.sh -m slow` for the slow tests).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
exec .venv/bin/python -m pytest "$@"
