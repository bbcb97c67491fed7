"""Topology and path constants per NCCL release line.

Every number here was read from NVIDIA/nccl at the tag of the release line
(src/graph/topo.h, topo.cc, paths.cc); the comment on each field names what changed and when,
TOPO_CHANGES gives each field's value from the first release line that has it (as
rules.RELEASE_CHANGES does for the other stages). `topo_rules(version)` is the only way the
stages reach them.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .rules import Changes, ReleaseRules, resolve, rules
from .versions import NcclVersion

__all__ = ["TopoRules", "topo_rules", "TOPO_CHANGES", "LOC_BW", "PCI_GEN_CODES", "PCI_DEFAULT_CODE",
           "P2P_PER_CHANNEL_NET_BW", "P2P_NET_CHUNK_DEFAULT", "NET_STEP_US"]

# topo.h, unchanged 2.18-2.30.
LOC_BW = 5000.0
P9_BW = 32.0
ARM_BW = 6.0
ZPI_BW = 6.0
YONGFENG_ZPI_BW = 9.0
BDW_QPI_BW = 6.0   # QPI_BW before 2.26
SKL_QPI_BW = 10.0
SRP_QPI_BW = 22.0  # 2.26+
ERP_QPI_BW = 40.0  # 2.26+
AMD_BW = 16.0      # 2.19+; AMD fell back to LOC_BW before
# paths.cc 2.29: NCCL_P2P_PER_CHANNEL_NET_BW default, what NCCL expects one point-to-point channel
# to move across the network (GB/s); it sizes the channels per network peer by it.
P2P_PER_CHANNEL_NET_BW = 14.0
# NCCL_P2P_NET_CHUNKSIZE's default (init.cc; params.py takes it from here), the network step that 14 GB/s goes with: one step costs its
# connection 131072 B / 14 GB/s = 9.4 us, whatever its size (NVIDIA/nccl#2409 measures 10-12 us on RoCE).
P2P_NET_CHUNK_DEFAULT = 131072
NET_STEP_US = P2P_NET_CHUNK_DEFAULT / (P2P_PER_CHANNEL_NET_BW * 1e3)

# topo.cc kvDictPciGen: per-lane speed in units of 100 Mbit/s; bw = width * code / 80 GB/s.
PCI_GEN_CODES = {
    "2.5 GT/s": 15, "5 GT/s": 30, "8 GT/s": 60, "16 GT/s": 120, "32 GT/s": 240,
    "2.5 GT/s PCIe": 15, "5.0 GT/s PCIe": 30, "8.0 GT/s PCIe": 60, "16.0 GT/s PCIe": 120,
    "32.0 GT/s PCIe": 240, "64.0 GT/s PCIe": 480,
}
PCI_DEFAULT_CODE = 60  # unknown strings fall back to Gen3

# Path type names in enum order (topo.h PATH_*).
_PATHS_218 = ("LOC", "NVL", "NVB", "PIX", "PXB", "PXN", "PHB", "SYS", "NET", "DIS")
_PATHS_226 = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "PXN", "PHB", "SYS", "NET", "DIS")
_PATHS_227 = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS")

# Link type codes (topo.h LINK_*): the printed name is what matters, the code is kept for logs.
_LINKS_218 = {"LOC": 0, "NVL": 1, "PCI": 3, "SYS": 7, "NET": 8}
_LINKS_226 = {"LOC": 0, "NVL": 1, "C2C": 3, "PCI": 4, "SYS": 8, "NET": 9}
_LINKS_227 = {"LOC": 0, "NVL": 1, "C2C": 3, "PCI": 4, "SYS": 9, "NET": 10}


@dataclass(frozen=True)
class TopoRules:
    """What one NCCL release line does when it builds a system and its paths."""

    version: NcclVersion
    path_names: tuple[str, ...]
    link_codes: dict
    sm90_nvlink_bw: float          # 20.0 until 2.19, 20.6 from 2.20
    sm100_nvlink_bw: float | None  # None before 2.25 (SM100 took the SM90 value), 40.0, 40.1 from 2.27
    amd_sys_bw: float | None       # None before 2.19 (LOC_BW)
    intel_srp_erp: bool            # Sapphire/Emerald Rapids UPI constants, 2.26+
    c2c_link_kind: str             # "NVL" before 2.26 (c2c added as an NVLink), then "C2C"
    print_style: int               # 218: "%s/%lX"; 221: "%s/%lx-%lx" nodes; 222: + LOC links; 223: links too; 226: NET coll
    paths_type_first: bool         # 2.30.7 BFS keeps the better type first, earlier the higher bw
    p2p_level_default: str         # "sys-unless-intel-arm" (<=2.22) or "pxb-amd2-sys" (2.23+)
    has_p2c: bool                  # PATH_P2C and the C2C+PHB merge, 2.27+
    gdr_c2c_default: int           # NCCL_NET_GDR_C2C default: 0 in 2.26, 1 from 2.27
    pxn_c2c_default: int           # NCCL_PXN_C2C default: 0 until 2.27, 1 from 2.28
    pxn_cpu_avoid_above: str       # PXN when own path type > this: PXB until 2.26, PXN from 2.27
    pxn_requires_gdr: bool         # 2.30: the relay GPU must have GDR to the NIC
    gdr_check_below_phb_only: bool # 2.21+: GDR fallback only considered for paths better than PHB
    local_net_mod_gpus: bool       # 2.30: ncclTopoGetLocalNet starts at dev % localGpuCount
    bcm_gen5: bool                 # 2.20+: Gen4 and Gen5 Broadcom switches flattened (device |= 0xffff);
                                   # before, Gen4 only with identical sub-switch ids (device := 0x1000c01010000000)
    guid_strtoull: bool            # 2.28+: guid read with strtoull(…, 16); before sscanf("0x%lx") (no 0x -> 0)
    trim_removes_nets: bool        # until 2.27: a one-node communicator drops every NET (ncclTopoTrimSystem)
    gpu_dev_nodes: bool            # 2.30: every GPU hangs below a DEV node carrying its PCIe link and NVLinks
    net_gin_attr: bool             # 2.29: <net net="0"> is a GIN/RMA-only device, not a NET
    xml_max_nodes: int             # elements NCCL reads from one topology file: 1024 until 2.20, then 256
    xml_max_subs: int              # children per element: 32 until 2.20, 128 in 2.21-2.28, 640 from 2.29
    xml_max_attrs: int = 16        # attributes per element (xml.h MAX_ATTR_COUNT)

    @property
    def release(self) -> ReleaseRules:
        """The release's other rules (constants/rules.py), for stages that hold a System."""
        return rules(self.version)

    def path_code(self, name: str) -> int:
        return self.path_names.index(name)

    def has_path(self, name: str) -> bool:
        return name in self.path_names

    def nvlink_bw(self, sm: int) -> float:
        """ncclTopoNVLinkBw: per-link NVLink GB/s for a compute capability x10."""
        if sm >= 100 and self.sm100_nvlink_bw is not None:
            return self.sm100_nvlink_bw
        if sm >= 90:
            return self.sm90_nvlink_bw
        if sm == 86:
            return 12.0
        if sm >= 70:
            return 20.0  # SM70 and SM80 share 20.0 in 2.18-2.30
        if sm >= 60:
            return 18.0
        return 20.0  # NCCL falls back to the SM80 value


# Per field: (first release line's minor, value), oldest first (resolved as rules.RELEASE_CHANGES is).
TOPO_CHANGES: Changes = {
    # 2.27.3 numbered PXN 6 / P2C 7; 2.27.7 (the modelled 2.27) already has P2C 6 / PXN 7.
    "path_names": ((18, _PATHS_218), (26, _PATHS_226), (27, _PATHS_227)),
    "link_codes": ((18, _LINKS_218), (26, _LINKS_226), (27, _LINKS_227)),
    "sm90_nvlink_bw": ((18, 20.0), (20, 20.6)),
    "sm100_nvlink_bw": ((18, None), (25, 40.0), (27, 40.1)),
    "amd_sys_bw": ((18, None), (19, AMD_BW)),
    "intel_srp_erp": ((18, False), (26, True)),
    "c2c_link_kind": ((18, "NVL"), (26, "C2C")),
    # 2.21: 2.22's node ids and %.1f path bandwidths, without its LOC link lines (topo.cc 2.21.5)
    "print_style": ((18, 218), (21, 221), (22, 222), (23, 223), (26, 226)),
    "paths_type_first": ((18, False), (30, True)),
    "p2p_level_default": ((18, "sys-unless-intel-arm"), (23, "pxb-amd2-sys")),
    "has_p2c": ((18, False), (27, True)),
    "gdr_c2c_default": ((18, 0), (27, 1)),
    "pxn_c2c_default": ((18, 0), (28, 1)),
    "pxn_cpu_avoid_above": ((18, "PXB"), (27, "PXN")),
    "pxn_requires_gdr": ((18, False), (30, True)),
    "gdr_check_below_phb_only": ((18, False), (21, True)),  # absent in 2.20.5, present in 2.21.5
    "local_net_mod_gpus": ((18, False), (30, True)),
    "bcm_gen5": ((18, False), (20, True)),
    "guid_strtoull": ((18, False), (28, True)),
    "trim_removes_nets": ((18, True), (28, False)),
    "gpu_dev_nodes": ((18, False), (30, True)),
    "net_gin_attr": ((18, False), (29, True)),
    "xml_max_nodes": ((18, 1024), (21, 256)),
    "xml_max_subs": ((18, 32), (21, 128), (29, 640)),
    "xml_max_attrs": ((18, 16),),
}


@lru_cache(maxsize=None)
def topo_rules(version: NcclVersion) -> TopoRules:
    """The TopoRules of a modelled release line."""
    return TopoRules(version=version, **resolve(TOPO_CHANGES, version.minor))
