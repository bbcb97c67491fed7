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

from .versions import NcclVersion

__all__ = [
    "ALGORITHMS",
    "PROTOCOLS",
    "HARDWARE",
    "COMPCAP_ROWS",
    "NET_OVERHEAD_SIMPLE_POSTS",
    "TuningTables",
    "tuning_tables",
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


def tuning_tables(version: NcclVersion) -> TuningTables:
    """The tuning tables of a modelled NCCL release line."""
    minor = version.minor
    algorithms = ALGORITHMS if minor >= 23 else ALGORITHMS[:6]
    base = _BASE_LAT_228 if minor >= 28 else _BASE_LAT_223 if minor >= 23 else _BASE_LAT_219 if minor >= 19 else _BASE_LAT_218
    hw = (_HW_LAT_228 if minor >= 28 else _HW_LAT_223 if minor >= 23 else _HW_LAT_221 if minor >= 21
          else _HW_LAT_219 if minor >= 19 else _HW_LAT_218)
    return TuningTables(
        version=version,
        source=_tag(version),
        algorithms=algorithms,
        base_lat_us=base,
        hw_lat_us=hw,
        ll_max_bw_gbps=_LL_MAX_225 if minor >= 25 else _LL_MAX_221 if minor >= 21 else _LL_MAX_218,
        per_ch_max_ring_ll128_bw_gbps=(_RING_LL128_229 if minor >= 29 else _RING_LL128_228 if minor >= 28
                                       else _RING_LL128_225 if minor >= 25 else _RING_LL128_218),
        per_ch_max_tree_ll128_bw_gbps=(_TREE_LL128_228 if minor >= 28 else _TREE_LL128_225 if minor >= 25
                                       else _TREE_LL128_218),
        per_ch_max_tree_bw_gbps=_TREE_228 if minor >= 28 else _TREE_225 if minor >= 25 else _TREE_218,
        per_ch_max_nvls_tree_bw_gbps=_NVLS_TREE_230 if minor >= 30 else _NVLS_TREE_228 if minor >= 28 else None,
        nvls_efficiency=_NVLS_EFFICIENCY_228 if minor >= 28 else None,
        tree_correction_factor=_TREE_CORRECTION_229 if minor >= 29 else _TREE_CORRECTION_218,
    )
