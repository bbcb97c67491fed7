"""nicksim's system and path print against NCCL's own, for every catalog system (tests/golden/nccl-graph)."""
import gzip
from pathlib import Path

import pytest

from conftest import build
from nicksim.graph.paths import format_nccl_paths
from nicksim.topology.system import format_system

GOLDEN = Path(__file__).parent / "golden" / "nccl-graph"
CASES = sorted(p.name for p in GOLDEN.iterdir() if p.name.endswith((".txt", ".txt.gz")))
NCCL_LINE_LIMIT = 1023  # debug.cc formats into char buffer[1024]


def _read(name: str) -> list[str]:
    path = GOLDEN / name
    data = gzip.decompress(path.read_bytes()).decode() if name.endswith(".gz") else path.read_text()
    return data.rstrip("\n").split("\n")


def test_every_catalog_system_has_goldens():
    systems = {name.split(".")[3] for name in CASES}
    assert {"dgx-a100", "dgx-h100", "hgx-h200", "dgx-b200", "pcie-8x-rtx4090", "pcie-2x-rtx2080ti",
            "pcie-8x-l40s", "gb200-nvl72"} <= systems
    assert {name[:6] for name in CASES} == {"2.19.4", "2.22.3", "2.30.7"}


@pytest.mark.parametrize("name", CASES)
def test_print_matches_nccl(name):
    major, minor, patch, system_name, shape = name.split(".")[:5]
    nodes = 1 if shape == "1node" else 2
    system, paths = build(system_name, f"{major}.{minor}", env={"NCCL_IGNORE_DISABLED_P2P": "2"}, nodes=nodes)
    ours = format_system(paths.system, paths.max_bw, paths.total_bw) + format_nccl_paths(paths)
    ours = [line.rstrip() for line in ours]
    theirs = [line.rstrip() for line in _read(name)]
    assert len(ours) == len(theirs)
    for mine, nccl in zip(ours, theirs, strict=True):
        if len(nccl) >= NCCL_LINE_LIMIT - 40:  # cut by NCCL's buffer: compare what it kept
            assert mine.startswith(nccl[: len(nccl) - 2])
        else:
            assert mine == nccl
