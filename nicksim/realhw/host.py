"""The host the real backend runs on, described for the DES.

`nicksim run` plans every host as HOST_SYSTEM with a GPU per rank on it (runner.py), but its ranks
are processes: inside a host they move data through shared memory at this host's memory-copy
bandwidth, between hosts over TCP sockets through whatever rate the link allows. `describe_host(
nodes, ranks_per_node, link_mbit)` promises the job the DES must run to get the plans the real
backend runs (HOST_SYSTEM at its catalog NIC speed, fabric `tcp`, NCCL's Socket transport) and the
DES `--set` overrides that make its fabric carry what this host carries: `copy_gbps()` on every
link kind a shared-memory connection of HOST_SYSTEM crosses, the link's rate on the network's links.
The overrides depend on the host alone, not on how many ranks it runs, so a calibration at one
layout carries to another. Python's per-call and per-step costs are not described: calibration
fits them.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

import numpy as np

from ..errors import UsageError
from ..job import JobSpec, load_job
from ..params import read_params
from ..topology.catalog import HOST_SYSTEM
from .runner import MAX_RANKS_PER_HOST

__all__ = ["HostDescription", "copy_gbps", "copy_nbytes", "describe_host", "shm_link_kinds", "SET_NAME_OF_KIND",
           "FABRIC", "NETWORK_KINDS"]

# The fabric whose transport the real backend's sockets are: NCCL's NET/Socket, no GPUDirect RDMA
# (a socket's bytes pass through host memory). Its plans are the same as the catalog's `roce` at
# the same NIC speed, which is what the real backend plans with.
FABRIC = "tcp"

# The DES's `--set` name for the bandwidth of each fabric link kind (model/hwparams.py LINK_KINDS,
# turned around: an engine does not import the other, so the table is repeated here and a test
# holds the two equal).
SET_NAME_OF_KIND: Mapping[str, str] = MappingProxyType({
    "NVL": "nvlink.bw_gbps", "PCI": "pcie.bw_gbps", "C2C": "c2c.bw_gbps", "SYS": "cpu.bw_gbps",
    "NET": "net.bw_gbps", "CABLE": "cable.bw_gbps"})
# What a byte crosses between hosts: the NIC's port to the network, and the cables beyond it.
NETWORK_KINDS = ("NET", "CABLE")

_MIN_COPY_NBYTES = 64 << 20
_CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")


@dataclass(frozen=True)
class HostDescription:
    """The DES's picture of `nodes` hosts running `ranks_per_node` ranks each: `job` is the job whose
    plans the real backend runs, `overrides` the `--set` values (name -> GB/s) that give its links
    this host's bandwidths, from `copy_gbps` (shared memory) and `link_mbit` (the link between
    hosts; None: left as the catalog has it)."""

    job: JobSpec
    overrides: Mapping[str, float]
    copy_gbps: float
    link_mbit: float | None

    def system_args(self) -> list[str]:
        """The job as the SYSTEM options of `nicksim perf` and `nicksim calibrate` name it."""
        args = ["--system", str(self.job.system), "--nodes", str(self.job.nodes),
                "--gpus-per-node", str(self.job.gpus_per_node), "--fabric", str(self.job.fabric)]
        return args + (["--nic-gbps", f"{self.job.nic_gbps:g}"] if self.job.nic_gbps is not None else [])

    def set_args(self) -> list[str]:
        """The overrides as `--set NAME=VALUE` arguments, in name order."""
        return [arg for name in sorted(self.overrides) for arg in ("--set", f"{name}={self.overrides[name]:.6g}")]


def copy_nbytes() -> int:
    """A buffer size no cache of this host holds: four times its largest cache (sysfs), at least 64 MiB."""
    largest = 0
    for size in _CACHE_DIR.glob("index*/size"):
        text = size.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            largest = max(largest, int(text.rstrip("KMG")) * scale)
        except ValueError:
            continue  # a size sysfs writes in a form not known here says nothing of the others
    return max(_MIN_COPY_NBYTES, 4 * largest)


def copy_gbps(nbytes: int | None = None, repeats: int = 5) -> float:
    """This host's memory-copy bandwidth in GB/s (1e9 bytes/s), as the real backend's shared-memory
    transport sees it: numpy copying `nbytes` (default copy_nbytes(), larger than every cache) from
    one buffer to another, the best of `repeats` copies (the least disturbed by other work)."""
    nbytes = copy_nbytes() if nbytes is None else int(nbytes)
    if nbytes <= 0 or repeats < 1:
        raise UsageError(f"copy of {nbytes} bytes, {repeats} times", "copy_gbps", "a size above 0, at least once")
    src = np.ones(nbytes, dtype=np.uint8)  # written, so every page is mapped before the clock starts
    dst = np.zeros(nbytes, dtype=np.uint8)
    best_s = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best_s = min(best_s, time.perf_counter() - start)
    return nbytes / max(best_s, 1e-9) / 1e9


def shm_link_kinds() -> tuple[str, ...]:
    """The fabric link kinds (model/fabric.py FabricLink.kind) NCCL's path between two GPUs of
    HOST_SYSTEM crosses wherever its transport is SHM, over every pair of the host's GPUs, sorted;
    LOC, a GPU's link to its own PCI endpoint, is no link a copy crosses and is left out."""
    job = load_job(JobSpec(system=HOST_SYSTEM, fabric=FABRIC), read_params({}))
    paths, system = job.paths, job.paths.system
    kinds = set()
    for (rank_a, rank_b), transport in paths.transports.items():
        if transport.kind != "SHM":
            continue
        for node, position in paths.gpu_path(rank_a, rank_b).links:
            kinds.add(system.nodes[node].links[position].kind)
    kinds.discard("LOC")
    return tuple(sorted(kinds))


def describe_host(nodes: int, ranks_per_node: int, link_mbit: float | None = None,
                  copy_bw_gbps: float | None = None) -> HostDescription:
    """`nodes` hosts of `ranks_per_node` ranks each, joined by a link of `link_mbit` Mbit/s per
    direction (None: as the catalog has it), for the DES: see the module docstring. The copy
    bandwidth is measured (copy_gbps()) unless `copy_bw_gbps` gives it.

    The job keeps HOST_SYSTEM's NIC speed even where the link is slower: NCCL's choices depend on it
    and the real backend plans at the catalog's speed; the link's rate reaches the DES as link
    bandwidths instead, which change no plan."""
    if nodes < 1 or not 1 <= ranks_per_node <= MAX_RANKS_PER_HOST:
        raise UsageError(f"{nodes} host(s) of {ranks_per_node} rank(s)", "describe_host",
                         f"at least one host of 1 to {MAX_RANKS_PER_HOST} ranks (the GPUs {HOST_SYSTEM} has)")
    if link_mbit is not None and not link_mbit > 0:
        raise UsageError(f"a link of {link_mbit} Mbit/s", "describe_host", "a rate above 0")
    copy_bw = copy_gbps() if copy_bw_gbps is None else float(copy_bw_gbps)
    overrides = {SET_NAME_OF_KIND[kind]: copy_bw for kind in shm_link_kinds()}
    if link_mbit is not None:
        overrides.update({SET_NAME_OF_KIND[kind]: link_mbit / 8000 for kind in NETWORK_KINDS})
    job = JobSpec(system=HOST_SYSTEM, nodes=nodes, gpus_per_node=ranks_per_node, fabric=FABRIC)
    return HostDescription(job, MappingProxyType(overrides), copy_bw, link_mbit)
