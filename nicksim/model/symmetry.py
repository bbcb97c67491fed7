"""Nodes that behave alike, so the DES can simulate one of them for all.

`node_classes(job, plan, fault_links, late)` promises a Collapse: the job's nodes split into
classes such that the nodes of one class run the same primitive programs towards peers of the same
classes (per channel and role: ring next/prev, tree parent/children), over network routes whose
links are themselves alike, with the same stragglers and no fault on their own links — the
coarsest such split (colour refinement: a node's colour is refined by its peers' colours and the
colours of the cables on its routes, a cable's by the colours of the nodes whose routes cross it,
until nothing splits further). A node with a fault or a straggler ends up in a class of its own,
and so, through refinement, do the nodes that talk to it differently.

`Collapse.rep_rank(r)` is the rank that stands for `r` (same local rank, its class's first node);
`Collapse.members(r)` the ranks a representative stands for; `peer_of(r, channel, p, member)` the
peer that plays, for `member`, the role `p` plays for `r`. Algorithms whose peers are not given
by ring/tree/NVLS-tree structure (point-to-point, PAT) are not collapsed (every node its own class),
nor are all_gather and reduce_scatter through the NVLS or CollNet switch, where each node's heads
own different pieces.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..plan import nvls_tree_links

__all__ = ["Collapse", "node_classes", "COLLAPSIBLE"]

COLLAPSIBLE = ("Ring", "Tree", "NVLSTree", "NVLS", "CollNetDirect", "CollNetChain")


class _Roles:
    """The inter-node peers of a rank on a channel, by role, for one plan's algorithm."""

    def __init__(self, job, algorithm: str, n_channels: int):
        self.job, self.algorithm = job, algorithm
        self.per_node = len(job.paths.node_system.gpus())
        self.nodes = job.nodes
        self.rings = job.channels.rings
        self.trees = job.tree_links() if algorithm == "Tree" else {}
        self.nvls = job.nvls_layout() if algorithm == "NVLSTree" else None
        self.n_channels = n_channels
        self._pos = [{r: i for i, r in enumerate(ring)} for ring in self.rings]

    def of(self, rank: int, channel: int) -> dict[str, int]:
        if self.algorithm == "Ring":
            k = channel % len(self.rings)
            ring, i = self.rings[k], self._pos[k][rank]
            return {"next": ring[(i + 1) % len(ring)], "prev": ring[i - 1]}
        if self.algorithm == "Tree":
            up, down = self.trees[channel][rank]
            roles = {f"down{k}": d for k, d in enumerate(down) if d >= 0}
            if up >= 0:
                roles["up"] = up
            return roles
        if self.algorithm == "NVLSTree":
            _, up, children = nvls_tree_links(self.nodes, self.per_node, self.nvls[1], rank, channel)
            roles = {f"child{k}": c for k, c in enumerate(children)}
            if up >= 0:
                roles["up"] = up
            return roles
        return {}  # NVLS and CollNet talk across nodes only through the switch


@dataclass(frozen=True)
class Collapse:
    """Node classes (see the module docstring): `rep_node[n]` stands for node n."""

    per_node: int
    rep_node: tuple[int, ...]
    roles: object

    @property
    def n_classes(self) -> int:
        return len(set(self.rep_node))

    def is_rep(self, rank: int) -> bool:
        node = rank // self.per_node
        return self.rep_node[node] == node

    def rep_rank(self, rank: int) -> int:
        node, local = divmod(rank, self.per_node)
        return self.rep_node[node] * self.per_node + local

    def members(self, rank: int) -> tuple[int, ...]:
        node, local = divmod(rank, self.per_node)
        return tuple(n * self.per_node + local for n, rep in enumerate(self.rep_node) if rep == node)

    def weight(self, node: int) -> int:
        return sum(1 for rep in self.rep_node if rep == node)

    def peer_of(self, rank: int, channel: int, peer: int, member: int) -> int:
        """The peer that plays for `member` the role `peer` plays for `rank` on `channel`."""
        if peer < 0 or member == rank:
            return peer
        if peer // self.per_node == rank // self.per_node:  # inside the node: the same local rank
            return (member // self.per_node) * self.per_node + peer % self.per_node
        mine = self.roles.of(rank, channel)
        role = next(name for name, p in mine.items() if p == peer)
        return self.roles.of(member, channel)[role]


def _hash(value) -> int:
    return hash(value)


def node_classes(job, algorithm: str, n_channels: int, route_cables, fault_nodes: dict[int, tuple],
                 late: dict[int, float]) -> Collapse:
    """The coarsest split of the nodes into classes that behave alike (module docstring).

    `route_cables(channel, src, dst)` gives the cable link ids (and their initial colours) of the
    route between two ranks on different nodes; `fault_nodes` marks nodes whose own links carry a
    fault; `late` maps ranks to their straggler delay."""
    per_node = len(job.paths.node_system.gpus())
    nodes = job.nodes
    roles = _Roles(job, algorithm, n_channels)
    if algorithm not in COLLAPSIBLE or nodes < 2:
        return Collapse(per_node, tuple(range(nodes)), roles)
    # Every inter-node relation: (node, channel, local, role, peer rank, cable ids).
    relations = []
    link_colour: dict[int, int] = {}
    for node in range(nodes):
        for channel in range(n_channels):
            for local in range(per_node):
                rank = node * per_node + local
                for role, peer in sorted(roles.of(rank, channel).items()):
                    if peer // per_node == node:
                        continue
                    cables, colours = route_cables(channel, rank, peer)
                    for link, colour in zip(cables, colours):
                        link_colour.setdefault(link, colour)
                    relations.append((node, channel, local, role, peer, cables))
    colour = [_hash((fault_nodes.get(n, ()), tuple(late.get(n * per_node + l, 0.0) for l in range(per_node))))
              for n in range(nodes)]
    count = (len(set(colour)), len(set(link_colour.values())))
    while True:
        signature: list[list] = [[c] for c in colour]
        crossing: dict[int, list] = {}
        for node, channel, local, role, peer, cables in relations:
            signature[node].append((channel, local, role, colour[peer // per_node], peer % per_node,
                                    tuple(link_colour[x] for x in cables)))
            for i, link in enumerate(cables):
                crossing.setdefault(link, []).append((colour[node], channel, local, role, i))
        new_colour = [_hash(tuple(sorted(sig[1:], key=repr)) + (sig[0],)) for sig in signature]
        link_colour = {link: _hash((c, tuple(sorted(crossing.get(link, ()))))) for link, c in link_colour.items()}
        new_count = (len(set(new_colour)), len(set(link_colour.values())))
        colour = new_colour
        if new_count == count:
            break
        count = new_count
    first: dict[int, int] = {}
    rep_node = tuple(first.setdefault(c, n) for n, c in enumerate(colour))
    return Collapse(per_node, rep_node, roles)
