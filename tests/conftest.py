"""Shared helpers: building systems and paths the way the CLI does, and the ../shared data."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nicksim.topology.catalog import load_node
from nicksim.constants import parse_version, topo_rules
from nicksim.topology.fill import FillOptions
from nicksim.topology.hardware import fabric, gpu_model
from nicksim.params import read_params
from nicksim.graph.paths import compute_paths
from nicksim.topology.system import build_system

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
VALIDATION = SHARED / "validation"


def pytest_collection_modifyitems(config, items):
    """Tests marked `root` make network namespaces, which needs root (CI runs as root): on a machine
    without it they are skipped, each saying why, instead of failing."""
    if os.geteuid() == 0:
        return
    why = pytest.mark.skip(reason="needs root to make network namespaces, veth pairs and tbf qdiscs (CI runs as root)")
    for item in items:
        if item.get_closest_marker("root") is not None:
            item.add_marker(why)


_RUN: dict[str, str] = {}  # what the session fixtures set up for the whole run


def searched(paths, params):
    """search_graphs(paths, params), through the run's shared graph cache (graph/cache.py promises
    the same graphs): tests that read a system's graphs search it once per run between them."""
    from nicksim.graph.cache import cached_search_graphs
    return cached_search_graphs(paths, params, _RUN["graph_cache"])


@pytest.fixture(autouse=True, scope="session")
def _one_search_per_system(tmp_path_factory):
    """Jobs built in-process with no cache folder named (read_params({}) names none) share one graph
    cache for the whole run, every xdist worker the same folder: the search is a pure function of
    its key (graph/cache.py), so each system and knob set is searched once per run instead of in
    every test that builds it. A job whose knobs say NICKSIM_CACHE still gets what they say; tests
    that search directly go through `searched` (the same folder), and those of the cache itself
    give their own folders."""
    import nicksim.job
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "graph-cache"
    _RUN["graph_cache"] = str(shared)
    chosen = nicksim.job.cache_folder

    def folder(params):
        if params.get("NICKSIM_CACHE") is None and params.cache_home is None:
            return str(shared)
        return chosen(params)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nicksim.job, "cache_folder", folder)
        yield


def need_package(present: bool, package: str, what: str) -> None:
    """A test that drives one of Debian's packages: as root (CI) a missing package fails the test,
    since scripts/test.sh installs it; as a normal user, who cannot install it, the test skips and
    says which package and why."""
    if present:
        return
    if os.geteuid() == 0:
        pytest.fail(f"Debian's {package} is missing ({what}): scripts/test.sh installs it")
    pytest.skip(f"Debian's {package} is not installed and installing it needs root ({what}; scripts/test.sh "
                f"installs it when run as root)")


def need_validation() -> Path:
    if not VALIDATION.is_dir():
        pytest.skip(f"{VALIDATION} not found: the published validation data sits beside the checkout in CI")
    return VALIDATION


def build(spec: str, version: str = "2.30", env: dict | None = None, nodes: int = 1,
          gpu: str | None = None, fab: str | None = None, **options):
    """(system, paths) for a catalog name or file, as `nicksim topo` builds them."""
    opts = FillOptions(gpu=gpu_model(gpu) if gpu else None, fabric=fabric(fab) if fab else None, **options)
    filled, entry = load_node(spec, opts)
    system = build_system(filled.doc, topo_rules(parse_version(version)), notes=filled.notes)
    plugin = (fabric(fab) if fab else fabric(entry.fabric) if entry else fabric("ib")).net_plugin
    paths = compute_paths(system, read_params(env or {}), nranks=nodes * len(system.gpus()), net_plugin=plugin)
    return system, paths


def gpu_index(system, rank: int) -> int:
    return system.gpu_by_rank(rank)


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `python -m nicksim ARGS` as a user would, with NCCL_* variables cleared unless given."""
    import os
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "NICKSIM_"))}
    base.update(env or {})
    return subprocess.run([sys.executable, "-m", "nicksim", *args], capture_output=True, text=True,
                          cwd=REPO, env=base, timeout=300)
