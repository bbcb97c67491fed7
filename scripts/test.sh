#!/usr/bin/env bash
# Installs what the test suite needs and runs it (the README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e '.[dev]'
# The real backend's tests across hosts make network namespaces, veth pairs and tbf qdiscs.
if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    apt-get update -q >/dev/null && apt-get install -y -q iproute2 >/dev/null
fi
# The IB verbs shim is checked against Debian's own pyverbs (rdma-core), which needs no RDMA device.
if [ ! -d /usr/lib/python3/dist-packages/pyverbs ]; then
    apt-get update -q >/dev/null && apt-get install -y -q python3-pyverbs >/dev/null
fi
# The dashboard's browser test drives Debian's Chromium through Playwright (no browser is downloaded).
if [ ! -x /usr/bin/chromium ]; then
    apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null
fi
# One worker per CPU (pytest-xdist): the suite is CPU-bound and its tests independent.
python3 -m pytest -q -n auto "$@"
