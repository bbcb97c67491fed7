"""CollNet set-up: whether NCCL keeps CollNet on for a job, and with which heads (init.cc, coll_net.cc).

`collnet_setup(paths, graphs, nodes, params)` answers what the time model and the per-call choice
read from an initialised communicator: CollNet stays on when NCCL_COLLNET_ENABLE=1, the NICs are
served by a CollNet plugin (net coll="1", `--sharp`), the chain graph found channels and the job
spans at least NCCL_COLLNET_NODE_THRESHOLD nodes. The heads are the local ranks that talk to the
network: the first GPU of each CollNet graph channel (2.18-2.19 keep one per channel, 2.20+ drop
duplicates), or the NVLS heads when NVLS runs (2.28+). The plugin modelled is the SHARP plugin
(nccl-rdma-sharp-plugins): sum, min and max over 8- to 64-bit integers and 16- to 64-bit floats,
with iallgather and ireducescatter (CollNet API v8, NCCL 2.20+) unless NCCL_SHARP_DISABLE_ALLGATHER
or NCCL_SHARP_DISABLE_REDUCE_SCATTER says otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..params import Params
from .graphs import Graph, collnet_enabled

__all__ = ["CollNetSetup", "COLLNET_OFF", "collnet_setup", "collnet_supported", "graph_heads"]

# nccl-rdma-sharp-plugins src/sharp_plugin.c opConvert / typeConvert (bfloat16, int8 and uint8 with
# SHARP v3 data types, which Quantum-2 switches report).
_SHARP_OPS = ("sum", "min", "max")
_SHARP_TYPES = ("half", "bfloat16", "int8", "uint8", "int32", "uint32", "int64", "uint64", "float", "double")


@dataclass(frozen=True)
class CollNetSetup:
    """The communicator's CollNet state: `enabled` (config.collnetEnable / collNetSupport), the
    local ranks of its heads (comm->collNetHeads), whether the chain may run on them
    (collNetChainSupport), and which optional plugin collectives exist."""

    enabled: bool
    heads: tuple[int, ...] = ()
    chain_support: bool = False
    iallgather: bool = False
    ireducescatter: bool = False

    @property
    def n_heads(self) -> int:
        return len(self.heads)


COLLNET_OFF = CollNetSetup(enabled=False)


def graph_heads(graph: Graph, per_node: int, unique: bool = True) -> tuple[int, ...]:
    """The local ranks heading the graph's channels (each channel's first GPU), in channel order;
    each once when `unique` (connect.cc / coll_net.cc drop repeats)."""
    heads = [channel[0] % per_node for channel in graph.intra]
    return tuple(dict.fromkeys(heads)) if unique else tuple(heads)


def collnet_setup(paths, graphs: dict[str, Graph], nodes: int, params: Params) -> CollNetSetup:
    """What init.cc and ncclCollNetSetup leave in the communicator of `nodes` copies of the node."""
    if not collnet_enabled(paths.node_system, params):
        return COLLNET_OFF
    chain = graphs.get("collnet_chain")
    if chain is None or chain.n_channels == 0:
        return COLLNET_OFF
    threshold = params.get("NCCL_COLLNET_NODE_THRESHOLD")
    if nodes < (2 if threshold is None else threshold):
        return COLLNET_OFF
    release = paths.system.rules.release
    per_node = len(paths.node_system.gpus())
    direct = graphs.get("collnet_direct", chain)  # 2.18-2.21 search one CollNet graph for both
    nvls = graphs.get("nvls")
    if release.collnet_heads_from_nvls and nvls is not None:
        heads = graph_heads(nvls, per_node, unique=True)
    else:
        heads = graph_heads(direct, per_node, unique=release.collnet_heads_unique)
    chain_ok = True
    if release.collnet_chain_heads_subset:  # isCollNetChainHeadsSubset
        chain_ok = set(graph_heads(chain, per_node, unique=True)) <= set(heads)
    gathers = release.collnet_ag_rs
    return CollNetSetup(enabled=True, heads=heads, chain_support=chain_ok,
                        iallgather=gathers and not params.get("NCCL_SHARP_DISABLE_ALLGATHER"),
                        ireducescatter=gathers and not params.get("NCCL_SHARP_DISABLE_REDUCE_SCATTER"))


def collnet_supported(setup: CollNetSetup, func: str, redop: str, dtype: str) -> bool:
    """ncclGetCollNetSupport: CollNet on, and for reductions the plugin's operator x type matrix
    (avg reduces as sum, then divides on the GPU)."""
    if not setup.enabled:
        return False
    if func in ("AllReduce", "Reduce", "ReduceScatter"):
        op = "sum" if redop == "avg" else redop
        return op in _SHARP_OPS and dtype in _SHARP_TYPES
    return True
