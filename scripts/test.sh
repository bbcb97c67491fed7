#!/usr/bin/env bash
# Installs what the test suite needs and runs it (the README's test command). As root it installs
# the Debian packages some tests drive; as a normal user it says which are missing and those tests
# skip, each saying why (tests/conftest.py need_package).
set -euo pipefail
cd "$(dirname "$0")/.."
# Into the active environment; outside a virtual environment a normal user installs into ~/.local.
where=()
if [ "$(id -u)" -ne 0 ] && python3 -c 'import sys; sys.exit(sys.prefix != sys.base_prefix)'; then
    where=(--user)
fi
python3 -m pip install --quiet --disable-pip-version-check "${where[@]}" -e '.[dev]'

# need PACKAGE PRESENT-CHECK WHAT-NEEDS-IT: install PACKAGE where PRESENT-CHECK fails.
need() {
    if eval "$2"; then
        return 0
    fi
    if [ "$(id -u)" -eq 0 ]; then
        apt-get update -q >/dev/null && apt-get install -y -q "$1" >/dev/null
    else
        echo "scripts/test.sh: not root, so Debian's $1 is not installed: $3 will be skipped" >&2
    fi
}
# The real backend's tests across hosts make network namespaces, veth pairs and tbf qdiscs.
need iproute2 'command -v ip >/dev/null && command -v tc >/dev/null' "the tests across network namespaces"
# The IB verbs shim is checked against Debian's own pyverbs (rdma-core), which needs no RDMA device.
need python3-pyverbs '[ -d /usr/lib/python3/dist-packages/pyverbs ]' "the tests against Debian's pyverbs"
# The dashboard's browser test drives Debian's Chromium through Playwright (no browser is downloaded).
need chromium '[ -x /usr/bin/chromium ]' "the dashboard's browser test"
# Bytecode compiled once: the tests start nicksim in hundreds of processes, and where
# PYTHONDONTWRITEBYTECODE is set each would compile every module from source again.
python3 -m compileall -q nicksim
# One worker per CPU (pytest-xdist): the suite is CPU-bound and its tests independent.
python3 -m pytest -q -n auto "$@"
