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
