#!/usr/bin/env bash
# Create .venv (if missing) and install manyheads with every CPU extra, pinned by constraints.txt.
# Sourced by quickstart.sh and test.sh; safe to run again (it only installs what is missing).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  if ! "$PYTHON" -m venv .venv 2>/dev/null; then
    rm -rf .venv
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      echo "setup: installing python3-venv" >&2
      apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
      "$PYTHON" -m venv .venv
    else
      echo "setup: '$PYTHON -m venv' failed; install the python3-venv package and retry" >&2
      exit 1
    fi
  fi
fi
STAMP=.venv/.manyheads-installed
WANT="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  # torch first, pinned: an unpinned resolve would pull a multi-GB CUDA build
  .venv/bin/python -m pip install -q -c constraints.txt "torch==2.13.0"
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[dev]"
  echo "$WANT" > "$STAMP"
fi
# The playground's browser test drives Debian's headless chromium (installed when we can).
if ! command -v chromedriver >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 \
   && [ "$(id -u)" = 0 ] && [ -z "${MANYHEADS_NO_BROWSER:-}" ]; then
  echo "setup: installing chromium and chromium-driver (for the playground test)" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq chromium chromium-driver >/dev/null; } \
    || echo "setup: could not install chromium; the playground test will say so" >&2
fi
