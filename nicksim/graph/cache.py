"""Searched graphs kept on disk, so that a system is searched once and not in every run.

`cached_search_graphs(paths, params, folder)` promises exactly what `search_graphs(paths, params)`
returns: the search is a function of the rank's paths (the system, its release's rules, every
bandwidth) and of the few knobs it reads, so an entry is keyed by a digest of the paths and of the
search's own source, and holds, beside the graphs, each knob the search read and the value it
had; it answers a later call whose knobs read the same. Entries are JSON (nothing is unpickled
from a folder others might write), written whole or not at all (a temporary file renamed into
place), so runs in parallel share one folder safely; an entry that cannot be read or written is
searched again, as if there were no folder. With NCCL_GRAPH_FILE the search reads a file that may
change between runs, so nothing is kept.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from ..params import Params
from .graphs import Graph
from .paths import Paths

__all__ = ["cached_search_graphs", "search_key", "cache_folder"]

_FORMAT = 1  # bumped when an entry's layout changes


def cache_folder(params: Params) -> str | None:
    """Where searched graphs are kept: NICKSIM_CACHE, else the user's cache folder the environment
    named (read_params), None with NICKSIM_CACHE=off or no such folder."""
    chosen = params.get("NICKSIM_CACHE")
    if chosen is not None:
        return None if str(chosen).strip().lower() in ("off", "0", "none", "") else str(chosen)
    return params.cache_home


def search_graphs(paths: Paths, params: Params) -> dict[str, Graph]:
    """search.search_graphs, loaded when a search runs: a run the cache answers never loads the
    search (nor NumPy, which its float32 arithmetic needs)."""
    from .search import search_graphs as search
    return search(paths, params)


def _source_digest() -> str:
    """The code the search runs (its phase, the system it walks, the release tables it reads): an
    entry made by any other version of it is never read."""
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for folder in ("graph", "topology", "constants"):
        for module in sorted((package / folder).glob("*.py")):
            digest.update(module.name.encode() + b"\0" + module.read_bytes())
    digest.update((package / "params.py").read_bytes())
    return digest.hexdigest()


def search_key(paths: Paths) -> str:
    """The digest an entry is filed under: the paths as their dataclasses print them (field order
    fixed, no sets) and the search's source. The rank count is left out: the search reads only what
    it changed in the paths (the NICs trimmed on one node, `inter`), so a node searched for two
    nodes is the same node searched for 128, one entry."""
    digest = hashlib.sha256(f"{_FORMAT}\n{_source_digest()}\n".encode())
    digest.update(repr(replace(paths, nranks=0)).encode())
    return digest.hexdigest()[:40]


class _Reads:
    """`params` as the search sees it, noting every knob it reads and the value it got."""

    def __init__(self, params: Params):
        self._params = params
        self.read: dict[str, Any] = {}

    def get(self, name: str) -> Any:
        value = self._params.get(name)
        self.read[name] = value
        return value


def _plain(value: Any) -> Any:
    """A value as JSON gives it back (tuples as lists), to compare a knob with the one recorded."""
    return json.loads(json.dumps(value))


def _to_json(graph: Graph) -> dict:
    return asdict(graph)


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _from_json(data: dict) -> Graph:
    return Graph(**{name: _tuples(value) for name, value in data.items()})


def _load(file: Path) -> list[dict]:
    """The file's entries of the expected shape; anything else in it is dropped (and so replaced)."""
    try:
        entries = json.loads(file.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(entries, list):
        return []
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("reads"), dict)
            and isinstance(e.get("graphs"), dict)]


def _find(entries: list[dict], params: Params) -> dict[str, Graph] | None:
    for entry in entries:
        if all(_plain(params.get(name)) == value for name, value in entry["reads"].items()):
            try:
                return {name: _from_json(data) for name, data in entry["graphs"].items()}
            except TypeError:
                return None  # graphs of another layout: searched again
    return None


def _store(file: Path, entries: list, reads: dict[str, Any], graphs: dict[str, Graph]) -> None:
    entry = {"reads": {name: _plain(value) for name, value in reads.items()},
             "graphs": {name: _to_json(g) for name, g in graphs.items()}}
    text = json.dumps([*entries, entry][-16:])  # a few knob settings per system are kept
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=file.name, suffix=".tmp", dir=file.parent)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(temp, file)
    except OSError:
        return  # a folder that cannot be written: the next run searches again


def cached_search_graphs(paths: Paths, params: Params, folder: str | None) -> dict[str, Graph]:
    """search_graphs(paths, params), from `folder` where a run before made the same search."""
    if folder is None or params.get("NCCL_GRAPH_FILE"):
        return search_graphs(paths, params)
    file = Path(folder) / f"graphs-{search_key(paths)}.json"
    entries = _load(file)
    found = _find(entries, params)
    if found is not None:
        return found
    reads = _Reads(params)
    graphs = search_graphs(paths, reads)
    _store(file, entries, reads.read, graphs)
    return graphs
