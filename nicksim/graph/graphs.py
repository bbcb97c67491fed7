"""Searched graphs as values: the Graph NCCL's search returns (ncclTopoGraph), its patterns, and the
graphs printed as ncclTopoPrintGraph prints them (`format_graph`) and dumped as NCCL_GRAPH_DUMP_FILE
holds them (`graphs_xml`).

They live apart from the search (search.py, which re-exports them) so that a run answered from the
graph cache (cache.py) reads and prints graphs without loading the search or NumPy.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..params import Params
from .paths import Paths
from ..topology.system import System

__all__ = ["Graph", "RING", "BALANCED_TREE", "SPLIT_TREE", "TREE", "NVLS", "COLLNET_DIRECT", "collnet_enabled",
           "format_graph", "graphs_xml"]

# graph.h NCCL_TOPO_PATTERN_*
BALANCED_TREE, SPLIT_TREE, TREE, RING, NVLS, COLLNET_DIRECT = 1, 2, 3, 4, 5, 6


@dataclass(frozen=True)
class Graph:
    """A search result: NCCL's ncclTopoGraph fields, channels as rank lists and NIC node ids."""

    id: int
    pattern: int
    cross_nic: int
    n_channels: int
    bw_intra: float
    bw_inter: float
    latency_inter: float
    type_intra: str
    type_inter: str
    same_channels: int
    n_hops: int
    intra: tuple[tuple[int, ...], ...]     # per channel: GPU ranks in order
    inter: tuple[tuple[int, int], ...]     # per channel: (first NET id, last NET id), -1 when none
    inter_node: bool = False
    fallback: bool = False
    notes: tuple[str, ...] = field(default=())


def collnet_enabled(system: System, params: Params) -> bool:
    """collNetSupport(comm): NCCL_COLLNET_ENABLE=1 and a CollNet plugin, which shows in the
    topology as NICs it serves (net coll="1", e.g. `--sharp`)."""
    return params.get("NCCL_COLLNET_ENABLE") == 1 and any(system.nodes[n].net.coll for n in system.nets())


def format_graph(paths: Paths, graph: Graph) -> list[str]:
    """ncclTopoPrintGraph: the Pattern line and one line per channel, in the version's format
    (NIC as %d until 2.21, %lx in 2.22, sys-local from 2.23 — 2.23 printing the first NIC's local id
    for the last one; GPUs by rank until 2.26, by topology id with one GPU per NVLS channel after)."""
    s = paths.system
    release = s.rules.release
    lines = [f"Pattern {graph.pattern}, crossNic {graph.cross_nic}, nChannels {graph.n_channels}, "
             f"bw {graph.bw_intra:f}/{graph.bw_inter:f}, type {graph.type_intra}/{graph.type_inter}, "
             f"sameChannels {graph.same_channels}"]

    def sys_id(node_id: int) -> str:  # %lx of an int64 shifted right: -1 prints as ffffffffffffffff
        return f"{(node_id >> 56) & 0xFFFFFFFFFFFFFFFF:x}"

    def local_id(node_id: int) -> str:
        return f"{node_id & 0x00FFFFFFFFFFFFFF:x}"

    def net_label(c: int, end: int) -> str:
        node_id = graph.inter[c][end]
        style = release.graph_net_label
        if style == "int":
            low = node_id & 0xFFFFFFFF
            return f"NET/{low - (1 << 32) if low >= 1 << 31 else low}"
        if style == "hex":
            return f"NET/{node_id & 0xFFFFFFFFFFFFFFFF:x}"
        local = graph.inter[c][0] if (style == "sys-local-first" and end == 1) else node_id
        return f"NET/{sys_id(node_id)}-{local_id(local)}"

    gpu_id = {s.nodes[g].gpu.rank: s.nodes[g].id for g in s.gpus()}
    for c in range(graph.n_channels):
        line = f"{c:2d} :"
        if graph.inter_node:
            line += " " + net_label(c, 0)
        for rank in graph.intra[c]:
            if release.graph_gpu_label == "id":
                line += f" GPU/{sys_id(gpu_id[rank])}-{local_id(gpu_id[rank])}"
                if graph.id == 3:
                    break  # NVLS channels name only their head
            else:
                line += f" GPU/{rank}"
        if graph.inter_node:
            line += " " + net_label(c, 1)
        lines.append(line)
    return lines


def _dev_attr(value: int, long_hex: bool) -> str:
    """A channel's dev attribute: xmlSetAttrLong ("%#" PRIx64: "0", "0x7") from 2.21, xmlSetAttrInt before."""
    if not long_hex:
        low = value & 0xFFFFFFFF
        return str(low - (1 << 32) if low >= 1 << 31 else low)
    value &= 0xFFFFFFFFFFFFFFFF
    return "0" if value == 0 else f"{value:#x}"


def _graph_element(paths: Paths, graph: Graph | None, gid: int, pattern: int) -> list[str]:
    s = paths.system
    release = s.rules.release
    hex_dev = release.graph_xml_dev_hex
    if graph is None or graph.n_channels == 0:
        return [f'  <graph id="{gid}" pattern="{pattern}" crossnic="0" nchannels="0" speedintra="0" '
                f'speedinter="0" latencyinter="0" typeintra="LOC" typeinter="LOC" samechannels="0"/>']
    out = [f'  <graph id="{graph.id}" pattern="{graph.pattern}" crossnic="{graph.cross_nic}" '
           f'nchannels="{graph.n_channels}" speedintra="{graph.bw_intra:g}" speedinter="{graph.bw_inter:g}" '
           f'latencyinter="{graph.latency_inter:g}" typeintra="{graph.type_intra}" typeinter="{graph.type_inter}" '
           f'samechannels="{graph.same_channels}">']
    dev_of = {s.nodes[g].gpu.rank: (s.nodes[g].system_id << 56) + s.nodes[g].gpu.dev for g in s.gpus()}
    for c in range(graph.n_channels):
        out.append("    <channel>")
        if graph.inter_node:
            out.append(f'      <net dev="{_dev_attr(graph.inter[c][0], hex_dev)}"/>')
        for rank in graph.intra[c]:
            rank_attr = f' rank="{rank}"' if release.graph_xml_gpu_rank else ""
            out.append(f'      <gpu dev="{_dev_attr(dev_of[rank], hex_dev)}"{rank_attr}/>')
            if graph.id == 3 and release.graph_xml_nvls_head_only:
                break  # NVLS graphs only name their head (2.21+; before, the rest of the row is written too)
        if graph.inter_node:
            out.append(f'      <net dev="{_dev_attr(graph.inter[c][1], hex_dev)}"/>')
        out.append("    </channel>")
    out.append("  </graph>")
    return out


def graphs_xml(paths: Paths, graphs: dict[str, Graph]) -> str:
    """The graphs as NCCL_GRAPH_DUMP_FILE writes them (ncclTopoDumpGraphs), in the version's order:
    ring, tree, CollNet (one graph until 2.21; direct then chain after, direct with id 2 in 2.22 and
    4 from 2.23), NVLS — the ones not searched written empty."""
    direct_id = paths.system.rules.release.collnet_direct_graph_id
    lines = ['<graphs version="1">']
    lines += _graph_element(paths, graphs.get("ring"), 0, RING)
    lines += _graph_element(paths, graphs.get("tree"), 1, BALANCED_TREE)
    if direct_id is not None:
        lines += _graph_element(paths, graphs.get("collnet_direct"), direct_id, COLLNET_DIRECT)
    lines += _graph_element(paths, graphs.get("collnet_chain"), 2, TREE)
    lines += _graph_element(paths, graphs.get("nvls"), 3, NVLS)
    lines.append("</graphs>")
    return "\n".join(lines) + "\n"
