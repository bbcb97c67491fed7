"""The kernel's thread limits (src/include/device.h, unchanged 2.18-2.30), the bounds
tuning.cc's getNthreads holds NCCL_NTHREADS and NCCL_LL128_NTHREADS to, and what CUDA reports
of each GPU model nicksim knows (CUDA_DEVICES: the name and memory nccl-tests prints and sizes by)."""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

__all__ = ["WARP_SIZE", "NCCL_MAX_NTHREADS", "NCCL_SIMPLE_MAX_NTHREADS", "NCCL_LL_MAX_NTHREADS",
           "NCCL_LL128_MAX_NTHREADS", "THREAD_BOUNDS", "CudaDevice", "CUDA_DEVICES"]

WARP_SIZE = 32
NCCL_MAX_NTHREADS = 640
NCCL_SIMPLE_MAX_NTHREADS = 512
NCCL_LL_MAX_NTHREADS = 512
NCCL_LL128_MAX_NTHREADS = 640

# (min, max) per variable: getNthreads(name, env, 2*WARP_SIZE, NCCL_{SIMPLE,LL}_MAX_NTHREADS, ...)
# and getNthreads("NCCL_LL128_NTHREADS", env, NCCL_LL128_MAX_NTHREADS/4, NCCL_LL128_MAX_NTHREADS, ...).
THREAD_BOUNDS = {
    "NCCL_NTHREADS": (2 * WARP_SIZE, NCCL_SIMPLE_MAX_NTHREADS),
    "NCCL_LL128_NTHREADS": (NCCL_LL128_MAX_NTHREADS // 4, NCCL_LL128_MAX_NTHREADS),
}


@dataclass(frozen=True)
class CudaDevice:
    """What cudaGetDeviceProperties says of one GPU model: `name` (prop.name, as nccl-tests prints
    it after the bus id) and `total_global_mem` (prop.totalGlobalMem, bytes, what nccl-tests sizes
    its buffers against), and where that number comes from: "log" where it is worked back from a
    published nccl-tests "Reducing maxBytes" line or a device record, exact to the byte; "nominal"
    where it is the advertised capacity in GiB, which CUDA reports a little under (an H100 80GB
    reports 79.1 GiB), so a reduction may come a few hundred MB later than on the real GPU."""

    name: str
    total_global_mem: int
    source: str


_GIB = 1 << 30

# Keyed by topology.hardware.GPU_MODELS names; where a model comes in several memory sizes, the
# one its catalog system has. The "log" values, worked back from the rule in src/common.cu:
# h100: "Reducing maxBytes to 27951912277" with -c 1 under the v2.13-v2.16.5 rule
#   (totalGlobalMem - 1 GiB) / 3, NVIDIA/nccl-tests issue #322;
# h200: "Reducing maxBytes to 48247057066" with -c 1 from a published nccl-tests 2.18.3 run on
#   two HGX H200 hosts, rule (totalGlobalMem - 4 GiB reserve - 1 GiB) / 3;
# a100: torch.cuda.get_device_properties(0).total_memory of an A100-SXM4-80GB in a public
#   device record (the same number as totalGlobalMem);
# v100: "Reducing maxBytes to 5284866730" (Tesla V100-SXM2-16GB, -c 1, the old rule) in a
#   published flux run of all_reduce_perf.
CUDA_DEVICES: Mapping[str, CudaDevice] = MappingProxyType({
    "v100": CudaDevice("Tesla V100-SXM2-16GB", 16928342016, "log"),
    "a100": CudaDevice("NVIDIA A100-SXM4-80GB", 85056798720, "log"),
    "a100-pcie": CudaDevice("NVIDIA A100-PCIE-40GB", 42406903808, "log"),  # NVIDIA/nccl-tests issue #350
    "a10g": CudaDevice("NVIDIA A10G", 24 * _GIB, "nominal"),
    "h100": CudaDevice("NVIDIA H100 80GB HBM3", 84929478656, "log"),
    "h100-pcie": CudaDevice("NVIDIA H100 PCIe", 80 * _GIB, "nominal"),
    "h800": CudaDevice("NVIDIA H800", 80 * _GIB, "nominal"),
    "h20": CudaDevice("NVIDIA H20", 96 * _GIB, "nominal"),
    "h200": CudaDevice("NVIDIA H200", 150109880320, "log"),
    "gh200": CudaDevice("NVIDIA GH200 480GB", 96 * _GIB, "nominal"),
    "b200": CudaDevice("NVIDIA B200", 180 * _GIB, "nominal"),
    "gb200": CudaDevice("NVIDIA GB200", 186 * _GIB, "nominal"),
    "l40s": CudaDevice("NVIDIA L40S", 48 * _GIB, "nominal"),
    "l4": CudaDevice("NVIDIA L4", 24 * _GIB, "nominal"),
    "rtx4090": CudaDevice("NVIDIA GeForce RTX 4090", 24 * _GIB, "nominal"),
    "rtx2080ti": CudaDevice("NVIDIA GeForce RTX 2080 Ti", 11 * _GIB, "nominal"),
})
