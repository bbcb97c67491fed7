#!/usr/bin/env bash
# Regenerate the golden files of one NCCL release from NCCL's own sources:
#   tests/golden/harness/regenerate.sh NCCL_SRC TAG [KIND...] [--only GLOB] [--build-dir DIR] [--nicksim DIR] [--check]
# See regenerate.py and ../README.md.
exec python3 "$(dirname "$0")/regenerate.py" "$@"
