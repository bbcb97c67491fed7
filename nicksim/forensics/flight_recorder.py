"""PyTorch's Flight Recorder dumps, read as plain data.

`read_flight_recorder(stream, path)` returns a dump (PyTorch's pickle, unpickled without running any
code, or its JSON form; NCCL's RAS JSON is recognised by its `communicators` list) or None where the
file is something else, so that it is read as text instead. `rank_in_name` reads the rank from
PyTorch's file name.
"""
from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

__all__ = ["read_flight_recorder", "rank_in_name"]

_FR_MAX_NBYTES = 64 << 20  # a Flight Recorder dump holds a few thousand entries: megabytes


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles plain data only (dicts, lists, tuples, strings, numbers): a dump from another
    machine must not run code here."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


def read_flight_recorder(stream, path: Path) -> dict | None:
    """The file's Flight Recorder dump (PyTorch's pickle, or its JSON form), or None where the
    file is something else (or a dump too damaged to read: its lines are read instead)."""
    head = stream.read(1)
    nbytes = stream.seek(0, 2)
    stream.seek(0)
    if head not in (b"\x80", b"{") or nbytes > _FR_MAX_NBYTES:
        return None
    try:  # a pickle is read from the stream as far as it makes sense; JSON whole (it is at most the cap)
        dump = _PlainUnpickler(stream).load() if head == b"\x80" else json.load(stream)
    except Exception:  # damaged, truncated or not a dump after all: read as text
        return None
    if not isinstance(dump, dict):
        return None
    # PyTorch's JSON form leaves `entries` out when a rank recorded none; its version and groups are still there
    if isinstance(dump.get("entries"), list) or isinstance(dump.get("communicators"), list) or \
            ("version" in dump and isinstance(dump.get("pg_config"), dict)):
        return dump
    return None


def rank_in_name(name: str) -> int | None:
    """PyTorch names a rank's dump by its prefix and the rank (TORCH_NCCL_DEBUG_INFO_TEMP_FILE, default
    /tmp/nccl_trace_rank_<rank>)."""
    match = re.search(r"(\d+)(?:\.\w+)?$", name)
    return int(match.group(1)) if match else None


