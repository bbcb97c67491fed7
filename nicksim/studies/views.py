"""What the pictures show, as plain data: a job's node, fabric, paths, rings, trees and heads; the
priced alternatives behind a call's choice; curves over sizes; a run's links and timeline; a hang's
wait-for graph.

Every function takes what it reads first (a job, a run, a replay) and returns frozen dataclasses
or plain records, laid out for drawing where the thing is a graph (`Drawing`: vertices with x, y
and edges with their link kind and GB/s). studies/figures.py draws them; the dashboard and a
notebook read the same values.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from ..calls import COLLECTIVE_TABLE, call_for_size
from ..formats.report import bus_factor
from ..tuning.choose import priced

__all__ = ["Vertex", "Edge", "Drawing", "PathMatrix", "Heads", "node_drawing", "fabric_drawing", "path_matrix",
           "ring_orders", "tree_drawing", "heads", "priced_rows", "size_curves", "link_rows", "timeline_rows",
           "measured_rows", "sweep_series", "WaitEdge", "replay_waits", "diagnosis_waits", "MAX_FABRIC_NODES"]

# The most nodes a fabric picture shows (the leaves and spines of the rest look the same).
MAX_FABRIC_NODES = 8


@dataclass(frozen=True)
class Vertex:
    """A drawn node: its name, kind (GPU, NVS, PCI, CPU, NIC, NET, leaf, spine) and position."""

    name: str
    kind: str
    x: float
    y: float


@dataclass(frozen=True)
class Edge:
    """A drawn link between two vertices (by name): its kind (NVL, PCI, SYS, C2C, NET, ...) and
    bandwidth in GB/s, the faster direction where the two differ."""

    a: str
    b: str
    kind: str
    bw_gbps: float


@dataclass(frozen=True)
class Drawing:
    """A graph laid out for drawing: a title, vertices with positions, edges between them."""

    title: str
    vertices: tuple[Vertex, ...]
    edges: tuple[Edge, ...]


def _vertex_name(system, index: int) -> str:
    """GPUs by rank, NETs by device, the rest by NCCL's id; prefixed by the host in a system of
    several hosts (an NVLink domain), where ids repeat from host to host."""
    node = system.nodes[index]
    if node.kind == "GPU":
        return f"GPU{node.gpu.rank}"
    host = f"h{node.system_id}:" if len(system.host_hashes) > 1 else ""
    if node.kind == "NET":
        return f"{host}NET{node.net.dev}"
    return host + (f"{node.kind}/{node.local_id:x}" if node.kind != "CPU" else f"CPU{node.cpu.numaid}")


def node_drawing(job) -> Drawing:
    """The job's node as NCCL models it (before trimming to a rank's domain): CPUs on top, the PCIe
    tree below them, GPUs and NICs in one row, NETs under their NICs, NVSwitches at the bottom.
    A 2.30 DEV node is drawn as its GPU (NVLinks end on it, the GPU sits behind it)."""
    system = job.paths.node_system
    as_gpu = {}
    for g in system.gpus():
        as_gpu[system.device_of(g)] = g
    def key(i: int) -> int:
        return as_gpu.get(i, i)
    children: dict[int, list[int]] = {}
    parent: dict[int, int] = {}
    order = list(system.of_kind("CPU"))
    for cpu in order:  # the PCIe tree, breadth first from each CPU
        queue = [cpu]
        while queue:
            here = queue.pop(0)
            for link in system.nodes[here].links:
                there = key(link.dst)
                if link.kind != "PCI" or there in parent or there in order or there == here:
                    continue
                if system.nodes[there].kind in ("PCI", "GPU", "NIC"):
                    parent[there] = here
                    children.setdefault(here, []).append(there)
                    queue.append(there)
    leaves: list[int] = []
    def walk(i: int) -> None:
        kids = children.get(i, [])
        if not kids and i not in order:
            leaves.append(i)
        for k in kids:
            walk(k)
    for cpu in order:
        walk(cpu)
    placed = set(leaves)
    leaves += [i for i in system.gpus() + system.of_kind("NIC") if i not in placed]
    depth: dict[int, int] = {}
    for i in order:
        depth[i] = 0
    def depth_of(i: int) -> int:
        if i not in depth:
            depth[i] = depth_of(parent[i]) + 1 if i in parent else 1
        return depth[i]
    bottom = max([depth_of(i) for i in leaves] + [1])
    x: dict[int, float] = {leaf: float(n) for n, leaf in enumerate(leaves)}
    y: dict[int, float] = {leaf: -float(bottom) for leaf in leaves}
    def place(i: int) -> float:
        if i not in x:
            kids = children.get(i, [])
            x[i] = sum(place(k) for k in kids) / len(kids) if kids else 0.0
            y[i] = -float(depth_of(i))
        return x[i]
    for cpu in order:
        place(cpu)
    for i, cpu in enumerate(order):  # CPUs without a PCIe tree still get a place
        if not children.get(cpu):
            x[cpu] = float(i) * max(1.0, len(leaves) / max(1, len(order)))
    for net in system.nets():
        nic = next((key(l.dst) for l in system.nodes[net].links if system.nodes[key(l.dst)].kind == "NIC"), None)
        x[net] = x.get(nic, float(len(x))) if nic is not None else float(len(leaves))
        y[net] = -float(bottom) - 1
    others = [i for i in range(len(system.nodes)) if i not in x and key(i) == i]
    centre = (len(leaves) - 1) / 2 if leaves else 0.0
    for n, i in enumerate(others):  # NVSwitches and anything off the PCIe tree, centred at the bottom
        x[i] = centre + (n - (len(others) - 1) / 2) * 2.0
        y[i] = -float(bottom) - 2
    vertices = tuple(Vertex(_vertex_name(system, i), system.nodes[i].kind, x[i], y[i]) for i in sorted(x))
    seen: dict[tuple[int, int], Edge] = {}
    for i, node in enumerate(system.nodes):
        a = key(i)
        for link in node.links:
            b = key(link.dst)
            if a == b or link.kind == "LOC" and {system.nodes[a].kind, system.nodes[b].kind} != {"NIC", "NET"}:
                continue
            pair = (min(a, b), max(a, b))
            if pair not in seen or seen[pair].bw_gbps < link.bw_gbps:
                seen[pair] = Edge(_vertex_name(system, pair[0]), _vertex_name(system, pair[1]), link.kind,
                                  link.bw_gbps)
    return Drawing(f"{job.system_name}: one node as NCCL models it", vertices, tuple(seen.values()))


def fabric_drawing(job, max_nodes: int = MAX_FABRIC_NODES) -> Drawing:
    """The cluster's fabric for its first `max_nodes` nodes: spines on top, leaves (one per rail
    and group of hosts where rail-optimised) below, each node's NICs at the bottom (`nN.P`: node
    N's NIC port P)."""
    graph = job.cluster.graph
    shown = min(job.spec.nodes, max_nodes)
    nics = sorted(n for n, d in graph.nodes(data=True) if d["kind"] == "nic" and d["node"] < shown)
    leaves = sorted({m for n in nics for m in graph.neighbors(n) if graph.nodes[m]["kind"] == "leaf"})
    spines = sorted(n for n, d in graph.nodes(data=True) if d["kind"] == "spine")
    names = {n: f"n{n[1]}.{n[2]}" if n[0] == "nic" else  # node.port
             (f"leaf r{n[1]}g{n[2]}" if n[1] >= 0 else f"leaf {n[2]}") if n[0] == "leaf" else f"spine {n[1]}"
             for n in [*nics, *leaves, *spines]}
    width = max(len(nics), 1)
    def spread(items: list, y: float) -> list[Vertex]:
        step = width / max(len(items), 1)
        kind = {"nic": "NIC", "leaf": "leaf", "spine": "spine"}
        return [Vertex(names[n], kind[n[0]], step * (k + 0.5), y) for k, n in enumerate(items)]
    vertices = tuple(spread(nics, 0.0) + spread(leaves, 1.0) + spread(spines, 2.0))
    keep = set(names)
    edges = tuple(Edge(names[a], names[b], "NET", float(d["bw_gbps"])) for a, b, d in graph.edges(data=True)
                  if a in keep and b in keep)
    more = f" (first {shown} of {job.spec.nodes} nodes)" if shown < job.spec.nodes else ""
    return Drawing(f"{job.spec.nodes} node(s), {job.cluster.leaves} leaf and {job.cluster.spines} spine switch(es), "
                   f"oversubscription {job.spec.oversubscription:g}:1{more}", vertices, edges)


@dataclass(frozen=True)
class PathMatrix:
    """NCCL's path type and bottleneck GB/s from each row (GPUs, then NETs) to each column."""

    rows: tuple[str, ...]
    cols: tuple[str, ...]
    types: tuple[tuple[str, ...], ...]
    bw_gbps: tuple[tuple[float, ...], ...]


def path_matrix(job) -> PathMatrix:
    """The path matrix `nicksim topo --paths` prints, as values (the rank's view of its node)."""
    s = job.paths.system
    gpus = sorted(s.gpus(), key=lambda g: s.nodes[g].gpu.rank)
    hosts = {s.nodes[g].system_id for g in gpus}
    nets = [n for n in s.nets() if s.nodes[n].system_id in hosts]
    names = [_vertex_name(s, i) for i in gpus + nets]
    types, bws = [], []
    for a in gpus + nets:
        row_t, row_b = [], []
        for b in gpus + nets:
            p = job.paths.path(a, b) if a != b else None
            row_t.append("X" if a == b else (p.type if p else "-"))
            row_b.append(float(p.bw_gbps) if p else 0.0)
        types.append(tuple(row_t))
        bws.append(tuple(row_b))
    return PathMatrix(tuple(names), tuple(names), tuple(types), tuple(bws))


def ring_orders(job) -> tuple[tuple[int, ...], ...]:
    """Per runtime channel, the ranks of node 0 in the order the channel's ring visits them (the
    ring enters the node at the first and leaves at the last where there are several nodes)."""
    per_node = len(job.paths.node_system.gpus())
    out = []
    for ring in job.channels.rings:
        out.append(tuple(r for r in ring if r < per_node))
    return tuple(out)


def tree_drawing(job, channel: int) -> Drawing:
    """The tree of runtime channel `channel` over the job's nodes (NCCL's double binary tree: the
    first half of the channels use one tree, the second half its mirror), root on top. A vertex is
    a node; inside a node the tree is a chain through its GPUs."""
    per_node = len(job.paths.node_system.gpus())
    links = job.tree_links()[channel]
    parent_node: dict[int, int] = {}
    for rank, (up, _) in links.items():
        if up >= 0 and up // per_node != rank // per_node:
            parent_node[rank // per_node] = up // per_node
    nodes = range(job.nodes)
    depth: dict[int, int] = {}
    def depth_of(n: int) -> int:
        if n not in depth:
            depth[n] = depth_of(parent_node[n]) + 1 if n in parent_node else 0
        return depth[n]
    levels: dict[int, list[int]] = {}
    for n in nodes:
        levels.setdefault(depth_of(n), []).append(n)
    width = max(len(v) for v in levels.values())
    vertices = tuple(Vertex(f"node{n}", "node", width * (k + 0.5) / len(members), -float(d))
                     for d, members in sorted(levels.items()) for k, n in enumerate(members))
    edges = tuple(Edge(f"node{child}", f"node{up}", "NET", 0.0) for child, up in sorted(parent_node.items()))
    return Drawing(f"tree of channel {channel}", vertices, edges)


@dataclass(frozen=True)
class Heads:
    """NVLS and CollNet heads inside a node: GPUs per node, the local ranks heading NVLS chunks
    (in head order) and the CollNet Direct heads; empty where the job has none."""

    per_node: int
    nvls: tuple[int, ...]
    collnet: tuple[int, ...]


def heads(job) -> Heads:
    per_node = len(job.paths.node_system.gpus())
    nvls = job.nvls_layout()
    collnet = job.collnet_layout()
    return Heads(per_node, nvls[1] if nvls else (), tuple(collnet.heads) if collnet else ())


def _busbw(collective: str, nbytes: int, time_us: float, nranks: int) -> float:
    return nbytes / 1e3 / time_us * bus_factor(collective, nranks) if time_us > 0 else 0.0


def priced_rows(job, call) -> list[dict]:
    """Every algorithm x protocol NCCL prices for `call`, with its time, bus bandwidth, channels
    and threads, `chosen` on the one it keeps (tuning.choose.priced); unpriced pairs (time -1) kept."""
    out = []
    for p in priced(job.comm, call):
        runs = p.time_us >= 0
        out.append({"algorithm": p.algorithm, "protocol": p.protocol, "time_us": p.time_us if runs else None,
                    "busbw_gbps": _busbw(call.collective, call.nbytes, p.time_us, call.nranks) if runs else None,
                    "channels": p.max_channels, "threads": p.n_threads, "backup": p.backup, "chosen": p.chosen})
    return out


def size_curves(job, collective: str, sizes: Sequence[int], dtype: str = "float", op: str = "sum",
                root: int = 0) -> list[dict]:
    """NCCL's time model over `sizes` for every pair it prices: a record per size and pair that can
    run, `chosen` where it is NCCL's pick at that size."""
    if COLLECTIVE_TABLE[collective].p2p:
        return []
    out = []
    for size in sizes:
        call = call_for_size(collective, size, dtype, op, root, job.nranks)
        for row in priced_rows(job, call):
            if row["time_us"] is not None:
                out.append({"nbytes": size, **row})
    return out


def link_rows(run, top: int = 20) -> list[dict]:
    """The busiest links of a DES run (model.engine.DesRun), by load: bytes, busy share of the
    call's time, rate while busy, capacity, and load (bytes over what the link could carry)."""
    def load(name: str) -> float:
        capacity = run.link_bw_gbps[name] * 1e3 * run.time_us
        return run.link_nbytes[name] / capacity if capacity > 0 else 0.0
    ranked = sorted(run.link_busy_us, key=lambda name: (-load(name), name))[:top]
    return [{"link": name, "nbytes": run.link_nbytes[name],
             "busy_pct": 100 * run.link_busy_us[name] / run.time_us if run.time_us > 0 else 0.0,
             "busy_gbps": run.link_nbytes[name] / run.link_busy_us[name] / 1e3 if run.link_busy_us[name] > 0 else 0.0,
             "capacity_gbps": run.link_bw_gbps[name], "load_pct": 100 * load(name)} for name in ranked]


def timeline_rows(trace: dict, max_spans: int = 4000, ranks: Sequence[int] | None = None) -> list[dict]:
    """The spans of a Chrome trace document (a DES or real run's): rank, lane (channel and
    stream), primitive, start and duration in us; those of `ranks` (every rank if None), the first
    `max_spans` by start time."""
    lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace.get("traceEvents", ())
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    wanted = None if ranks is None else set(ranks)
    spans = [e for e in trace.get("traceEvents", ()) if e.get("ph") == "X" and (wanted is None or e["pid"] in wanted)]
    spans.sort(key=lambda e: e["ts"])
    return [{"rank": e["pid"], "channel": e.get("args", {}).get("channel", -1),
             "lane": lanes.get((e["pid"], e["tid"]), str(e["tid"])), "op": e["name"], "start_us": float(e["ts"]),
             "dur_us": float(e["dur"])} for e in spans[:max_spans]]


def measured_rows(table) -> list[dict]:
    """A measured nccl-tests table (formats.report.MeasuredTable) as records: size, out-of-place
    and in-place time and bus bandwidth."""
    out = []
    for row in table.rows:
        oop, inp = row.out_of_place, row.in_place
        out.append({"nbytes": row.nbytes, "time_us": oop.time_us if oop else None,
                    "busbw_gbps": oop.busbw_gbps if oop else None,
                    "in_place_busbw_gbps": inp.busbw_gbps if inp else None})
    return out


# A sweep row's columns that are results, not the grid point's options.
_SWEEP_RESULTS = frozenset({"point", "nbytes", "time_us", "algbw_gbps", "busbw_gbps", "algorithm", "protocol",
                            "nchannels", "hang", "error"})


def _point_options(row: dict) -> dict[str, str]:
    """The options of a sweep row's grid point, its env and set settings one by one."""
    out = {}
    for key, value in row.items():
        if key in _SWEEP_RESULTS:
            continue
        if key in ("env", "set"):
            for item in str(value or "").split():
                name, _, setting = item.partition("=")
                out[name] = setting
        else:
            out[key] = "" if value is None else str(value)
    return out


def sweep_series(rows: Sequence[dict]) -> dict[str, list[dict]]:
    """A sweep's rows (studies.sweep) as series to draw: one per grid point, named by the options
    that differ from point to point, its rows in size order. Rows with an error or a hang are left
    out, and so is a point with no row left."""
    by_point: dict[object, list[dict]] = {}
    for row in rows:
        by_point.setdefault(row.get("point"), []).append(row)
    options = {point: _point_options(found[0]) for point, found in by_point.items()}
    names = list(dict.fromkeys(name for found in options.values() for name in found))
    varying = [name for name in names if len({found.get(name) for found in options.values()}) > 1]
    out: dict[str, list[dict]] = {}
    for point, found in by_point.items():
        label = " ".join(f"{name}={options[point].get(name, '-')}" for name in varying) \
            or str(found[0].get("system") or f"point {point}")
        if label in out:
            label = f"{label} (point {point})"
        kept = sorted((r for r in found if not r.get("error") and not r.get("hang")
                       and r.get("busbw_gbps") is not None), key=lambda r: r["nbytes"])
        if kept:
            out[label] = kept
    return out


@dataclass(frozen=True)
class WaitEdge:
    """Rank `waiter` waits on rank `waited` (for `what`)."""

    waiter: int
    waited: int
    what: str


_RANK = re.compile(r"rank (\d+)")


def replay_waits(blocked, standing=()) -> tuple[WaitEdge, ...]:
    """The wait-for edges of a hang's blocked streams (model.engine.Blocked): each rank waits on the
    peers its streams name; a stream that waits on the whole group (an NVLS multicast, say) waits
    on the ranks `standing` (scenarios.Standing) shows never started the call (behind, scheduled)."""
    absent = [s.rank for s in standing if s.state in ("behind", "scheduled")]
    out: dict[tuple[int, int], WaitEdge] = {}
    for b in blocked:
        m = _RANK.search(b.waits_for)
        peers = [int(m.group(1))] if m else absent
        for peer in peers:
            if peer != b.rank:
                out.setdefault((b.rank, peer), WaitEdge(b.rank, peer, b.waits_for))
    return tuple(out.values())


def diagnosis_waits(diagnosis, nranks: int | None = None) -> tuple[WaitEdge, ...]:
    """Wait-for edges from a diagnosis alone: every rank its evidence shows blocked (or every rank
    of `nranks`) waits on the culprits it names."""
    culprits = tuple(diagnosis.culprit_ranks)
    seen = {e.rank for e in diagnosis.evidence if e.rank is not None}
    ranks = set(range(nranks)) if nranks else seen
    return tuple(WaitEdge(r, c, diagnosis.category) for r in sorted(ranks - set(culprits)) for c in culprits)
