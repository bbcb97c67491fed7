"""GPU models and network fabrics nicksim knows, from public specifications.

A GpuModel says what a partial topology file leaves out about a GPU: its compute capability,
PCI ids, PCIe link, how its NVLinks are wired, whether the driver allows CUDA P2P, and a
Grace C2C link where there is one. A Fabric says how a NIC family appears to NCCL (device
names, PCI class, GPUDirect RDMA, NCCL's network plugin name). Both are looked up by name
with `gpu_model()` / `fabric()`; an unknown name is an UnknownNameError listing the valid ones.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from ..errors import UnknownNameError

__all__ = [
    "GpuModel",
    "Fabric",
    "GPU_MODELS",
    "FABRICS",
    "gpu_model",
    "fabric",
    "gpu_model_for_device",
    "CUBE_MESH_8",
]

# DGX-1 (Tesla V100) hybrid cube-mesh, as `nvidia-smi topo -m` shows it on DGX-1V / Azure ND40rs v2
# ("NVIDIA DGX-1 With Tesla V100 System Architecture" whitepaper): NVLink count per GPU pair.
CUBE_MESH_8: Mapping[tuple[int, int], int] = MappingProxyType({
    (0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2,
    (1, 2): 2, (1, 3): 1, (1, 5): 2,
    (2, 3): 2, (2, 6): 1,
    (3, 7): 1,
    (4, 5): 1, (4, 6): 1, (4, 7): 2,
    (5, 6): 2, (5, 7): 1,
    (6, 7): 2,
})


@dataclass(frozen=True)
class GpuModel:
    """What a GPU model contributes to an NCCL topology (compute capability, links, P2P)."""

    name: str
    marketing: str
    sm: int
    pci_devices: tuple[int, ...]
    pci_class: str              # 0x030200 3D controller (datacenter), 0x030000 VGA (GeForce, L40S)
    pcie_speed: str             # as NCCL writes link_speed
    pcie_width: int
    nvlinks: int                # NVLink links per GPU (0: none)
    nvlink_wiring: str          # "nvswitch" | "pairs" | "cube-mesh" | "none"
    cuda_p2p: bool              # cudaDeviceCanAccessPeer / NVML P2P status between two of them
    default_count: int          # GPUs in a typical node, for filling files that do not say
    c2c_bw_mbps: int = 0        # <c2c bw> per link, MB/s (Grace Hopper / Grace Blackwell)
    c2c_count: int = 0


def _m(*args, **kwargs) -> GpuModel:
    return GpuModel(*args, **kwargs)


_GEN3, _GEN4, _GEN5 = "8.0 GT/s PCIe", "16.0 GT/s PCIe", "32.0 GT/s PCIe"

GPU_MODELS: Mapping[str, GpuModel] = MappingProxyType({m.name: m for m in (
    _m("v100", "Tesla V100-SXM2", 70, (0x1DB1, 0x1DB5, 0x1DB6), "0x030200", _GEN3, 16, 6, "cube-mesh", True, 8),
    _m("a100", "A100-SXM4", 80, (0x20B0, 0x20B2, 0x20B3), "0x030200", _GEN4, 16, 12, "nvswitch", True, 8),
    _m("a100-pcie", "A100 PCIe (NVLink bridge pairs)", 80, (0x20B5, 0x20F1), "0x030200", _GEN4, 16, 12, "pairs", True, 4),
    _m("a10g", "A10G", 86, (0x2237,), "0x030200", _GEN4, 16, 0, "none", True, 8),
    _m("h100", "H100 SXM5", 90, (0x2330,), "0x030200", _GEN5, 16, 18, "nvswitch", True, 8),
    _m("h100-pcie", "H100 PCIe (NVLink bridge pairs)", 90, (0x2331,), "0x030200", _GEN5, 16, 12, "pairs", True, 2),
    # H800: the export Hopper, 8 NVLinks to the switches (nvidia-smi NV8; NCCL: 8 x 20.6 GB/s = 164.8).
    _m("h800", "H800 SXM5", 90, (0x2324,), "0x030200", _GEN5, 16, 8, "nvswitch", True, 8),
    _m("h20", "H20", 90, (0x2329,), "0x030200", _GEN5, 16, 18, "nvswitch", True, 8),
    _m("h200", "H200 SXM", 90, (0x2335,), "0x030200", _GEN5, 16, 18, "nvswitch", True, 8),
    _m("gh200", "GH200 Grace Hopper", 90, (0x2342,), "0x030200", _GEN5, 16, 18, "nvswitch", True, 4,
       c2c_bw_mbps=45000, c2c_count=10),
    _m("b200", "B200", 100, (0x2901,), "0x030200", _GEN5, 16, 18, "nvswitch", True, 8),
    _m("gb200", "GB200 Grace Blackwell", 100, (0x2941,), "0x030200", _GEN5, 16, 18, "nvswitch", True, 4,
       c2c_bw_mbps=45000, c2c_count=10),
    _m("l40s", "L40S", 89, (0x26B9,), "0x030000", _GEN4, 16, 0, "none", True, 8),
    _m("l4", "L4", 89, (0x27B8,), "0x030200", _GEN4, 16, 0, "none", True, 8),
    _m("rtx4090", "GeForce RTX 4090", 89, (0x2684,), "0x030000", _GEN4, 16, 0, "none", False, 8),
    _m("rtx2080ti", "GeForce RTX 2080 Ti", 75, (0x1E04, 0x1E07), "0x030000", _GEN3, 16, 0, "none", False, 2),
)})


@dataclass(frozen=True)
class Fabric:
    """How a network family looks to NCCL: NIC names, PCI class, plugin name, GDR, latency, and
    what its network plugin reports for each device (ncclNetProperties: latency, maxComms, guid,
    and whether one device fuses several NICs)."""

    name: str
    nic_prefix: str
    nic_suffix: str
    pci_class: str
    net_plugin: str      # as NCCL prints it in "via NET/<plugin>/<dev>"
    gdr: bool
    default_gbps: int
    switch_lat_us: float  # one switch hop (cut-through), for the cluster graph
    net_latency_us: float = 0.0   # props.latency (0 from NCCL's own net_ib.cc and net_socket.cc, 2.22.3)
    net_maxconn: int = 131072     # props.maxComms
    guid_is_dev: bool = False     # props.guid is the device index, not a port GUID
    max_rails: int = 1            # >1: the plugin fuses the NICs nearest each GPU into one device of
                                  # at most this many NICs ("rails"); see fill.py, rule 3
    plugin_env: tuple[tuple[str, str], ...] = ()  # NCCL_* defaults the plugin sets unless the user did
    plugin_env_below_sm: tuple[tuple[int, str, str], ...] = ()  # (sm, knob, value): set only on older GPUs

    def plugin_env_for(self, sm: int) -> dict[str, str]:
        """The NCCL_* defaults the plugin sets (unless the user did) on a node whose oldest GPU has
        compute capability `sm` (80 for A100)."""
        env = dict(self.plugin_env)
        env.update({knob: value for below, knob, value in self.plugin_env_below_sm if sm < below})
        return env


# aws-ofi-nccl v1.9.2-aws (commit cf6f657f): platform-aws.c gives p4d/p4de/p5 a latency of 75 us
# ("NET/OFI Internode latency set at 75.0 us"); nccl_ofi_net.c set_nic_props_default sets guid =
# dev_id; nccl_ofi_rdma.c sets maxComms = NCCL_OFI_RDMA_MAX_COMMS (1 << 18) and allows
# MAX_NUM_RAILS (include/nccl_ofi_rdma.h) = 4 NICs per device. platform-aws.c platform_init sets
# NCCL_NVLSTREE_MAX_CHUNKSIZE and NCCL_NVLS_CHUNKSIZE to 512 KiB (setenv without overwrite) on
# every NVIDIA platform ("NET/OFI Setting NCCL_NVLS_CHUNKSIZE to 512KiB"). LL and LL128 need the NIC to
# land each aligned 128 B in order: platform-aws.c (v1.7.3-aws to v1.9.x) asks the EFA endpoint for
# FI_OPT_EFA_*_IN_ORDER_ALIGNED_128_BYTES and, where it is refused, sets NCCL_PROTO=simple (configure_nccl_proto,
# setenv without overwrite); the v1.7.3-aws release notes' "Do not disable LL and LL128 protocols on P5
# instances" exempts the H100 platforms, so the A100 ones (p4d, p4de) run Simple only.
# Google's GPUDirect-TCPXO plugin (github.com/google/nccl-plugin-gpudirect-tcpxo, fastrak_offload @ 0906f674):
# ncclNet "FasTrak"; GetProperties (nccl_shim.cc) reports latency 0, maxComms 65536, maxRecvs 1, host
# and CUDA pointers (GPUDirect: payloads land in GPU memory, NCCL_NET_DEVICE_HOST, no unpack kernel);
# Iflush is not implemented (nothing to flush). GCP's A3 Mega gives each GPU a 200 Gbps NIC. What a
# TCP message costs the plugin's offload path is not published and not modelled.
FABRICS: Mapping[str, Fabric] = MappingProxyType({f.name: f for f in (
    Fabric("ib", "mlx5_", "", "0x020700", "IB", True, 400, 0.13),
    Fabric("roce", "mlx5_", "", "0x020000", "IB", True, 400, 0.6),
    Fabric("efa", "rdmap", "s0", "0x020000", "AWS Libfabric", True, 100, 1.5,
           net_latency_us=75.0, net_maxconn=1 << 18, guid_is_dev=True, max_rails=4,
           plugin_env=(("NCCL_NVLSTREE_MAX_CHUNKSIZE", "524288"), ("NCCL_NVLS_CHUNKSIZE", "524288")),
           plugin_env_below_sm=((90, "NCCL_PROTO", "simple"),)),
    Fabric("tcp", "eth", "", "0x020000", "Socket", False, 100, 5.0),
    Fabric("tcpxo", "eth", "", "0x020000", "FasTrak", True, 200, 0.6, net_maxconn=65536),
)})


def gpu_model(name: str, where: str = "--gpu") -> GpuModel:
    """The GpuModel called `name` (case-insensitive; '-sxm' suffixes accepted)."""
    key = name.strip().lower().replace("_", "-")
    key = key.removesuffix("-sxm").removesuffix("-sxm5").removesuffix("-sxm4")
    if key in GPU_MODELS:
        return GPU_MODELS[key]
    raise UnknownNameError(f"unknown GPU model '{name}'", where, ", ".join(GPU_MODELS))


def fabric(name: str, where: str = "--fabric") -> Fabric:
    """The Fabric called `name`."""
    key = name.strip().lower()
    if key in FABRICS:
        return FABRICS[key]
    raise UnknownNameError(f"unknown fabric '{name}'", where, ", ".join(FABRICS))


def gpu_model_for_device(device_id: int) -> GpuModel | None:
    """The model whose PCI device id this is, if nicksim knows it."""
    for model in GPU_MODELS.values():
        if device_id in model.pci_devices:
            return model
    return None
