"""Every NCCL_* / NICKSIM_* / TORCH_* setting nicksim knows: NCCL's default, grammar, the releases that
read it, and what it does in each engine (nccl: NCCL's decisions and time model; des: the
discrete-event fabric; real: the real backend). "no modelled effect" is said where that is the truth.

Defaults and release ranges are read from NCCL's sources (git tags v2.3.5-1 .. v2.30.7-1: the file
that reads each knob is named in its doc, src/ paths as of 2.30.7). `since`/`until` are release
lines ("2.20" = first read by 2.20.x; `until` = first line that no longer reads it). A default that
changed between releases is `versioned`: ((first minor, value), ...), newest last.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from .rules import RELEASE_CHANGES
from .topo_rules import P2P_NET_CHUNK_DEFAULT, P2P_PER_CHANNEL_NET_BW

__all__ = ["Knob", "KNOB_TABLE", "NO_EFFECT", "ENGINE_NAMES"]

NO_EFFECT = "no modelled effect"
ENGINE_NAMES = ("nccl", "des", "real")  # NCCL's time model, the DES, the real backend


@dataclass(frozen=True)
class Knob:
    """One setting: NCCL's default (and how it changed by release), how its value is parsed, the
    releases that read it, and its effect per engine."""

    name: str
    default: Any
    kind: str  # int | level | list-algo | list-proto | str | iflist | hostport | path | debug
    doc: str
    since: str = "2.18"
    until: str | None = None
    nccl: str = NO_EFFECT  # in NCCL's time model
    des: str = ""  # "" = as in nccl
    real: str = ""  # "" = as in nccl
    versioned: tuple[tuple[int, Any], ...] = ()
    # The smallest value that can run (ints), where NCCL takes any value and a smaller one breaks
    # the buffers or schedules it sizes; `keep` are the sentinels below it that mean "NCCL's default".
    least: int | None = None
    keep: tuple[int, ...] = ()

    def default_for(self, minor: int | None) -> Any:
        """NCCL's default in release 2.`minor` (the newest where None)."""
        value = self.default
        for first, v in self.versioned:
            if minor is None or minor >= first:
                value = v
        return value

    def effect(self, engine: str) -> str:
        """The knob's effect in `engine` ("nccl", "des" or "real"; "model" is nccl's former name)."""
        text = {"nccl": self.nccl, "model": self.nccl, "des": self.des, "real": self.real}[engine]
        return text or self.nccl

    def removed_by(self, minor: int) -> bool:
        """Whether release 2.`minor` comes at or after the line that stopped reading this knob."""
        return bool(self.until) and int(self.until.split(".")[1]) <= minor

    def read_by(self, minor: int) -> bool:
        """Whether release 2.`minor` reads this knob (NICKSIM_* and TORCH_* always apply)."""
        if not self.name.startswith("NCCL_"):
            return True
        since = int(self.since.split(".")[1])
        until = int(self.until.split(".")[1]) if self.until else None
        return minor >= since and (until is None or minor < until)


_MAXCHANNELS = RELEASE_CHANGES["maxchannels"]  # some defaults are MAXCHANNELS

# Effects shared by many knobs.
_PATHS = "transport of each GPU pair (paths.cc), so the search, the channels and the time"
_PLAN = "the plan the real backend runs (same choice as nccl)"
_SEARCH = "graph search (search.cc): channels, rings, trees and their bandwidth"
_TUNE = "the algorithm/protocol choice and its time (tuning.cc / enqueue.cc)"
_NOT_RUN = "no modelled effect (the real backend's NET registers host memory: no GPUDirect)"
_IB_REAL = "the real backend's NET/IB (realhw/net_ib.py, where an RDMA device and pyverbs exist): "
_DES_REPLAY = "the hang replay's watchdog and logs (nicksim hang replay)"


def _k(name, default, kind, doc, since="2.3", until=None, nccl=NO_EFFECT, des="", real="", versioned=(), least=None,
       keep=()):
    return Knob(name, default, kind, doc, since, until, nccl, des, real, tuple(versioned), least, tuple(keep))


# init.cc computeBuffSizes takes any value but -2 (the default) as given; below these a chunk
# (enqueue.cc calcCollChunking: a step of NCCL_STEPS = 8, halved for LL, 15/16 of it for LL128,
# one step where chunkSteps is 1) holds no grain of its protocol (device.h ncclProtoGrainSize:
# Simple 512 B, LL 16 B, LL128 1920 B), and NCCL's loops would cut it into nothing.
_STEPS = 8
_LEAST_SIMPLE_BUFF = _STEPS * 512
_LEAST_LL_BUFF = _STEPS * 2 * 16
_LEAST_LL128_BUFF = _STEPS * 2048  # 2048 x 15/16 = 1920
# A send/recv chunk is one Simple step (enqueue.cc): one Simple grain at least; below it the part
# sizes (half a chunk across nodes, an eighth on one node) round to nothing.
_LEAST_P2P_CHUNK = 512


KNOB_TABLE: Mapping[str, Knob] = MappingProxyType({k.name: k for k in (
    # --- algorithms, protocols, channels, threads (tuning.cc, enqueue.cc, connect.cc, init.cc) ---
    _k("NCCL_ALGO", None, "list-algo", "algorithms allowed, NCCL list grammar 'ring,tree;allreduce:^nvls' "
       "(tuning.cc parseList; per-function prefixes from 2.24)", "2.5", nccl=f"restricts {_TUNE}", real=_PLAN),
    _k("NCCL_PROTO", None, "list-proto", "protocols allowed (LL, LL128, Simple), NCCL list grammar (tuning.cc)",
       "2.5", nccl=f"restricts {_TUNE}", real=_PLAN),
    _k("NCCL_NVLS_ENABLE", 2, "int", "NVLink SHARP: 0 off, 1 on, 2 auto (transport/nvls.cc)", "2.17",
       nccl="whether the NVLS graph is searched and NVLS/NVLSTree priced", real=_PLAN),
    _k("NCCL_NVLS_NCHANNELS", None, "int", "NVLS channels (16 on SM90; 24/32 on SM100 from 2.27; init.cc)", "2.17",
       nccl="channels of NVLS calls", real=_PLAN),
    _k("NCCL_NVLS_CHUNKSIZE", 131072, "int", "NVLS chunk, bytes (transport/nvls.cc)", "2.21",
       nccl="NVLS chunk size and buffer (NVLS comm line)", real=_PLAN),
    _k("NCCL_NVLSTREE_MAX_CHUNKSIZE", -2, "int", "largest NVLSTree chunk (-2: 64 KiB from 4 nodes, else the NVLS "
       "chunk; enqueue.cc)", "2.20", nccl="NVLSTree chunk size", real=_PLAN),
    _k("NCCL_COLLNET_ENABLE", 0, "int", "CollNet (SHARP) algorithms (init.cc; only '1' enables, 2.12-2.26)", "2.6",
       nccl="CollNetDirect/Chain searched and priced where a CollNet plugin serves the NICs (--sharp)", real=_PLAN),
    _k("NCCL_COLLNET_NODE_THRESHOLD", 2, "int", "fewest nodes for which CollNet stays on (init.cc)", "2.9",
       nccl="CollNet off below this node count", real=_PLAN),
    _k("NCCL_SHARP_DISABLE_ALLGATHER", 0, "int", "SHARP plugin: 1 withdraws its iallgather", "2.18",
       nccl="no CollNet AllGather"),
    _k("NCCL_SHARP_DISABLE_REDUCE_SCATTER", 0, "int", "SHARP plugin: 1 withdraws its ireducescatter", "2.18",
       nccl="no CollNet ReduceScatter"),
    _k("NCCL_MIN_CTAS", 0, "int", "fewest CTAs (channels) per collective (init.cc envConfigOverride)", "2.17",
       nccl="channel count: max(NCCL_MIN_NCHANNELS, this)", real=_PLAN),
    _k("NCCL_MAX_CTAS", 0, "int", "most CTAs (channels) per collective (init.cc)", "2.17",
       nccl="channel count: min(NCCL_MAX_NCHANNELS, this)", real=_PLAN),
    _k("NCCL_MIN_NCHANNELS", 0, "int", "fewest channels (graph/connect.cc; deprecated in 2.17 for NCCL_MIN_CTAS, "
       "still honoured: the larger of the two applies)", "2.5", nccl="channel count (ncclTopoPostset)", real=_PLAN),
    _k("NCCL_MAX_NCHANNELS", 0, "int", "most channels (graph/connect.cc; deprecated in 2.17 for NCCL_MAX_CTAS, "
       "still honoured: the smaller of the two applies)", "2.5", nccl="channel count (ncclTopoPostset)", real=_PLAN),
    _k("NCCL_MIN_P2P_NCHANNELS", 1, "int", "fewest point-to-point channels (paths.cc)", "2.7",
       nccl="send/recv and alltoall channels", real=_PLAN),
    _k("NCCL_MAX_P2P_NCHANNELS", _MAXCHANNELS[0][1], "int", "most point-to-point channels (paths.cc; default "
       "MAXCHANNELS, 32 until 2.24, 64 from 2.25)", "2.7", nccl="send/recv and alltoall channels", real=_PLAN,
       versioned=_MAXCHANNELS[1:]),
    _k("NCCL_NCHANNELS_PER_NET_PEER", None, "int", "point-to-point channels per peer on another node (paths.cc)",
       "2.10", nccl="send/recv channels per remote peer", real=_PLAN),
    _k("NCCL_NTHREADS", -2, "int", "threads per CTA for LL and Simple (multiple of 32, 64-512; tuning.cc)", "2.3",
       nccl="threads of LL/Simple calls, and the thread thresholds that set channel counts", real=_PLAN),
    _k("NCCL_LL128_NTHREADS", -2, "int", "threads per CTA for LL128 (multiple of 32, 160-640; tuning.cc)", "2.5",
       nccl="threads of LL128 calls", real=_PLAN),
    _k("NCCL_MAX_NTHREADS", None, "int", "not an NCCL environment variable: NCCL_MAX_NTHREADS is a compile-time "
       "constant (src/include/device.h: 640 from 2.8); NCCL never reads it", "2.3", "2.3",
       nccl="none: NCCL does not read it"),
    _k("NCCL_THREAD_THRESHOLDS", None, "str", "Tree and Ring thread thresholds: 'LL LL128 Simple LL LL128 Simple' "
       "(tuning.cc)", "2.5", nccl="channels a small call uses (threadThresholds line)", real=_PLAN),
    _k("NCCL_PAT_ENABLE", 2, "int", "PAT for AllGather/ReduceScatter: 0 off, 1 on, 2 auto (1 GPU per node)", "2.23",
       nccl="whether PAT is priced", real=_PLAN),
    _k("NCCL_LL128_C2C", 1, "int", "LL128 by default up to PXN paths on SM90+ (0: only up to PXB)", "2.27",
       nccl="whether LL128 is enabled", real=_PLAN),
    _k("NCCL_NET_OVERHEAD", None, "int", "per-step network overhead in ns (tuning.cc getNetOverhead; default 1 us, "
       "2 us on AMD)", "2.18", nccl="network latency in the time model", des="the DES's per-step network cost",
       real=NO_EFFECT),
    # --- buffers and chunks (init.cc computeBuffSizes, enqueue.cc) ---
    _k("NCCL_BUFFSIZE", 4194304, "int", "Simple buffer per connection, bytes; a step is 1/8 of it (init.cc)", "2.3",
       nccl="Simple step and chunk sizes, so the pipeline depth and small-message time",
       des="Simple step sizes: how many steps a call takes and how it pipelines",
       real="the size of every Simple shared-memory or socket slot", least=_LEAST_SIMPLE_BUFF, keep=(-2,)),
    _k("NCCL_LL_BUFFSIZE", -2, "int", "LL buffer per connection (-2: 8 x 512 x 8 x 16 B = 512 KiB; init.cc)", "2.7",
       nccl="LL step size (and send/recv's LL slots)", real="the size of every LL slot", least=_LEAST_LL_BUFF,
       keep=(-2,)),
    _k("NCCL_LL128_BUFFSIZE", -2, "int", "LL128 buffer per connection (-2: 120 x 640 x 8 x 8 B = 4915200 B)", "2.7",
       nccl="LL128 step size", real="the size of every LL128 slot", least=_LEAST_LL128_BUFF, keep=(-2,)),
    _k("NCCL_P2P_NET_CHUNKSIZE", P2P_NET_CHUNK_DEFAULT, "int", "send/recv chunk across nodes, bytes (init.cc; x2 on "
       "ARM with SM100 from 2.29)", "2.14", nccl="send/recv chunk across nodes (P2P Chunksize line)", real=_PLAN,
       least=_LEAST_P2P_CHUNK),
    _k("NCCL_P2P_NVL_CHUNKSIZE", 524288, "int", "send/recv chunk when every GPU pair is on NVLink, bytes", "2.16",
       nccl="send/recv chunk inside an NVLink node", real=_PLAN, least=_LEAST_P2P_CHUNK),
    _k("NCCL_P2P_PCI_CHUNKSIZE", 131072, "int", "send/recv chunk over PCI, bytes", "2.16",
       nccl="send/recv chunk over PCIe", real=_PLAN, least=_LEAST_P2P_CHUNK),
    _k("NCCL_P2P_LL_THRESHOLD", 16384, "int", "send/recv parts of at most this many bytes go LL (enqueue.cc)", "2.14",
       nccl="send/recv protocol (LL or Simple) by size", real=_PLAN),
    _k("NCCL_P2P_SCHEDULE_GROUP_SIZE", 8, "int", "ranks per group of the send/recv schedule across nodes", "2.28",
       nccl="the order of alltoall's rounds", real=_PLAN, least=1),
    _k("NCCL_P2P_PER_CHANNEL_NET_BW", int(P2P_PER_CHANNEL_NET_BW), "int", "GB/s one point-to-point channel drives "
       "over NET (paths.cc)", "2.29", nccl="send/recv channels across nodes", real=_PLAN),
    # --- paths and transports (paths.cc, search.cc) ---
    _k("NCCL_P2P_LEVEL", None, "level", "farthest path type that still uses P2P (LOC NVL NVB C2C PIX PXB P2C PXN "
       "PHB SYS, or 0-5; paths.cc ncclGetLevel)", nccl=f"P2P vs SHM/NET: {_PATHS}", real=_PLAN),
    _k("NCCL_P2P_DISABLE", 0, "int", "1 disables P2P (as NCCL_P2P_LEVEL=LOC; paths.cc)",
       nccl=f"no P2P: {_PATHS}", real=_PLAN),
    _k("NCCL_SHM_DISABLE", 0, "int", "1 disables the shared-memory transport (transport/shm.cc)",
       nccl=f"no SHM: {_PATHS}", real="no shared-memory connections: NET (sockets) instead, as NCCL"),
    _k("NCCL_NET_GDR_LEVEL", None, "level", "farthest GPU-NIC path type that uses GPUDirect RDMA (paths.cc)", "2.4",
       nccl="GDR per GPU/NIC: the network path (through host memory without it) and its bandwidth",
       real=_NOT_RUN),
    _k("NCCL_NET_GDR_READ", -2, "int", "GDR for sends (-2: on from SM80; paths.cc)",
       nccl="GDR for sends", real=_NOT_RUN),
    _k("NCCL_NET_GDR_C2C", None, "int", "GDR for NICs reached over C2C (0 in 2.26, 1 from 2.27)", "2.26",
       nccl="GDR through C2C-attached NICs", real=_NOT_RUN, versioned=((26, 0), (27, 1))),
    _k("NCCL_CROSS_NIC", 2, "int", "rings/trees may use different NICs on each end: 0 no, 1 yes, 2 if needed "
       "(search.cc)", "2.5", nccl=f"the {_SEARCH}", real=_PLAN),
    _k("NCCL_P2P_PXN_LEVEL", 2, "int", "PXN for send/recv: 0 never, 1 when needed, 2 always (search.cc)", "2.12",
       nccl="which NIC and proxy GPU each send/recv uses", real=_PLAN),
    _k("NCCL_PXN_DISABLE", 0, "int", "1 disables PXN (paths.cc)", "2.12",
       nccl="no NIC access through an NVLink peer", real=_PLAN),
    _k("NCCL_PXN_C2C", None, "int", "PXN through a peer reaching the NIC over C2C (0 in 2.27, 1 from 2.28)", "2.27",
       nccl="PXN over C2C", real=_PLAN, versioned=((27, 0), (28, 1))),
    _k("NCCL_NVB_DISABLE", 0, "int", "1 forbids NVLink paths through an intermediate GPU (paths.cc)", "2.7",
       nccl=f"no NVB: {_PATHS}", real=_PLAN),
    _k("NCCL_IGNORE_DISABLED_P2P", 0, "int", "1 ignores the driver's P2P status (paths.cc)", "2.9",
       nccl=f"P2P where the driver says no: {_PATHS}", real=_PLAN),
    _k("NCCL_NET_DISABLE_INTRA", 0, "int", "1 never uses the network inside a node (paths.cc)", "2.12",
       nccl=f"{_PATHS}", real=_PLAN),
    _k("NCCL_CUMEM_ENABLE", -2, "int", "cuMem (VMM) buffers: 0 in 2.18, -2 auto from 2.19 (misc/cudawrap.cc)", "2.18",
       nccl="P2P connections shown as P2P/CUMEM (else P2P/IPC); from 2.22 connections are made at first use",
       real="as model, in the real backend's NCCL_DEBUG lines", versioned=((18, 0), (19, -2))),
    _k("NCCL_MNNVL_ENABLE", 2, "int", "multi-node NVLink: 0 off, 1 on, 2 auto (init.cc, mnnvl.cc)", "2.21",
       nccl="none: nicksim builds no multi-node NVLink domains (gb200-nvl72 is one node); the MNNVL field of "
       "the comm line says 0"),
    # --- topology and graph files ---
    _k("NCCL_TOPO_FILE", None, "path", "NCCL topology XML to load instead of detecting (graph/topo.cc)", "2.6",
       nccl="the system when no SYSTEM is given (same as --system FILE)", real=_PLAN),
    _k("NCCL_TOPO_DUMP_FILE", None, "path", "where rank 0 writes the topology XML (graph/topo.cc)", "2.6",
       nccl="written by perf, search, topo (as --dump-xml)", real="written by perf --engine real"),
    _k("NCCL_GRAPH_FILE", None, "path", "graph XML to use instead of searching (graph/search.cc)", "2.6",
       nccl=f"replaces the {_SEARCH}", real=_PLAN),
    _k("NCCL_GRAPH_DUMP_FILE", None, "path", "where rank 0 writes the searched graphs (graph/search.cc)", "2.6",
       nccl="written by perf and search (as --dump-graph)", real="written by perf --engine real"),
    _k("NCCL_CGA_CLUSTER_SIZE", None, "int", "CUDA thread-block cluster size of NCCL's kernels (4 on SM90+; init.cc)",
       "2.15", nccl="none: nicksim does not model kernel launch geometry"),
    # --- network (transport/net_ib, net_socket, bootstrap) ---
    _k("NCCL_IB_DISABLE", 0, "int", "1 disables IB/RoCE verbs: NET falls back to sockets (net_ib/init.cc)",
       nccl="NET over sockets: the Socket plugin's NIC speeds and no GDR",
       real="NET between hosts over sockets even where an RDMA device and pyverbs would give NET/IB"),
    _k("NCCL_IB_HCA", None, "iflist", "IB devices (and ports) to use: 'mlx5_0:1,mlx5_1', '^' excludes, '=' exact "
       "(misc/utils.cc parseStringList)", nccl="NICs not selected are left out of the topology; none left: NET "
       "over sockets, as NCCL", real=_IB_REAL + "the ports a rank may use (local rank mod those kept); none "
       "kept: sockets"),
    _k("NCCL_IB_GID_INDEX", -1, "int", "RoCE GID index (-1 auto from 2.21, 0 before)", nccl=NO_EFFECT,
       real=_IB_REAL + "the RoCE GID its queue pairs route by (-1: a RoCE v2 IPv4 GID, else RoCE v2, else 0)",
       versioned=((3, 0), (21, -1))),
    _k("NCCL_IB_TC", -1, "int", "IB traffic class (-1: the comm's, else 0, from 2.26; 0 before)", nccl=NO_EFFECT,
       real=_IB_REAL + "the traffic class of a RoCE queue pair's global route (-1: 0)", versioned=((3, 0), (26, -1))),
    _k("NCCL_IB_SL", -1, "int", "IB service level (-1 from 2.26; 0 before)", nccl=NO_EFFECT,
       real=_IB_REAL + "the queue pairs' service level (-1: 0)",
       versioned=((3, 0), (26, -1))),
    _k("NCCL_IB_TIMEOUT", 20, "int", "IB QP local ACK timeout exponent: 4.096 us x 2^N per attempt (14 to 2.13, "
       "18 in 2.14-2.22, 20 from 2.23; net_ib/connect.cc)", nccl=NO_EFFECT,
       des="when a dead link's transfers fail with IB status 12 (retry exceeded), ending the run as NCCL aborts: "
       "(RETRY_CNT + 1) x 4.096 us x 2^TIMEOUT after they stall (0: never)",
       real=_IB_REAL + "the queue pairs' local ACK timeout", versioned=((3, 14), (14, 18), (23, 20))),
    _k("NCCL_IB_RETRY_CNT", 7, "int", "IB retransmissions before a QP errors out (net_ib/connect.cc)", nccl=NO_EFFECT,
       des="with NCCL_IB_TIMEOUT, when a dead link's transfers fail with status 12",
       real=_IB_REAL + "the queue pairs' retry count"),
    _k("NCCL_IB_QPS_PER_CONNECTION", 1, "int", "queue pairs per IB connection (net_ib/connect.cc)", "2.10",
       nccl=NO_EFFECT, des="on RoCE without adaptive routing, a connection's queue pairs hash onto that many spine "
       "routes (ECMP); on InfiniBand they share one route (one destination LID)",
       real=_IB_REAL + "RC queue pairs per connection (the two ends must agree)"),
    _k("NCCL_IB_SPLIT_DATA_ON_QPS", 0, "int", "1 splits each message over all QPs; 0 one QP per message, round-robin "
       "(1 in 2.18-2.19, 0 from 2.20; net_ib/common.cc)", "2.18", nccl=NO_EFFECT,
       des="1: every message split over its connection's queue-pair routes; 0: each message whole on the next "
       "queue pair in turn (counted over the messages in flight)",
       real=_IB_REAL + "1: each step split over every queue pair in 128-byte-aligned parts; 0: whole on the next "
       "in turn", versioned=((18, 1), (20, 0))),
    _k("NCCL_IB_ADAPTIVE_ROUTING", -2, "int", "adaptive routing (-2: on for InfiniBand, off for RoCE; "
       "net_ib/init.cc)", "2.16", nccl=NO_EFFECT, des="a connection's bytes sprayed evenly over every spine route "
       "between its leaves",
       real=_IB_REAL + "on (-2: on InfiniBand), steps above NCCL_IB_AR_THRESHOLD go as a plain RDMA write and a "
       "zero-byte write with immediate"),
    _k("NCCL_IB_AR_THRESHOLD", 8192, "int", "sends above this use adaptive routing's write + separate notification",
       "2.6", nccl=NO_EFFECT, real=_IB_REAL + "the step size above which adaptive routing splits data and notice"),
    _k("NCCL_IB_PCI_RELAXED_ORDERING", 2, "int", "PCIe relaxed ordering for registered memory", "2.12",
       nccl=NO_EFFECT, real=_NOT_RUN),
    _k("NCCL_IB_MERGE_NICS", 1, "int", "merge the ports of a multi-port NIC into one device (net_ib/init.cc)", "2.20",
       nccl="none: the catalog's NICs are single-port", real=_NOT_RUN),
    _k("NCCL_SOCKET_IFNAME", None, "iflist", "interfaces for bootstrap and sockets: prefixes, '^' excludes, '=' "
       "exact (misc/socket.cc)", nccl="the interface the hang replay's logs name",
       real="the interfaces the real backend's bootstrap and sockets use"),
    _k("NCCL_SOCKET_NTHREADS", -2, "int", "helper threads per socket connection (-2: by the NIC's vendor, else 0; "
       "at most 16; transport/net_socket.cc)", "2.4", nccl=NO_EFFECT,
       real="helper threads, each with its own sockets, per NET connection"),
    _k("NCCL_NSOCKS_PERTHREAD", -2, "int", "sockets per helper thread (-2: 8 on AWS, else 1)", "2.4", nccl=NO_EFFECT,
       real="sockets per helper thread per NET connection"),
    _k("NCCL_COMM_ID", None, "hostport", "the bootstrap root, host:port or [ipv6]:port (bootstrap.cc)",
       nccl=NO_EFFECT, real="the root the ranks join (when NICKSIM_COMM_ID is not set)"),
    _k("NCCL_HOSTID", None, "str", "this host's identity instead of hostname and boot id (ranks with the same one "
       "share a node)", "2.10", nccl=NO_EFFECT, real="which ranks the real backend puts on one node"),
    # --- logging (debug.cc) ---
    _k("NCCL_DEBUG", None, "debug", "log level: VERSION WARN INFO ABORT TRACE (debug.cc)",
       nccl="NCCL's lines for the job, per rank (perf, search, hang replay)", real="each rank's NCCL lines"),
    _k("NCCL_DEBUG_SUBSYS", None, "debug", "subsystems logged: INIT COLL P2P SHM NET GRAPH TUNING ENV ALLOC CALL "
       "PROXY NVLS BOOTSTRAP REG PROFILE RAS DESTROY ALL, '^' inverts (default INIT,ENV; INIT,BOOTSTRAP,ENV from "
       "2.23)", nccl="which of NCCL's lines are written", real="which of NCCL's lines are written"),
    _k("NCCL_DEBUG_FILE", None, "path", "file for the NCCL_DEBUG lines instead of stdout; %h host, %p pid "
       "(debug.cc)", nccl="where the lines go, one file per host and pid", real="where each rank's lines go"),
    # --- thresholds NCCL removed ---
    _k("NCCL_SINGLE_RING_THRESHOLD", None, "int", "below this size only one ring was used (NCCL 2.1-2.2, before "
       "the open-source tags; docs/env.rst)", "2.1", "2.3", nccl="none: no modelled release reads it"),
    _k("NCCL_LL_THRESHOLD", None, "int", "below this size LL was used (read 2.3-2.4; removed in 2.5)", "2.3", "2.5",
       nccl="none: no modelled release (2.18+) reads it; the time model chooses LL"),
    _k("NCCL_TREE_THRESHOLD", None, "int", "below this size Tree was used (read 2.4; removed in 2.5)", "2.4", "2.5",
       nccl="none: no modelled release (2.18+) reads it; the time model chooses Tree"),
    # --- PyTorch's ProcessGroupNCCL, for hang replays ---
    _k("TORCH_NCCL_ASYNC_ERROR_HANDLING", 3, "int", "what the watchdog does on a timeout: 0 nothing, 1 tear down "
       "the process, 2 clean up only, 3 skip clean-up and tear down", nccl=NO_EFFECT, des=_DES_REPLAY,
       real=NO_EFFECT),
    _k("TORCH_NCCL_BLOCKING_WAIT", 0, "int", "1: wait() blocks and raises on timeout instead of the watchdog",
       nccl=NO_EFFECT, des=_DES_REPLAY, real=NO_EFFECT),
    _k("TORCH_NCCL_DESYNC_DEBUG", 0, "int", "1: on a timeout, report which ranks are behind", nccl=NO_EFFECT,
       des=_DES_REPLAY, real=NO_EFFECT),
    _k("TORCH_NCCL_TRACE_BUFFER_SIZE", 2000, "int", "Flight Recorder entries kept per rank (0 disables)",
       nccl=NO_EFFECT, des="the calls each replayed rank's Flight Recorder dump keeps", real=NO_EFFECT),
    _k("TORCH_NCCL_DUMP_ON_TIMEOUT", 1, "int", "1: dump the Flight Recorder on a timeout", nccl=NO_EFFECT,
       des="whether the hang replay writes nccl_trace_rank_R.json", real=NO_EFFECT),
    _k("NICKSIM_PG_TIMEOUT", 600, "int", "the process group's timeout in seconds (init_process_group(timeout=); "
       "PyTorch's default 600)", nccl=NO_EFFECT, des="the hang replay's watchdog limit, and perf -T's default",
       real=NO_EFFECT, least=1),
    # --- nicksim's own ---
    _k("NICKSIM_COMM_ID", None, "hostport", "the real backend's bootstrap root, host:port (as NCCL_COMM_ID)",
       nccl=NO_EFFECT, real="the root the ranks join"),
    _k("NICKSIM_TIMEOUT", 60, "int", "seconds the real backend waits on a peer before it gives up", nccl=NO_EFFECT,
       real="how long a rank waits on a dead or stuck peer", least=1),
    _k("NICKSIM_DEVICE", "cpu", "str", "where the real backend's ranks run: cpu (shared memory, numpy) or gpu (CUDA "
       "IPC, CuPy kernels; one host)", nccl=NO_EFFECT, real="CPU or GPU buffers and kernels"),
    _k("NICKSIM_CACHE", None, "path", "the folder where searched graphs are kept between runs (default "
       "$XDG_CACHE_HOME/nicksim, else ~/.cache/nicksim); off keeps none", nccl=NO_EFFECT,
       des=NO_EFFECT, real=NO_EFFECT),
    _k("NICKSIM_DEBUG_RANKS", "all", "str", "the simulated ranks whose NCCL_DEBUG lines are written: all, or a list "
       "such as 0,8-15", nccl="which simulated ranks log", real="no effect: every real rank logs its own"),
)})
