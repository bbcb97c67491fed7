#!/usr/bin/env bash
# Installs what the test suite needs and runs it (the README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e '.[dev]'
python3 -m pytest -q "$@"
