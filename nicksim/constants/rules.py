"""What changed between NCCL releases, as one table: `rules(version)` resolves it for a release line.

Every behaviour the stages take from the release is a field of `ReleaseRules`; `RELEASE_CHANGES`
gives, per field, its value from the first modelled line that has it: `"maxchannels": ((18, 32),
(25, 64))` reads "32 from 2.18, 64 from 2.25 on". A release line takes the last entry at or before
it. Modelling a new NCCL release means a row in versions.MODELLED_VERSIONS and, here, an entry for
each behaviour that changed in it; the stages never compare release numbers themselves.

Values are read from NVIDIA/nccl at the tags of versions.MODELLED_VERSIONS; each field's comment
names the file (at the release where it changed). A value of the form "2.19" names the variant of
a function first shipped in that release, where one switch covers a set of changes made together.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from ..errors import UsageError
from .versions import DEFAULT_VERSION, MODELLED_VERSIONS, NcclVersion

__all__ = ["ReleaseRules", "RELEASE_CHANGES", "Changes", "rules", "rules_for_minor", "resolve", "value_at",
           "check_changes", "releases_where"]

# (first release line's minor, value), oldest first.
Changes = Mapping[str, tuple[tuple[int, Any], ...]]

EARLIEST_MINOR = MODELLED_VERSIONS[0].minor


def value_at(steps: tuple[tuple[int, Any], ...], minor: int) -> Any:
    """The value of one rule in release line 2.`minor`: its last entry at or before that line."""
    found = None
    for first, value in steps:
        if first > minor:
            break
        found = (value,)
    if found is None:
        raise KeyError(f"no value for 2.{minor} (first entry {steps[0][0] if steps else None})")
    return found[0]


def resolve(changes: Changes, minor: int) -> dict[str, Any]:
    """Every rule of a change table at release line 2.`minor`."""
    return {name: value_at(steps, minor) for name, steps in changes.items()}


def check_changes(changes: Changes) -> list[str]:
    """What is wrong with a change table: a rule without a value for the oldest modelled line, or
    whose entries do not ascend."""
    problems = []
    for name, steps in changes.items():
        if not steps:
            problems.append(f"{name}: no entries")
            continue
        if steps[0][0] > EARLIEST_MINOR:
            problems.append(f"{name}: first entry 2.{steps[0][0]} is after 2.{EARLIEST_MINOR}")
        firsts = [first for first, _ in steps]
        if any(b <= a for a, b in zip(firsts, firsts[1:])):
            problems.append(f"{name}: entries do not ascend ({firsts})")
    return problems


@dataclass(frozen=True)
class ReleaseRules:
    """How one NCCL release line behaves where releases differ (see RELEASE_CHANGES for the values)."""

    version: NcclVersion

    # -- limits (device.h, graph.h)
    maxchannels: int                 # MAXCHANNELS (devcomm.h 2.18, device.h): 32 until 2.24, 64 from 2.25
    topo_max_nodes: int              # graph.h NCCL_TOPO_MAX_NODES: 256, 576 from 2.27, 640 from 2.29
    nvls_arity: int                  # device.h NCCL_MAX_NVLS_ARITY: 8 until 2.20, 32 from 2.21

    # -- graph search (search.cc ncclTopoCompute and the recursion)
    search_global_timeout: int       # NCCL_SEARCH_GLOBAL_TIMEOUT: 5<<16 in 2.18, 1<<19 from 2.19
    search_speeds_sm90_intra: tuple  # sm90SpeedArrayIntra (2.19 adds 50.0, 2.21 adds 11.0)
    search_speeds_sm90_inter: tuple  # sm90SpeedArrayInter (2.19 adds 22.0)
    search_speeds_sm100_intra: tuple | None  # sm100SpeedArrayIntra from 2.25 (None: SM100 takes SM90's)
    search_speeds_sm100_inter: tuple | None  # sm100SpeedArrayInter from 2.25
    search_types_from_paths: bool    # 2.25: typeIntra/Inter start from the system's best path types, not NVL/PIX
    search_inter_sys_below_sm90: bool  # 2.29: pre-SM90 GPUs search inter types up to SYS
    search_types_stop_before_dis: bool  # 2.27: the type relaxation stops before PATH_DIS
    search_heads_cap: str | None     # NVLS/CollNet Direct maxChannels: None (2.18: init's MAXCHANNELS),
                                     # "gpus" (2.19: the GPU count), "arity" (2.25: capped by the arities)
    search_total_bw_per_dev: bool    # 2.19: totalBw x ndevs/(ndevs-1) for trees (2.18: ngpus, one-GPU rings too)
    search_dup_after_pass1: bool     # 2.19: ncclTopoDupChannels after pass 1 (2.18: at the very end)
    search_pass2_ring_nvls: bool     # 2.19: pass 2 also raises ring bw and NVLS bwInter (2.18: trees' bwIntra only)
    search_fallback_nets: bool       # 2.19: the simple-order fallback keeps NICs and bw 0.1 (2.18: inter {0,0})
    search_amd_sys_same_channels: bool  # 2.19: no "different channels" retry through AMD CPUs at SYS
    search_split_nvlink_two_channels: bool  # 2.26: split NVLink domains ask rings for 2 channels at least
    search_unverified: bool          # nicksim's search of this line has no NCCL golden (2.20, 2.21)
    cross_nic_search: str            # crossNic handling: "2.18" (NCCL_CROSS_NIC for any pattern, any non-zero
                                     # value relaxes to 1), "any-nic" (2.19: NCCL_CROSS_NIC=2 relaxes to 1),
                                     # "alternate" (2.23: crossNic 2, rails and planes, odd ring channels pair)
    cross_nic_pairs_channels: bool   # 2.20: an odd channel of a cross-NIC graph reuses the previous NIC
    search_rec_net: str              # ncclTopoSearchRecNet variant: "2.18", "2.19", "2.22" (NVLS under every
                                     # NIC until one is found), "2.23" (replay, PCI order, closest GPUs),
                                     # "2.27" (net.localGpu, then ncclTopoGetLocal)
    follow_path_power_only: bool     # 2.19: followPath charges the way back only to POWER CPUs, findRevLink
                                     # matches the link type (2.18: any CPU over NVLink, first link back)
    empty_path_follows: bool         # until 2.20: a path without links succeeds at once
    nvswitch_neighbours: str | None  # ncclTopoSearchNextGpuSort behind NVSwitches: None (2.18), "first"
                                     # (2.19: ring neighbours tried first), "only" (2.21: only them)
    select_nets_capped: bool         # 2.21: ncclTopoSelectNets looks at MAXCHANNELS NICs at most
    nvls_compare_bw: bool            # 2.19: ncclTopoCompareGraphs weighs NVLS by nChannels x bwInter too
    compare_cross_nic_bonus: bool    # until 2.19: a 15% bonus for graphs that do not cross NICs

    # -- graph print and dump (search.cc ncclTopoPrintGraph, ncclTopoDumpGraphs)
    graph_net_label: str             # NIC in graph lines: "int" (%d), "hex" (2.22 %lx), "sys-local-first"
                                     # (2.23: sys-local, the first NIC's local id for the last), "sys-local" (2.24)
    graph_gpu_label: str             # GPU in graph lines: "rank" until 2.26, "id" (sys-local, NVLS head only) from 2.27
    graph_xml_dev_hex: bool          # 2.21: dev attributes via xmlSetAttrLong ("%#lx"), before xmlSetAttrInt
    graph_xml_gpu_rank: bool         # 2.30: <gpu ... rank="r"/>
    graph_xml_nvls_head_only: bool   # 2.21: NVLS channels name only their head GPU
    collnet_direct_graph_id: int | None  # init.cc: None (one CollNet graph until 2.21), 2 in 2.22, 4 from 2.23

    # -- NVLS (transport/nvls.cc, nvls.cc)
    nvls_min_gpus: int               # ncclNvlsInit: off for gpuCount <= 2 until 2.27, < 2 from 2.28
    nvls_off_across_hosts: bool      # 2.20: NVLS off for a communicator spanning hosts (MNNVL)
    nvls_channels_default: str       # comm->nvlsChannels: "16" (NCCL_NVLS_NCHANNELS, default 16), "sm100-32"
                                     # (2.25: 32 on SM100, a value >= 0 overrides), "sm100-24-nvl" (2.27: 24 on
                                     # SM100 in one NVLink domain, a value > 0 overrides)

    # -- channels (connect.cc, rings.cc, init.cc)
    ring_swap_odd_nodes: str | None  # odd nodes swap ring channel pairs: None (until 2.19), "cross-nic-even-nodes"
                                     # (2.20), "cross-nic" (2.21), "cross-nic-2" (2.26: crossNic == 2 only)
    channels_x2_sm90_plus: bool      # 2.25: the x2 for fast multi-node rings takes SM90 and later (before: SM90 only)
    coll_channels_cover_nvls: bool   # 2.20-2.27: collectives get at least the NVLS channel count
    ring_dump_style: str             # rings.cc dumpLine: "3-wide-20" (" %3d", 20 ranks), "rank-width-127" (2.23)
    channel_counts_collnet: str | None  # init.cc summary: None (no collnet field, until 2.19), "setup" (2.20:
                                        # the CollNet channels), "coll" (2.21: the collective count)

    # -- point-to-point channels and chunk (paths.cc ncclTopoComputeP2pChannels, init.cc)
    p2p_nvb_is_nvlink: bool          # 2.30: NVB paths count NVLinks for p2p channels per peer
    net_peer_channels: str           # remote peers: "2" (NCCL_NCHANNELS_PER_NET_PEER, default 2), "nics" (2.20:
                                     # NICs matching the GPU's host bw, halved while 8+ ops share one), "net-bw"
                                     # (2.29: local NICs' bw / NCCL_P2P_PER_CHANNEL_NET_BW)
    p2p_channels_own_view: bool      # 2.29: per-peer channels from this rank's view (before: every local GPU's)
    p2p_per_peer_batch_fit: bool     # 2.29: per-peer channels halved across nodes while 8-peer batches overflow
    p2p_per_peer_capped: bool        # 2.22: p2pnChannelsPerPeer <= p2pnChannels
    p2p_net_chunk_x2_arm_sm100: bool  # 2.29: NCCL_P2P_NET_CHUNKSIZE doubled on ARM hosts with SM100+
    p2p_chunk_capped_by_step: bool   # 2.19: p2pChunkSize at most one Simple step (NCCL_BUFFSIZE / NCCL_STEPS)
    all_nvlink_test: str             # ncclTopoPathAllNVLink (the NVL P2P chunk): "best-pair" (until 2.24: the
                                     # best GPU pair, from PATH_DIS: one GPU -> PCI chunk), "worst-pair" (2.25:
                                     # ncclTopoGetGpuMaxPath from PATH_LOC: one GPU -> NVL chunk)

    # -- paths, GDR, PXN, transports (paths.cc, transport/*.cc)
    gdr_level_p2c_with_c2c: bool     # 2.29: NCCL_NET_GDR_C2C makes the default GDR level P2C
    gdr_c2c_allows_p2c: bool         # 2.27-2.28: GDR over a P2C path when NCCL_NET_GDR_C2C
    cumem_by_default: bool           # 2.19: P2P over cuMem unless NCCL_CUMEM_ENABLE=0 (misc/cudawrap.cc; 2.18's
                                     # default is 0, and its NCCL_CUMEM_ENABLE=1 is not modelled)
    net_text_gdr_pci: bool           # 2.30: "/GDRDMA(PCI)" when GDR goes over PCIe
    shm_text_direct: bool            # 2.30: "SHM/direct" connection text

    # -- CollNet (init.cc, collnet setup)
    collnet_heads_from_nvls: bool    # 2.28: CollNet heads are the NVLS heads where NVLS runs
    collnet_heads_unique: bool       # 2.20: duplicate heads dropped
    collnet_chain_heads_subset: bool  # 2.30: isCollNetChainHeadsSubset decides chain support
    collnet_ag_rs: bool              # 2.20: CollNet AllGather / ReduceScatter (SHARP iallgather/ireducescatter)
    collnet_heads_local_limit: bool  # 2.28: CollNet Direct heads count only with <= NCCL_MAX_DIRECT_ARITY+1 local ranks
    collnet_direct_local_limit: bool  # 2.23: CollNet Direct not priced above NCCL_MAX_DIRECT_ARITY+1 local ranks
    collnet_chain_local_limit: bool  # 2.28: CollNet Chain neither

    # -- algorithm choice and sizes (enqueue.cc, tuning.cc)
    nvls_chunksize_knob: bool        # 2.21: NCCL_NVLS_CHUNKSIZE read (before 128 KiB hard-coded)
    nvlstree_max_chunksize_knob: bool  # 2.20: NCCL_NVLSTREE_MAX_CHUNKSIZE read
    nvlstree_chunk_from_nvls_chunk: bool  # 2.21: NVLS Tree starts from the NVLS chunk (before a whole Simple step)
    nvlstree_64k_from_4_nodes: bool  # 2.19: NVLS Tree chunks at most 64 KiB from 4 nodes
    nvls_filter: str                 # which NVLS/NVLS Tree pairs are priced: "op-type" (2.18 NCCL_NVLS_SUPPORTS),
                                     # "comm-ag-exempt" (2.19: nvlsSupport, NVLS AllGather let through), "comm"
                                     # (2.20), "comm-or-ag" (2.22: any AllGather supported), "comm-or-ag-32-ranks"
                                     # (2.25: single-node AG/RS up to 32 ranks), "local-32-ranks" (2.27)
    nvls_ag_rs_single_node_only: bool  # 2.19-2.26: "we only support single-node NVLS allgather and reducescatter"
    pat_rs_avg_skipped: bool         # 2.23: PAT ReduceScatter not with avg
    fp8_types: bool                  # 2.24: float8 e4m3 / e5m2
    nvls_multinode_channels_in_rings: bool  # 2.28: multi-node NVLS within the ring channel count
    tree_all_threads: bool           # 2.22: Tree always runs NCCL_MAX_NTHREADS

    # -- chunking and partition (enqueue.cc)
    nvls_multinode_chunk_32k: bool   # 2.19: multi-node NVLS below 150 GB/s chunks at most 32 KiB
    tree_ll128_halves_step: bool     # until 2.19: LL128 Tree halves the whole step, then keeps 15/16 of it
    tree_simple_depth_chunking: bool  # until 2.19: Simple Tree halves its chunk per tree depth
    ll_traffic_x4: bool              # 2.26: LL counts 4 bytes of traffic per byte
    coll_split: str                  # how a call is cut over channels: "whole" (each channel the whole count,
                                     # until 2.19), "even" (2.20 addCBDCollToPlan), "cells" (2.22 partition)
    min_traffic_per_channel_nbytes: int  # MinTrafficPerChannel: 512 (2.22), 16 KiB (2.23), 32 KiB (2.29)
    cells_from_min_traffic: bool     # 2.23: cells sized from the min traffic, the first channel rounded up
    per_channel_traffic_16: bool     # 2.29: traffic per channel rounded to 16 bytes, not floored at the minimum
    last_chunk_host_aligned: bool    # until 2.21: the last chunk at the work's alignment (lastChunkCount)

    # -- point-to-point and PAT plans (init.cc p2pSchedule, enqueue.cc addP2pToPlan, device.h)
    p2p_schedule: str                # "node-deltas" (quadratic node then local deltas), "groups" (2.28)
    p2p_parts_first: bool            # 2.29: parts sized by the Simple step before choosing LL
    p2p_plans_modelled: bool         # nicksim models the point-to-point plans of 2.22 on
    pat_programs_modelled: bool      # nicksim models the PAT programs of 2.26 on

    # -- debug lines (debug.cc, init.cc, bootstrap.cc)
    debug_subsystems: tuple[str, ...]  # NCCL_DEBUG_SUBSYS names known (nccl_common.h)
    debug_subsys_default: str        # NCCL_DEBUG_SUBSYS unset: INIT,ENV, INIT,BOOTSTRAP,ENV from 2.23
    debug_subsys_unknown_voids: bool  # 2.30: an unknown name voids the value for the default
    version_info_line: bool          # 2.22: the version is an INFO line of every rank
    runtime_connect: bool            # 2.22: NCCL_RUNTIME_CONNECT (default 1) connects at first use
    one_node_net_lines: bool         # 2.28: a one-node job loads its network too
    bootstrap_subsys: str            # "Bootstrap : Using" under INIT, BOOTSTRAP from 2.23
    bootstrap_colon: str             # " :" until 2.23, ":" from 2.24
    affinity_ranges: bool            # 2.28: ncclTopoGetCpuAffinity prints ranges
    init_mnnvl: bool                 # 2.21: " MNNVL 0" in the init line
    cc_line: str | None              # devCommSetup: None, "CC Off, Multi-GPU CC Off" (2.22), "CC Off" (2.24)
    init_line_style: str             # Init START/COMPLETE: "2.18" (COMPLETE only), "2.19" ("comm"), "2.21"
                                     # ("ncclCommInitRank comm"), "2.29" (START prefixed "[Rank r]")
    ring_pxn_gdr_summary: bool       # 2.24: "Connected all rings, use ring PXN p GDR g"
    nvls_ranks_in_buffer_line: bool  # 2.27: " nvlsRanks n" in the NVLS buffer line
    destroy_subsys: str              # commFree's last line: INIT, DESTROY from 2.30

    # -- knobs (docs/userguide env.rst)
    nchannels_knobs_deprecated: bool  # NCCL_MIN/MAX_NCHANNELS deprecated for NCCL_MIN/MAX_CTAS (2.17)


# search.cc speed ladders (GB/s per channel) as they grew.
_SM90_INTRA_218 = (60.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0)
_SM90_INTRA_219 = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0)
_SM90_INTRA_221 = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0)
_SM90_INTER_218 = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)
_SM90_INTER_219 = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)
_SM100_INTRA_225 = (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0)
_SM100_INTRA_227 = _SM100_INTRA_225 + (18.0,)
_SM100_INTRA_229 = (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)
_SM100_INTER_227 = (96.0, 48.0, 45.1) + _SM90_INTER_219[2:]
_SM100_INTER_229 = (96.0, 80.0) + _SM100_INTER_227[1:]
_SM100_INTER_230 = (96.0, 86.0) + _SM100_INTER_229[1:]

# nccl_common.h ncclDebugLogSubSys names (those of 2.17 taken as 2.18's).
_SUBSYS_218 = ("INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC", "CALL", "NVLS", "PROXY")
_SUBSYS_221 = _SUBSYS_218 + ("BOOTSTRAP", "REG")
_SUBSYS_222 = _SUBSYS_221 + ("PROFILE",)
_SUBSYS_224 = _SUBSYS_222 + ("RAS",)
_SUBSYS_230 = _SUBSYS_224 + ("DESTROY", "ALLOC_HOST")

# Per rule: (first release line's minor, value), oldest first.
RELEASE_CHANGES: Changes = {
    "maxchannels": ((18, 32), (25, 64)),
    "topo_max_nodes": ((18, 256), (27, 576), (29, 640)),
    "nvls_arity": ((18, 8), (21, 32)),

    "search_global_timeout": ((18, 5 << 16), (19, 1 << 19)),
    "search_speeds_sm90_intra": ((18, _SM90_INTRA_218), (19, _SM90_INTRA_219), (21, _SM90_INTRA_221)),
    "search_speeds_sm90_inter": ((18, _SM90_INTER_218), (19, _SM90_INTER_219)),
    "search_speeds_sm100_intra": ((18, None), (25, _SM100_INTRA_225), (27, _SM100_INTRA_227),
                                  (29, _SM100_INTRA_229)),
    "search_speeds_sm100_inter": ((18, None), (25, _SM90_INTER_219), (27, _SM100_INTER_227),
                                  (29, _SM100_INTER_229), (30, _SM100_INTER_230)),
    "search_types_from_paths": ((18, False), (25, True)),
    "search_inter_sys_below_sm90": ((18, False), (29, True)),
    "search_types_stop_before_dis": ((18, False), (27, True)),
    "search_heads_cap": ((18, None), (19, "gpus"), (25, "arity")),
    "search_total_bw_per_dev": ((18, False), (19, True)),
    "search_dup_after_pass1": ((18, False), (19, True)),
    "search_pass2_ring_nvls": ((18, False), (19, True)),
    "search_fallback_nets": ((18, False), (19, True)),
    "search_amd_sys_same_channels": ((18, False), (19, True)),
    "search_split_nvlink_two_channels": ((18, False), (26, True)),
    "search_unverified": ((18, False), (20, True), (22, False)),
    "cross_nic_search": ((18, "2.18"), (19, "any-nic"), (23, "alternate")),
    "cross_nic_pairs_channels": ((18, False), (20, True)),
    "search_rec_net": ((18, "2.18"), (19, "2.19"), (22, "2.22"), (23, "2.23"), (27, "2.27")),
    "follow_path_power_only": ((18, False), (19, True)),
    "empty_path_follows": ((18, True), (21, False)),
    "nvswitch_neighbours": ((18, None), (19, "first"), (21, "only")),
    "select_nets_capped": ((18, False), (21, True)),
    "nvls_compare_bw": ((18, False), (19, True)),
    "compare_cross_nic_bonus": ((18, True), (20, False)),

    "graph_net_label": ((18, "int"), (22, "hex"), (23, "sys-local-first"), (24, "sys-local")),
    "graph_gpu_label": ((18, "rank"), (27, "id")),
    "graph_xml_dev_hex": ((18, False), (21, True)),
    "graph_xml_gpu_rank": ((18, False), (30, True)),
    "graph_xml_nvls_head_only": ((18, False), (21, True)),
    "collnet_direct_graph_id": ((18, None), (22, 2), (23, 4)),

    "nvls_min_gpus": ((18, 3), (28, 2)),
    "nvls_off_across_hosts": ((18, False), (20, True), (21, False)),
    "nvls_channels_default": ((18, "16"), (25, "sm100-32"), (27, "sm100-24-nvl")),

    "ring_swap_odd_nodes": ((18, None), (20, "cross-nic-even-nodes"), (21, "cross-nic"), (26, "cross-nic-2")),
    "channels_x2_sm90_plus": ((18, False), (25, True)),
    "coll_channels_cover_nvls": ((18, False), (20, True), (28, False)),
    "ring_dump_style": ((18, "3-wide-20"), (23, "rank-width-127")),
    "channel_counts_collnet": ((18, None), (20, "setup"), (21, "coll")),

    "p2p_nvb_is_nvlink": ((18, False), (30, True)),
    "net_peer_channels": ((18, "2"), (20, "nics"), (29, "net-bw")),
    "p2p_channels_own_view": ((18, False), (29, True)),
    "p2p_per_peer_batch_fit": ((18, False), (29, True)),
    "p2p_per_peer_capped": ((18, False), (22, True)),
    "p2p_net_chunk_x2_arm_sm100": ((18, False), (29, True)),
    "p2p_chunk_capped_by_step": ((18, False), (19, True)),
    "all_nvlink_test": ((18, "best-pair"), (25, "worst-pair")),

    "gdr_level_p2c_with_c2c": ((18, False), (29, True)),
    "gdr_c2c_allows_p2c": ((18, False), (27, True), (29, False)),
    "cumem_by_default": ((18, False), (19, True)),
    "net_text_gdr_pci": ((18, False), (30, True)),
    "shm_text_direct": ((18, False), (30, True)),

    "collnet_heads_from_nvls": ((18, False), (28, True)),
    "collnet_heads_unique": ((18, False), (20, True)),
    "collnet_chain_heads_subset": ((18, False), (30, True)),
    "collnet_ag_rs": ((18, False), (20, True)),
    "collnet_heads_local_limit": ((18, False), (28, True)),
    "collnet_direct_local_limit": ((18, False), (23, True)),
    "collnet_chain_local_limit": ((18, False), (28, True)),

    "nvls_chunksize_knob": ((18, False), (21, True)),
    "nvlstree_max_chunksize_knob": ((18, False), (20, True)),
    "nvlstree_chunk_from_nvls_chunk": ((18, False), (21, True)),
    "nvlstree_64k_from_4_nodes": ((18, False), (19, True)),
    "nvls_filter": ((18, "op-type"), (19, "comm-ag-exempt"), (20, "comm"), (22, "comm-or-ag"),
                    (25, "comm-or-ag-32-ranks"), (27, "local-32-ranks")),
    "nvls_ag_rs_single_node_only": ((18, False), (19, True), (27, False)),
    "pat_rs_avg_skipped": ((18, False), (23, True)),
    "fp8_types": ((18, False), (24, True)),
    "nvls_multinode_channels_in_rings": ((18, False), (28, True)),
    "tree_all_threads": ((18, False), (22, True)),

    "nvls_multinode_chunk_32k": ((18, False), (19, True)),
    "tree_ll128_halves_step": ((18, True), (20, False)),
    "tree_simple_depth_chunking": ((18, True), (20, False)),
    "ll_traffic_x4": ((18, False), (26, True)),
    "coll_split": ((18, "whole"), (20, "even"), (22, "cells")),
    "min_traffic_per_channel_nbytes": ((18, 512), (23, 16 << 10), (29, 32 << 10)),
    "cells_from_min_traffic": ((18, False), (23, True)),
    "per_channel_traffic_16": ((18, False), (29, True)),
    "last_chunk_host_aligned": ((18, True), (22, False)),

    "p2p_schedule": ((18, "node-deltas"), (28, "groups")),
    "p2p_parts_first": ((18, False), (29, True)),
    "p2p_plans_modelled": ((18, False), (22, True)),
    "pat_programs_modelled": ((18, False), (26, True)),

    "debug_subsystems": ((18, _SUBSYS_218), (21, _SUBSYS_221), (22, _SUBSYS_222), (24, _SUBSYS_224),
                         (30, _SUBSYS_230)),
    "debug_subsys_default": ((18, "INIT,ENV"), (23, "INIT,BOOTSTRAP,ENV")),
    "debug_subsys_unknown_voids": ((18, False), (30, True)),
    "version_info_line": ((18, False), (22, True)),
    "runtime_connect": ((18, False), (22, True)),
    "one_node_net_lines": ((18, False), (28, True)),
    "bootstrap_subsys": ((18, "INIT"), (23, "BOOTSTRAP")),
    "bootstrap_colon": ((18, " :"), (24, ":")),
    "affinity_ranges": ((18, False), (28, True)),
    "init_mnnvl": ((18, False), (21, True)),
    "cc_line": ((18, None), (22, "CC Off, Multi-GPU CC Off"), (24, "CC Off")),
    "init_line_style": ((18, "2.18"), (19, "2.19"), (21, "2.21"), (29, "2.29")),
    "ring_pxn_gdr_summary": ((18, False), (24, True)),
    "nvls_ranks_in_buffer_line": ((18, False), (27, True)),
    "destroy_subsys": ((18, "INIT"), (30, "DESTROY")),

    "nchannels_knobs_deprecated": ((18, True),),
}


@lru_cache(maxsize=None)
def rules(version: NcclVersion) -> ReleaseRules:
    """The ReleaseRules of a modelled release line."""
    return ReleaseRules(version=version, **resolve(RELEASE_CHANGES, version.minor))


@lru_cache(maxsize=None)
def rules_for_minor(minor: int | None) -> ReleaseRules:
    """rules() of the modelled release line 2.`minor` (None: the newest), for callers that carry
    only the minor number."""
    if minor is None:
        return rules(DEFAULT_VERSION)
    for version in MODELLED_VERSIONS:
        if version.minor == minor:
            return rules(version)
    raise UsageError(f"NCCL 2.{minor} is not modelled", "--nccl-version",
                     ", ".join(v.line for v in MODELLED_VERSIONS))


def releases_where(name: str, value: Any = True) -> str:
    """The modelled release lines where rule `name` has `value`, as "2.22 to 2.30" (or "none")."""
    lines = [v.line for v in MODELLED_VERSIONS if getattr(rules(v), name) == value]
    if not lines:
        return "none"
    return lines[0] if len(lines) == 1 else f"{lines[0]} to {lines[-1]}"
