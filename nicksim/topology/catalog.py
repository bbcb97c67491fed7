"""Built-in systems, and turning a SYSTEM argument into a completed topology document.

The catalog names NCCL-format XML files in the repository's `topologies/` folder, each
written from public specifications. `resolve_system(spec)` accepts a catalog name, "local"
(this host's GPUs, detected as NCCL detects them: detect.py) or a path to a topology file;
`load_node(spec, options)` reads it, completes it with fill.py (a catalog entry's fabric and NIC
speed standing in for options not given) and returns the document plus the notes of what was
assumed.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from ..errors import TopologyError, UnknownNameError
from .fill import FillOptions, FilledTopology, fill_topology
from .hardware import fabric
from .xml import TopoXml, read_topo_xml

__all__ = ["CatalogEntry", "CATALOG", "DEFAULT_SYSTEM", "LOCAL_SYSTEM", "topology_dir", "resolve_system", "load_node", "HOST_SYSTEM"]


@dataclass(frozen=True)
class CatalogEntry:
    """A built-in system: its name, file, GPU model, usual fabric, a one-line description, and the
    speed of its NICs where its file lists them bare (as a cloud's NCCL_TOPO_FILE does)."""

    name: str
    file: str
    gpu: str
    fabric: str
    description: str
    nic_gbps: float | None = None


CATALOG: Mapping[str, CatalogEntry] = MappingProxyType({e.name: e for e in (
    CatalogEntry("dgx-a100", "dgx-a100.xml", "a100", "ib", "DGX A100: 8x A100-SXM4, 6 NVSwitch, 8x HDR 200G, 2x EPYC 7742"),
    CatalogEntry("dgx-h100", "dgx-h100.xml", "h100", "ib", "DGX H100: 8x H100 SXM5, 4 NVSwitch, 8x NDR 400G, 2x Xeon 8480C"),
    CatalogEntry("hgx-h200", "hgx-h200.xml", "h200", "ib", "HGX H200: 8x H200 SXM, NVSwitch, 8x 400G, 2x Emerald Rapids"),
    CatalogEntry("hgx-h800", "hgx-h800.xml", "h800", "ib",
                 "HGX H800: 8x H800 SXM5 (8 NVLinks each), NVSwitch, 8x 400G, 2x Sapphire Rapids"),
    CatalogEntry("dgx-b200", "dgx-b200.xml", "b200", "ib", "DGX B200: 8x B200, 2 NVSwitch, 8x NDR 400G, 2x Xeon 8570"),
    CatalogEntry("gb200-nvl72", "gb200-nvl72.xml", "gb200", "ib",
                 "GB200 NVL72: 18 trays x 4 B200 + 2 Grace (C2C), one NVLink domain, one 400G NIC per GPU"),
    CatalogEntry("pcie-8x-rtx4090", "pcie-8x-rtx4090.xml", "rtx4090", "roce",
                 "8x RTX 4090, each on its own root port, 2x EPYC 9004, no P2P"),
    CatalogEntry("pcie-2x-rtx2080ti", "pcie-2x-rtx2080ti.xml", "rtx2080ti", "tcp",
                 "2x RTX 2080 Ti behind one PCIe switch, P2P not supported"),
    CatalogEntry("pcie-8x-l40s", "pcie-8x-l40s.xml", "l40s", "roce", "8x L40S behind 4 PCIe switches, no NVLink"),
    CatalogEntry("aws-p5", "aws-p5.xml", "h100", "efa",
                 "AWS p5.48xlarge: 8x H100 SXM5, NVSwitch, 32x EFA 100G (4 per GPU switch), aws-ofi-nccl's layout",
                 nic_gbps=100),
    CatalogEntry("azure-ndv4", "azure-ndv4.xml", "a100", "ib",
                 "Azure ND A100 v4: 8x A100 SXM4, NVSwitch, 8x HDR 200G, 4 NUMA nodes (Azure's layout)",
                 nic_gbps=200),
    CatalogEntry("azure-ndv5", "azure-ndv5.xml", "h100", "ib",
                 "Azure ND H100 v5: 8x H100 SXM5, NVSwitch, 8x NDR 400G, 2 sockets (Azure's layout)",
                 nic_gbps=400),
)})
DEFAULT_SYSTEM = "dgx-h100"
# What the real backend plans each host as: GPUs with no P2P between them, so every connection
# inside a host is SHM (as NCCL's ladder gives CPU-only nodes).
HOST_SYSTEM = "pcie-8x-rtx4090"
LOCAL_SYSTEM = "local"  # this host, detected through NVML and sysfs (detect.py)


def topology_dir() -> Path:
    """The repository's topologies/ folder (the package is installed from the checkout)."""
    return Path(__file__).resolve().parents[2] / "topologies"


def resolve_system(spec: str, where: str = "SYSTEM") -> tuple[TopoXml, CatalogEntry | None]:
    """Read the topology a SYSTEM argument names: a catalog name, or an XML file path."""
    if spec.strip().lower() == LOCAL_SYSTEM:
        from .detect import detect_topology  # this host's hardware: read only when asked for
        return detect_topology(where=where), None
    entry = CATALOG.get(spec.strip().lower())
    if entry is not None:
        path = topology_dir() / entry.file
        if not path.is_file():
            raise TopologyError(f"catalog file {path} is missing", where, "a checkout with its topologies/ folder")
        doc = read_topo_xml(path)
        return TopoXml(doc.root, doc.comments, entry.name), entry
    path = Path(spec)
    if path.suffix.lower() == ".xml" or path.exists() or "/" in spec:
        return read_topo_xml(path), None
    raise UnknownNameError(f"unknown system '{spec}'", where,
                           ", ".join(CATALOG) + f", {LOCAL_SYSTEM} (this host's GPUs), or a topology .xml file")


def load_node(spec: str, options: FillOptions, where: str = "SYSTEM") -> tuple[FilledTopology, CatalogEntry | None]:
    """The completed topology of one node (or one NVLink domain) named by `spec`."""
    doc, entry = resolve_system(spec, where)
    if entry is not None:  # what the catalog knows of the system, where the options say nothing
        options = replace(options, fabric=options.fabric or fabric(entry.fabric),
                          nic_gbps=options.nic_gbps or entry.nic_gbps)
    return fill_topology(doc, options), entry
