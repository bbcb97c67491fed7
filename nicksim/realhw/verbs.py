"""Whether NCCL's IB/RoCE verbs transport could be used here, and why not.

`rdma_devices()` lists the RDMA devices the kernel exposes (/sys/class/infiniband, what
ibv_get_device_list reads); `verbs_unavailable()` says in one phrase why NET goes over sockets
instead: no RDMA device, no pyverbs (Debian's python3-pyverbs, whose API moves between
rdma-core releases), or a device with pyverbs but no verbs transport in nicksim yet. NCCL says
the same in its own words ("NET/IB : No device found.") before it falls back to sockets.
"""
from __future__ import annotations

import importlib.util
import os

__all__ = ["rdma_devices", "verbs_unavailable"]

_SYSFS = "/sys/class/infiniband"


def rdma_devices(sysfs: str = _SYSFS) -> list[str]:
    """The RDMA devices under `sysfs`, sorted (mlx5_0, rxe0, ...); none where the directory is missing."""
    try:
        return sorted(os.listdir(sysfs))
    except OSError:
        return []


def verbs_unavailable(sysfs: str = _SYSFS) -> str:
    """Why the verbs transport is not used on this host."""
    devices = rdma_devices(sysfs)
    if not devices:
        return f"no RDMA device in {sysfs}"
    if importlib.util.find_spec("pyverbs") is None:
        return f"RDMA device(s) {', '.join(devices)} but no pyverbs (apt install python3-pyverbs)"
    return f"RDMA device(s) {', '.join(devices)} with pyverbs, but nicksim has no verbs transport yet"
