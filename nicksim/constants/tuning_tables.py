"""NCCL's tuning tables per release line (src/graph/tuning.cc), as immutable data.

`tuning_tables(version)` promises the latency and bandwidth tables that the named NCCL
release feeds into its time model (ncclTopoTuneModel): base and per-hardware latencies,
the per-channel bandwidth caps of LL, LL128, Tree and NVLS Tree, the NVLS efficiencies and
the tree correction factors, plus the thread thresholds of src/include/comm.h. Every table
was read from the tag named in `source`; a table shared by several releases is the same
object, so `tuning_tables(a).x is tuning_tables(b).x` says that NCCL did not change it.

Indexes follow NCCL: algorithm (ALGORITHMS order), protocol (LL, LL128, Simple), hardware
(NVLink, PCI, NET), compute-capability row (Volta, Ampere, Hopper, Blackwell) and node-count
column (1 node, 2 nodes, more). Latencies are in microseconds, bandwidths in GB/s.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .rules import Changes, resolve
from .versions import NcclVersion

__all__ = [
    "ALGORITHMS",
    "PROTOCOLS",
    "HARDWARE",
    "COMPCAP_ROWS",
    "NET_OVERHEAD_SIMPLE_POSTS",
    "TuningTables",
    "tuning_tables",
    "TUNING_CHANGES",
    "TimeModelRules",
    "time_model_rules",
    "TIME_MODEL_CHANGES",
]

ALGORITHMS: tuple[str, ...] = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS: tuple[str, ...] = ("LL", "LL128", "Simple")
HARDWARE: tuple[str, ...] = ("NVLINK", "PCI", "NET")
COMPCAP_ROWS: tuple[str, ...] = ("Volta", "Ampere", "Hopper", "Blackwell")

Row3 = tuple[float, float, float]

# A Simple network step costs the proxy three times getNetOverhead, LL and LL128 once (tuning.cc
# ncclTopoTuneModel, rings across nodes: "if (p == NCCL_PROTO_SIMPLE) netOverhead *= 3"; 2.18.6
# through 2.30.7).
NET_OVERHEAD_SIMPLE_POSTS = 3

# --- baseLat[algorithm][protocol], us -------------------------------------------------------------
# 2.18.6: CollNet rows copy Tree's and NVLS carries 23 us; 2.19 moved NVLS/CollNet cost into hwLat.
# 2.23 gave Tree/Simple its 8.4 us; 2.28 added PAT's row (2.23-2.27 leave it zero-initialised:
# their arrays have six rows for seven algorithms and price PAT with a formula instead).

# tuning.cc (2.18.6)
_BASE_LAT_218 = (
    (6.8, 14.0, 0.0),
    (6.6, 14.0, 8.4),
    (6.8, 14.0, 0.0),
    (6.8, 14.0, 0.0),
    (0.0, 0.0, 23.0),
    (0.0, 0.0, 23.0),
)

# tuning.cc (2.19.4 .. 2.22.3)
_BASE_LAT_219 = (
    (6.8, 14.0, 0.0),
    (6.6, 14.0, 8.4),
    (0.0, 0.0, 0.0),
    (0.0, 0.0, 0.0),
    (0.0, 0.0, 0.0),
    (0.0, 0.0, 0.0),
)

# tuning.cc (2.23.4 .. 2.27.7)
_BASE_LAT_223 = (
    (6.8, 14.0, 8.4),
    (6.6, 14.0, 8.4),
    (0.0, 0.0, 0.0),
    (0.0, 0.0, 0.0),
    (0.0, 0.0, 0.0),
    (0.0, 0.0, 0.0),
    (0.0, 0.0, 0.0),  # PAT, zero-filled
)

# tuning.cc ncclTunerConstantsDefaults (2.28.9 .. 2.30.7)
_BASE_LAT_228 = (
    (6.8, 14.0, 8.4),
    (6.6, 14.0, 8.4),
    (0.0, 0.0, 0.0),
    (0.0, 0.0, 0.0),
    (0.0, 0.0, 0.0),
    (0.0, 0.0, 0.0),
    (8.0, 8.0, 8.0),
)

# --- hwLat[hardware][algorithm][protocol], us ----------------------------------------------------
# 2.19-2.22 price Tree/Simple at 28 us on every fabric; 2.21 raised NVLS from 23 to 25 us on NVLink;
# NET NVLS Tree is 19 us in 2.18, 14 us in 2.19-2.27 and 20.9 us from 2.28.
# tuning.cc (2.18.6)
_HW_LAT_218 = (
    (
        (0.6, 1.25, 4.0),
        (0.6, 1.9, 3.4),
        (0.0, 0.0, 8.0),
        (0.0, 0.0, 4.75),
        (0.0, 0.0, 0.0),
        (0.0, 0.0, 0.0),
    ),
    (
        (1.0, 1.9, 6.0),
        (1.0, 2.5, 5.7),
        (0.0, 0.0, 8.0),
        (0.0, 0.0, 8.0),
        (0.0, 0.0, 0.0),
        (0.0, 0.0, 0.0),
    ),
    (
        (5.0, 8.5, 14.0),
        (2.7, 4.0, 14.0),
        (0.0, 0.0, 10.7),
        (0.0, 0.0, 14.0),
        (0.0, 0.0, 18.0),
        (0.0, 0.0, 19.0),
    ),
)

# tuning.cc (2.19.4, 2.20.5)
_HW_LAT_219 = (
    (
        (0.6, 1.25, 28.0),
        (0.6, 1.9, 3.4),
        (0.0, 0.0, 3.7),
        (0.0, 0.0, 2.8),
        (0.0, 0.0, 23.0),
        (0.0, 0.0, 23.0),
    ),
    (
        (1.0, 1.9, 28.0),
        (1.0, 2.5, 5.7),
        (0.0, 0.0, 3.7),
        (0.0, 0.0, 2.8),
        (0.0, 0.0, 0.0),
        (0.0, 0.0, 0.0),
    ),
    (
        (5.0, 8.5, 28.0),
        (2.7, 4.0, 14.0),
        (0.0, 0.0, 31.0),
        (0.0, 0.0, 30.0),
        (0.0, 0.0, 18.0),
        (0.0, 0.0, 14.0),
    ),
)

# tuning.cc (2.21.5, 2.22.3)
_HW_LAT_221 = (
    (
        (0.6, 1.25, 28.0),
        (0.6, 1.9, 3.4),
        (0.0, 0.0, 3.7),
        (0.0, 0.0, 2.8),
        (0.0, 0.0, 25.0),
        (0.0, 0.0, 25.0),
    ),
    (
        (1.0, 1.9, 28.0),
        (1.0, 2.5, 5.7),
        (0.0, 0.0, 3.7),
        (0.0, 0.0, 2.8),
        (0.0, 0.0, 0.0),
        (0.0, 0.0, 0.0),
    ),
    (
        (5.0, 8.5, 28.0),
        (2.7, 4.0, 14.0),
        (0.0, 0.0, 31.0),
        (0.0, 0.0, 30.0),
        (0.0, 0.0, 18.0),
        (0.0, 0.0, 14.0),
    ),
)

# tuning.cc (2.23.4 .. 2.27.7)
_HW_LAT_223 = (
    (
        (0.6, 1.25, 4.0),
        (0.6, 1.9, 3.4),
        (0.0, 0.0, 3.7),
        (0.0, 0.0, 2.8),
        (0.0, 0.0, 25.0),
        (0.0, 0.0, 25.0),
        (0.0, 0.0, 0.0),  # PAT, zero-filled
    ),
    (
        (1.0, 1.9, 4.0),
        (1.0, 2.5, 5.7),
        (0.0, 0.0, 3.7),
        (0.0, 0.0, 2.8),
        (0.0, 0.0, 0.0),
        (0.0, 0.0, 0.0),
        (0.0, 0.0, 0.0),  # PAT, zero-filled
    ),
    (
        (5.0, 8.5, 14.0),
        (2.7, 4.0, 14.0),
        (0.0, 0.0, 31.0),
        (0.0, 0.0, 30.0),
        (0.0, 0.0, 18.0),
        (0.0, 0.0, 14.0),
        (0.0, 0.0, 0.0),  # PAT, zero-filled
    ),
)

# tuning.cc ncclTunerConstantsDefaults (2.28.9 .. 2.30.7)
_HW_LAT_228 = (
    (
        (0.6, 1.25, 4.0),
        (0.6, 1.9, 3.4),
        (0.0, 0.0, 3.7),
        (0.0, 0.0, 2.8),
        (0.0, 0.0, 25.0),
        (0.0, 0.0, 25.0),
        (0.0, 0.0, 4.0),
    ),
    (
        (1.0, 1.9, 4.0),
        (1.0, 2.5, 5.7),
        (0.0, 0.0, 3.7),
        (0.0, 0.0, 2.8),
        (0.0, 0.0, 0.0),
        (0.0, 0.0, 0.0),
        (0.0, 0.0, 4.0),
    ),
    (
        (5.0, 8.5, 14.0),
        (2.7, 4.0, 14.0),
        (0.0, 0.0, 31.0),
        (0.0, 0.0, 30.0),
        (0.0, 0.0, 18.0),
        (0.0, 0.0, 20.9),
        (0.0, 0.0, 14.0),
    ),
)

# --- llMaxBws[compcap or CPU row][nodes], GB/s ---------------------------------------------------
# Until 2.20 the Hopper row repeats Ampere's; Blackwell's row arrives in 2.25.
# tuning.cc (2.18.6 .. 2.20.5)
_LL_MAX_218 = (
    (39.0, 39.0, 20.4),
    (87.7, 22.5, 19.0),
    (87.7, 22.5, 19.0),
)

# tuning.cc (2.21.5 .. 2.24.3)
_LL_MAX_221 = (
    (39.0, 39.0, 20.4),
    (87.7, 22.5, 19.0),
    (141.0, 45.0, 35.0),
)

# tuning.cc (2.25.1 .. 2.30.7)
_LL_MAX_225 = (
    (39.0, 39.0, 20.4),
    (87.7, 22.5, 19.0),
    (141.0, 45.0, 35.0),
    (282.0, 90.0, 70.0),
)

# --- per-channel caps [compcap row][nodes], GB/s ---------------------------------------------------
# tuning.cc (2.18.6 .. 2.24.3)
_RING_LL128_218 = (
    (20.0, 20.0, 20.0),
    (20.0, 20.0, 20.0),
    (36.7, 36.7, 36.7),
)

# tuning.cc (2.25.1 .. 2.27.7)
_RING_LL128_225 = (
    (20.0, 20.0, 20.0),
    (20.0, 20.0, 20.0),
    (36.7, 36.7, 36.7),
    (73.4, 73.4, 73.4),
)

# tuning.cc (2.28.9)
_RING_LL128_228 = (
    (20.0, 20.0, 20.0),
    (20.0, 20.0, 20.0),
    (36.7, 36.7, 36.7),
    (73.4, 34.6, 73.4),
)

# tuning.cc (2.29.7, 2.30.7)
_RING_LL128_229 = (
    (20.0, 20.0, 20.0),
    (20.0, 20.0, 20.0),
    (36.7, 36.7, 36.7),
    (40.0, 40.0, 40.0),
)

# tuning.cc (2.18.6 .. 2.24.3)
_TREE_LL128_218 = (
    (20.0, 20.0, 20.0),
    (20.0, 20.0, 20.0),
    (36.7, 36.7, 29.0),
)

# tuning.cc (2.25.1 .. 2.27.7)
_TREE_LL128_225 = (
    (20.0, 20.0, 20.0),
    (20.0, 20.0, 20.0),
    (36.7, 36.7, 29.0),
    (73.4, 73.4, 58.0),
)

# tuning.cc (2.28.9 .. 2.30.7)
_TREE_LL128_228 = (
    (20.0, 20.0, 20.0),
    (20.0, 20.0, 20.0),
    (36.7, 36.7, 29.0),
    (55.6, 31.67, 20.0),
)

# tuning.cc (2.18.6 .. 2.24.3)
_TREE_218 = (
    (26.5, 18.5, 10.0),
    (24.0, 23.6, 17.8),
    (38.7, 41.4, 36.0),
)

# tuning.cc (2.25.1 .. 2.27.7)
_TREE_225 = (
    (26.5, 18.5, 10.0),
    (24.0, 23.6, 17.8),
    (38.7, 41.4, 36.0),
    (77.4, 82.8, 72.0),
)

# tuning.cc (2.28.9 .. 2.30.7)
_TREE_228 = (
    (26.5, 18.5, 10.0),
    (24.0, 23.6, 17.8),
    (38.7, 41.4, 36.0),
    (70.0, 42.8, 24.0),
)

# tuning.cc (2.28.9, 2.29.7)
_NVLS_TREE_228 = (
    (26.5, 18.5, 10.0),
    (24.0, 23.6, 17.8),
    (0.0, 57.7, 45.5),
    (0.0, 96.0, 43.8),
)

# tuning.cc (2.30.7)
_NVLS_TREE_230 = (
    (26.5, 18.5, 10.0),
    (24.0, 23.6, 17.8),
    (0.0, 57.7, 45.5),
    (0.0, 96.0, 80.0),
)

# NVLS efficiency per compcap row; before 2.28 NVLS bandwidth had no efficiency table.
_NVLS_EFFICIENCY_228 = (0.0, 0.0, 0.85, 0.74)  # tuning.cc nvlsEfficiency (2.28.9 .. 2.30.7)

# --- treeCorrectionFactor[protocol][log2(bytes/64) bucket] ----------------------------------------
# 23 buckets until 2.28; 2.29 added a 24th (1.0 / 1.0 / 0.9) for the largest sizes.
# tuning.cc (2.18.6 .. 2.28.9)
_TREE_CORRECTION_218 = (
    (1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0),
    (0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9),
)

# tuning.cc (2.29.7, 2.30.7)
_TREE_CORRECTION_229 = (
    (1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0, 1.0),
    (0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9, 0.9),
)


@dataclass(frozen=True)
class TuningTables:
    """The tables one NCCL release tunes with; see the module docstring for the indexes.

    Algorithms a release does not have (PAT before 2.23) are simply absent: `base_lat_us`
    and each `hw_lat_us[hw]` have one row per entry of `algorithms`. Compcap rows a release
    does not have (Blackwell before 2.25) are absent too; `compcap_row` maps a GPU onto the
    rows the release has, as NCCL does.
    """

    version: NcclVersion
    source: str
    algorithms: tuple[str, ...]
    base_lat_us: tuple[Row3, ...]
    hw_lat_us: tuple[tuple[Row3, ...], tuple[Row3, ...], tuple[Row3, ...]]
    ll_max_bw_gbps: tuple[Row3, ...]
    per_ch_max_ring_ll128_bw_gbps: tuple[Row3, ...]
    per_ch_max_tree_ll128_bw_gbps: tuple[Row3, ...]
    per_ch_max_tree_bw_gbps: tuple[Row3, ...]
    per_ch_max_nvls_tree_bw_gbps: tuple[Row3, ...] | None
    nvls_efficiency: tuple[float, ...] | None
    tree_correction_factor: tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]
    # src/include/comm.h (unchanged 2.18-2.30): NCCL_{LL,LL128,SIMPLE}_THREAD_THRESHOLD.
    ll_thread_threshold: int = 8
    ll128_thread_threshold: int = 8
    simple_thread_threshold: int = 64
    # tuning.cc: CollNet Direct/Chain Simple thresholds are fixed at 512.
    collnet_thread_threshold: int = 512

    def base_lat(self, algorithm: str, protocol: str) -> float:
        """baseLat[algorithm][protocol] in us."""
        return self.base_lat_us[self.algorithms.index(algorithm)][PROTOCOLS.index(protocol)]

    def hw_lat(self, hardware: str, algorithm: str, protocol: str) -> float:
        """hwLat[hardware][algorithm][protocol] in us."""
        rows = self.hw_lat_us[HARDWARE.index(hardware)]
        return rows[self.algorithms.index(algorithm)][PROTOCOLS.index(protocol)]

    def compcap_row(self, min_compcap: int) -> int:
        """The row NCCL indexes with the lowest SM of the communicator (tuning.cc compCapIndex)."""
        if min_compcap >= 100 and len(self.per_ch_max_tree_bw_gbps) > 3:
            return 3
        if min_compcap >= 90:
            return 2
        return 1 if min_compcap >= 80 else 0

    @staticmethod
    def nodes_column(n_nodes: int) -> int:
        """Column for 1, 2 or more nodes (tuning.cc index2)."""
        return 0 if n_nodes <= 1 else 1 if n_nodes == 2 else 2


def _tag(version: NcclVersion) -> str:
    return f"src/graph/tuning.cc, NCCL v{version}-1"


# Per table: (first release line's minor, table), oldest first (resolved as rules.RELEASE_CHANGES is).
TUNING_CHANGES: Changes = {
    "algorithms": ((18, ALGORITHMS[:6]), (23, ALGORITHMS)),  # PAT from 2.23
    "base_lat_us": ((18, _BASE_LAT_218), (19, _BASE_LAT_219), (23, _BASE_LAT_223), (28, _BASE_LAT_228)),
    "hw_lat_us": ((18, _HW_LAT_218), (19, _HW_LAT_219), (21, _HW_LAT_221), (23, _HW_LAT_223), (28, _HW_LAT_228)),
    "ll_max_bw_gbps": ((18, _LL_MAX_218), (21, _LL_MAX_221), (25, _LL_MAX_225)),
    "per_ch_max_ring_ll128_bw_gbps": ((18, _RING_LL128_218), (25, _RING_LL128_225), (28, _RING_LL128_228),
                                      (29, _RING_LL128_229)),
    "per_ch_max_tree_ll128_bw_gbps": ((18, _TREE_LL128_218), (25, _TREE_LL128_225), (28, _TREE_LL128_228)),
    "per_ch_max_tree_bw_gbps": ((18, _TREE_218), (25, _TREE_225), (28, _TREE_228)),
    "per_ch_max_nvls_tree_bw_gbps": ((18, None), (28, _NVLS_TREE_228), (30, _NVLS_TREE_230)),
    "nvls_efficiency": ((18, None), (28, _NVLS_EFFICIENCY_228)),
    "tree_correction_factor": ((18, _TREE_CORRECTION_218), (29, _TREE_CORRECTION_229)),
}


def tuning_tables(version: NcclVersion) -> TuningTables:
    """The tuning tables of a modelled NCCL release line."""
    return TuningTables(version=version, source=_tag(version), **resolve(TUNING_CHANGES, version.minor))


@dataclass(frozen=True)
class TimeModelRules:
    """How one release's tuning.cc prices collectives, beyond its tables (ncclTopoTuneModel and
    ncclTopoGetAlgoTime of the tag the release line was read from; see docs/tuning.md)."""

    version: NcclVersion
    # Algorithms priced for AllGather and ReduceScatter: the ring only in 2.18, NVLS from 2.19,
    # CollNet Direct from 2.20, PAT from 2.23.
    ag_rs_algorithms: tuple[str, ...]
    # NVLS bandwidth: "graph" (2.18: the graph's bandwidth, x5/6; NVLS Tree x0.7 nNodes / 2(nNodes-1)),
    # "min" (2.19-2.26: min(bwIntra, bwInter), NVLS Tree min(bwIntra, bwInter or bwInter/2), both x5/6),
    # "min_ag_rs" (2.27: AllGather/ReduceScatter min(bwIntra (ppn-1)/ppn, 0.9 bwInter)),
    # "efficiency" (2.28+: nvlsEfficiency x (nCh-1)/nCh, x2 for AllReduce, NVLS Tree cap, x nRanks/nsteps).
    nvls_bw: str
    # Ring LL at 1/4 of the bus bandwidth (1/3 for one-node Broadcast, AllGather, ReduceScatter) until 2.20.
    ring_ll_quarter: bool
    # Ring LL128 at x0.7 instead of x0.92 with one GPU per node (2.18-2.22).
    ring_ll128_one_gpu_penalty: bool
    # PAT bandwidth factor: 0.85 in 2.23, 0.75 from 2.24 (no PAT before 2.23).
    pat_bw_factor: float
    # PAT needs SM60 even when NCCL_PAT_ENABLE forces it (2.26+).
    pat_needs_sm60: bool
    # PAT latency starts from a literal 8 us (2.23-2.27, whose baseLat has no PAT row) or baseLat (2.28+).
    pat_literal_base: bool
    # CollNet Direct arity serialisation per local rank: 0.5 us in 2.18, 0.4 us from 2.19.
    collnet_arity_us: float
    # CollNet Direct AllGather/ReduceScatter bandwidth: "interp" (2.20-2.26: ppn x bwIntra, x0.95 at one GPU
    # per node to x0.85 at eight), "min" (2.27+: ppn x min(bwIntra, 0.9 bwInter), and NVLS and CollNet Direct
    # across nodes need the plugin's collective and a head per local rank); None before 2.20 (not priced).
    collnet_ag_rs_bw: str | None
    # 2.18 prices NVLS as baseLat + the NET latency, NVLS Tree as baseLat + 2(nNodes-1) NET latencies.
    nvls_base_latency: bool
    # With one GPU per node the network latency is the Tree's (2.23+).
    tree_net_latency_at_one_gpu: bool
    # A ring AllReduce crosses the network 2 nNodes times until 2.22, 2(nNodes-1) from 2.23.
    ring_allreduce_inter_steps_2n: bool
    # Only the ring converts AllGather/ReduceScatter bus bandwidth to algorithm bandwidth (2.23+).
    ag_rs_convert_ring_only: bool
    # NCCL_ALGO / NCCL_PROTO per function (`allreduce:tree;...`, 2.24+) instead of one list.
    per_function_lists: bool
    # comm->ringbdw: the ring's bandwidth kept for a collective left without algorithm (2.19-2.23);
    # from 2.22 a disabled protocol is dropped from it too.
    ring_backup: bool
    ring_backup_follows_proto: bool
    # 2.18 never disables the ring outside AllReduce ("to run real apps with NCCL_ALGO=TREE").
    ring_kept_outside_allreduce: bool
    # NCCL_ALGO naming only CollNet algorithms falls back to ring and tree (until 2.23).
    collnet_only_fallback: bool
    # Hosts of mixed CPU vendors take the AMD row of llMaxBws (2.24+).
    mixed_vendor_as_amd: bool
    # LL128 by default: the SMs listed (until 2.26), or any SM >= 70 with NCCL_LL128_C2C (None, 2.27+).
    ll128_sms: tuple[int, ...] | None
    # LL128 on mixed SMs when all are SM90+ (2.30).
    ll128_mixed_sm90: bool
    # NVLS Tree AllReduce takes the tree correction factor on SM100 x86 hosts (2.29+).
    nvls_tree_correction: bool


# Per rule: (first release line's minor, value), oldest first (tuning.cc at each tag; see TimeModelRules).
TIME_MODEL_CHANGES: Changes = {
    "ag_rs_algorithms": ((18, ("Ring",)), (19, ("Ring", "NVLS")), (20, ("Ring", "NVLS", "CollNetDirect")),
                         (23, ("Ring", "NVLS", "CollNetDirect", "PAT"))),
    "nvls_bw": ((18, "graph"), (19, "min"), (27, "min_ag_rs"), (28, "efficiency")),
    "ring_ll_quarter": ((18, True), (21, False)),
    "ring_ll128_one_gpu_penalty": ((18, True), (23, False)),
    "pat_bw_factor": ((18, 0.75), (23, 0.85), (24, 0.75)),
    "pat_needs_sm60": ((18, False), (26, True)),
    "pat_literal_base": ((18, True), (28, False)),
    "collnet_arity_us": ((18, 0.5), (19, 0.4)),
    "collnet_ag_rs_bw": ((18, None), (20, "interp"), (27, "min")),
    "nvls_base_latency": ((18, True), (19, False)),
    "tree_net_latency_at_one_gpu": ((18, False), (23, True)),
    "ring_allreduce_inter_steps_2n": ((18, True), (23, False)),
    "ag_rs_convert_ring_only": ((18, False), (23, True)),
    "per_function_lists": ((18, False), (24, True)),
    "ring_backup": ((18, False), (19, True), (24, False)),
    "ring_backup_follows_proto": ((18, False), (22, True), (24, False)),
    "ring_kept_outside_allreduce": ((18, True), (19, False)),
    "collnet_only_fallback": ((18, True), (24, False)),
    "mixed_vendor_as_amd": ((18, False), (24, True)),
    "ll128_sms": ((18, (70, 80, 90)), (25, (70, 80, 90, 100, 120)), (27, None)),
    "ll128_mixed_sm90": ((18, False), (30, True)),
    "nvls_tree_correction": ((18, False), (29, True)),
}


@lru_cache(maxsize=None)
def time_model_rules(version: NcclVersion) -> TimeModelRules:
    """The time-model rules of one modelled release line, read from its tuning.cc."""
    return TimeModelRules(version=version, **resolve(TIME_MODEL_CHANGES, version.minor))
