"""The built-in systems: each file describes the machine its entry names, and names its sources."""
import pytest

from conftest import build
from nicksim.topology.catalog import CATALOG, DEFAULT_SYSTEM, resolve_system, topology_dir
from nicksim.errors import TopologyError, UnknownNameError
from nicksim.topology.hardware import gpu_model

EXPECTED = {  # name: (GPUs, NETs, hosts)
    "dgx-a100": (8, 8, 1), "dgx-h100": (8, 8, 1), "hgx-h200": (8, 8, 1), "hgx-h800": (8, 8, 1),
    "dgx-b200": (8, 8, 1),
    "gb200-nvl72": (72, 72, 18), "pcie-8x-rtx4090": (8, 1, 1), "pcie-2x-rtx2080ti": (2, 1, 1),
    "pcie-8x-l40s": (8, 4, 1),
    # aws-ofi-nccl presents p5's 32 EFA devices as 8 NCCL devices of 4 (topology/fill.py)
    "aws-p5": (8, 8, 1), "azure-ndv4": (8, 8, 1), "azure-ndv5": (8, 8, 1),
}


@pytest.mark.parametrize("name", list(CATALOG))
def test_catalog_entry_matches_its_file(name):
    entry = CATALOG[name]
    system, _ = build(name)
    gpus, nets, hosts = EXPECTED[name]
    assert (len(system.gpus()), len(system.nets()), len(system.host_hashes)) == (gpus, nets, hosts)
    model = gpu_model(entry.gpu)
    assert {system.nodes[g].gpu.model for g in system.gpus()} == {model.name}
    assert {system.nodes[g].gpu.sm for g in system.gpus()} == {model.sm}
    doc, found = resolve_system(name)
    assert found is entry
    comment = " ".join(doc.comments).lower()
    assert "written from public sources" in comment and "assumption" in comment


def test_default_is_the_dgx_h100():
    assert DEFAULT_SYSTEM == "dgx-h100" and (topology_dir() / CATALOG[DEFAULT_SYSTEM].file).is_file()


def test_names_and_files():
    with pytest.raises(UnknownNameError) as err:
        resolve_system("dgx-h900")
    assert all(name in err.value.valid for name in CATALOG)
    doc, entry = resolve_system(str(topology_dir() / "dgx-a100.xml"))
    assert entry is None and doc.root.tag == "system"
    with pytest.raises(TopologyError):
        resolve_system("missing/dir/file.xml")
