"""Nodes that behave alike, so the DES can simulate one of them for all.

`node_classes(job, algorithm, n_channels, route_cables, fault_nodes, late, exact_nodes)` promises a Collapse: the
job's nodes split into classes such that the nodes of one class run the same primitive programs
towards peers of the same classes (per channel and role: ring next/prev, tree parent/children, a
node's children taken as a set, since NCCL waits for all of them alike), over network routes whose
links are themselves alike, with the same stragglers and no fault on their own links — the
coarsest such split (colour refinement: a node's colour is refined by its peers' colours and the
colours of the cables on its routes, a cable's by the colours of the nodes whose routes cross it,
until nothing splits further). A node with a fault or a straggler ends up in a class of its own,
and so, through refinement, do the nodes that talk to it differently.

Where that exact split leaves more than `exact_nodes` classes, each channel is split on its own
relations instead: a node may stand with one set of nodes on one channel and another set on the
next. NCCL's double binary tree is the case for it: on its own each tree leaves a few classes per
depth, while the two together set every node apart. That split is not exact — a node's channels
share its NVSwitch ports, NIC and proxy thread, and their flows keep the loads on those links but
no longer the phases of the node's own other channels — and `Collapse.exact` says which was used.

`Collapse.rep_rank(r, c)` is the rank that stands for `r` on channel `c` (same local rank, its
class's first node); `Collapse.members(r, c)` the ranks a representative stands for;
`peer_of(r, c, p, member)` the peer that plays, for `member`, the role `p` plays for `r`.
Algorithms whose peers are not given by ring/tree/NVLS-tree structure (point-to-point, PAT) are
not collapsed here (every node its own class), nor are all_gather and reduce_scatter through the
NVLS or CollNet switch, where each node's heads own different pieces. Point-to-point calls that
look the same a block of nodes on are collapsed by that shift instead (translation.py,
`Collapse.shifted`: `peer_of` shifts the peer as the member is shifted).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..plan.programs import nvls_tree_links

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
        self._nvls_links: dict[tuple[int, int], tuple] = {}

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
            key = (rank, channel % 2)  # the channel picks one of the two trees (nvls_tree_links)
            if key not in self._nvls_links:
                self._nvls_links[key] = nvls_tree_links(self.nodes, self.per_node, self.nvls[1], rank, channel)
            _, up, children = self._nvls_links[key]
            roles = {f"child{k}": c for k, c in enumerate(children)}
            if up >= 0:
                roles["up"] = up
            return roles
        return {}  # NVLS and CollNet talk across nodes only through the switch


@dataclass(frozen=True)
class Collapse:
    """Node classes (see the module docstring): `rep_node[c][n]` stands for node n on channel c
    (one row for every channel when the split is joint, `exact`); `order[(r, c)]` lists rank r's
    peers on other nodes on channel c in an order that pairs them with any class-mate's."""

    per_node: int
    rep_node: tuple[tuple[int, ...], ...]
    order: dict = field(compare=False, repr=False)
    exact: bool = True
    # Per channel, the first channel with the same representatives and the same peer order: two
    # channels of one kind pair every member with the same peers (what routes depend on besides NICs).
    kinds: tuple[int, ...] = ()
    # Where the classes are a shift (translation.py): the ranks a class-mate is from the next one.
    shift: int = 0

    @classmethod
    def shifted(cls, per_node: int, nodes: int, nodes_shift: int) -> "Collapse":
        """The first `nodes_shift` nodes standing for every block of as many after them."""
        return cls(per_node, (tuple(n % nodes_shift for n in range(nodes)),), {}, shift=nodes_shift * per_node)

    def channel_kind(self, channel: int) -> int:
        return self.kinds[channel] if channel < len(self.kinds) else channel

    def _reps(self, channel: int) -> tuple[int, ...]:
        return self.rep_node[channel % len(self.rep_node)]

    @property
    def n_classes(self) -> int:
        """The most nodes simulated on any one channel."""
        return max(len(set(reps)) for reps in self.rep_node)

    def is_rep(self, rank: int, channel: int) -> bool:
        node = rank // self.per_node
        return self._reps(channel)[node] == node

    def rep_rank(self, rank: int, channel: int) -> int:
        node, local = divmod(rank, self.per_node)
        return self._reps(channel)[node] * self.per_node + local

    def members(self, rank: int, channel: int) -> tuple[int, ...]:
        node, local = divmod(rank, self.per_node)
        return tuple(n * self.per_node + local for n, rep in enumerate(self._reps(channel)) if rep == node)

    def channels_run_by(self, rank: int, programs: tuple) -> tuple:
        """Of `rank`'s channel programs, those it runs as its channel's representative."""
        return tuple(p for p in programs if self.is_rep(rank, p.channel))

    def rep_ranks(self, nranks: int) -> list[int]:
        """The ranks that stand for others (or themselves) on at least one channel."""
        reps = {n for row in self.rep_node for n in row}
        return [r for r in range(nranks) if r // self.per_node in reps]

    def weight(self, node: int, channel: int) -> int:
        return sum(1 for rep in self._reps(channel) if rep == node)

    def peer_of(self, rank: int, channel: int, peer: int, member: int) -> int:
        """The peer that plays for `member` the role `peer` plays for `rank` on `channel`."""
        if peer < 0 or member == rank:
            return peer
        if self.shift:
            return (peer + member - rank) % (len(self.rep_node[0]) * self.per_node)
        if peer // self.per_node == rank // self.per_node:  # inside the node: the same local rank
            return (member // self.per_node) * self.per_node + peer % self.per_node
        return self.order[(member, channel)][self.order[(rank, channel)].index(peer)]


def _role_kind(role: str) -> str:
    """A role without its index: a node's children are alike to it whatever their order."""
    return role.rstrip("0123456789")


def _relations(job, roles: _Roles, per_node: int, channels, route_cables) -> tuple[list, dict]:
    """Every inter-node relation on `channels`: (node, channel, local, role kind, peer rank, cable
    ids), and the initial colour of every cable they cross."""
    relations = []
    link_colour: dict[int, int] = {}
    for node in range(job.nodes):
        for channel in channels:
            for local in range(per_node):
                rank = node * per_node + local
                for role, peer in sorted(roles.of(rank, channel).items()):
                    if peer // per_node == node:
                        continue
                    cables, colours = route_cables(channel, rank, peer)
                    for link, colour in zip(cables, colours):
                        link_colour.setdefault(link, colour)
                    relations.append((node, channel, local, _role_kind(role), peer, cables))
    return relations, link_colour


def _refine(relations: list, colour: list[int], link_colour: dict[int, int], per_node: int,
            limit: int | None = None) -> tuple[list[int], dict[int, int]] | None:
    """Colour refinement of nodes and cables over `relations` until no class splits further. Each
    round works on arrays: a relation's key is (channel, local rank, role, peer's local rank, peer's
    colour, its cables' colours); a node's new colour is its old one with the multiset of its
    relations' keys, a cable's its old one with the multiset of (node's colour, channel, local rank,
    role, place on the route) of the relations crossing it. Colours are dense class numbers. None as
    soon as the nodes fall into more than `limit` classes."""
    links = list(link_colour)
    if not relations:
        return colour, link_colour
    place = {link: i for i, link in enumerate(links)}
    width = max(len(rel[5]) for rel in relations)
    route = np.full((len(relations), max(width, 1)), -1, dtype=np.int64)
    for r, rel in enumerate(relations):
        route[r, :len(rel[5])] = [place[x] for x in rel[5]]
    fixed = np.array(_dense([(ch, local, role, peer % per_node) for _, ch, local, role, peer, _ in relations]))
    role = np.array(_dense([(ch, local, role) for _, ch, local, role, _, _ in relations]))
    owner = np.array([rel[0] for rel in relations], dtype=np.int64)
    peer = np.array([rel[4] // per_node for rel in relations], dtype=np.int64)
    rel_of, pos = np.nonzero(route >= 0)  # every (relation, cable) crossing
    crossed = route[rel_of, pos]
    node_colour = np.array(_dense(colour), dtype=np.int64)
    cable_colour = np.array(_dense([link_colour[x] for x in links]), dtype=np.int64)
    count = (_n_classes(node_colour), _n_classes(cable_colour))
    while True:
        seen = np.where(route >= 0, cable_colour[np.maximum(route, 0)], -1)
        keys = _row_ids(np.column_stack([fixed, node_colour[peer], seen]))
        crossing = _row_ids(np.column_stack([node_colour[owner[rel_of]], role[rel_of], pos]))
        node_colour = _row_ids(np.column_stack([node_colour, _multiset_ids(owner, keys, node_colour.size)]))
        cable_colour = _row_ids(np.column_stack([cable_colour, _multiset_ids(crossed, crossing, len(links))]))
        new_count = (_n_classes(node_colour), _n_classes(cable_colour))
        if limit is not None and new_count[0] > limit:
            return None
        if new_count == count:
            return node_colour.tolist(), dict(zip(links, cable_colour.tolist()))
        count = new_count


def _dense(values: list) -> list[int]:
    """Each value's class as a number 0.. (in order of first appearance)."""
    ids: dict = {}
    return [ids.setdefault(v, len(ids)) for v in values]


def _n_classes(colours: np.ndarray) -> int:
    return int(np.unique(colours).size)


def _row_ids(rows: np.ndarray) -> np.ndarray:
    """Equal rows, equal numbers: each row's class as a number 0.. in the rows' lexicographic order
    (rows of integers >= -1). The columns are folded into one number as long as it fits in int64,
    and renumbered densely (a sort) only when the next column would not fit: a row of route cables
    is dozens of small numbers."""
    ids = np.zeros(rows.shape[0], dtype=np.int64)
    bound = 1  # every id is below it
    for column in rows.T:
        shifted = column.astype(np.int64) + 1
        radix = int(shifted.max(initial=0)) + 1
        if bound * radix > _FOLD_LIMIT:
            ids, bound = _dense_ids(ids)
        ids = ids * radix + shifted
        bound *= radix
    return _dense_ids(ids)[0]


_FOLD_LIMIT = 1 << 62


def _dense_ids(ids: np.ndarray) -> tuple[np.ndarray, int]:
    values, dense = np.unique(ids, return_inverse=True)
    return dense.reshape(-1), max(1, values.size)


def _multiset_ids(group: np.ndarray, key: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group 0..n_groups-1, the multiset of the keys given with it, as a class number (groups with
    equal multisets, equal numbers; a group with none has the empty one)."""
    order = np.lexsort((key, group))
    group, key = group[order], key[order]
    ends = np.searchsorted(group, np.arange(n_groups + 1))
    return np.array(_dense([key[a:b].tobytes() for a, b in zip(ends[:-1].tolist(), ends[1:].tolist())]),
                    dtype=np.int64)


def _order(relations: list, colour: list[int], link_colour: dict[int, int], per_node: int, order: dict) -> None:
    """Each rank's inter-node peers per channel, sorted by what a class-mate's matching peer shares
    with it (role, the peer's class and local rank, the cables' classes)."""
    keyed: dict[tuple, list] = {}
    for node, channel, local, role, peer, cables in relations:
        key = (role, colour[peer // per_node], peer % per_node, tuple(link_colour[x] for x in cables))
        keyed.setdefault((node * per_node + local, channel), []).append((key, peer))
    for where, peers in keyed.items():
        order[where] = tuple(peer for _, peer in sorted(peers))


def node_classes(job, algorithm: str, n_channels: int, route_cables, fault_nodes: dict[int, tuple],
                 late: dict[int, float], exact_nodes: int | None = None) -> Collapse:
    """The coarsest split of the nodes into classes that behave alike (module docstring), over all
    channels at once — or, where that leaves more than `exact_nodes` classes and splitting each
    channel on its own leaves fewer, one split per channel.

    `route_cables(channel, src, dst)` gives the cable link ids (and their initial colours) of the
    route between two ranks on different nodes; `fault_nodes` marks nodes whose own links carry a
    fault; `late` maps ranks to their straggler delay."""
    per_node = len(job.paths.node_system.gpus())
    nodes = job.nodes
    roles = _Roles(job, algorithm, n_channels)
    if algorithm not in COLLAPSIBLE or nodes < 2:
        return Collapse(per_node, (tuple(range(nodes)),), {})
    start = [hash((fault_nodes.get(n, ()), tuple(late.get(n * per_node + l, 0.0) for l in range(per_node))))
             for n in range(nodes)]
    relations, link_colour = _relations(job, roles, per_node, range(n_channels), route_cables)
    # Refinement only ever splits classes, so the joint one stops once it passes `exact_nodes`; it
    # is finished only where splitting each channel on its own does not leave fewer classes.
    joint = _split([relations], start, link_colour, per_node, exact=True, limit=exact_nodes)
    if joint is not None:
        return joint
    apart = _split([[rel for rel in relations if rel[1] == c] for c in range(n_channels)], start, link_colour,
                   per_node, exact=False)
    if apart.n_classes <= exact_nodes:  # fewer than the joint split's, which passed the limit
        return apart
    joint = _split([relations], start, link_colour, per_node, exact=True, limit=apart.n_classes)
    return apart if joint is None or apart.n_classes < joint.n_classes else joint


def _split(parts: list[list], start: list[int], link_colour: dict[int, int], per_node: int,
           exact: bool, limit: int | None = None) -> Collapse | None:
    """One refinement per part of the relations (all of them, or one channel's each); a part that
    repeats an earlier one but for its channel (the same tree over the same NICs) reuses its classes.
    None once a part's nodes fall into more than `limit` classes."""
    order: dict = {}
    rows = []
    refined: dict[tuple, tuple] = {}
    for part in parts:
        same = tuple((node, local, role, peer, cables) for node, _, local, role, peer, cables in part)
        if same not in refined:
            colours = {link: link_colour[link] for rel in part for link in rel[5]}
            refined[same] = _refine(part, start, colours, per_node, limit)
        if refined[same] is None:
            return None
        colour, colours = refined[same]
        _order(part, colour, colours, per_node, order)
        first: dict[int, int] = {}
        rows.append(tuple(first.setdefault(c, n) for n, c in enumerate(colour)))
    return Collapse(per_node, tuple(rows), order, exact=exact, kinds=_channel_kinds(rows, order))


def _channel_kinds(rows: list[tuple], order: dict) -> tuple[int, ...]:
    """Each channel's kind (Collapse.kinds): its representatives' row and its ranks' peer orders."""
    channels = 1 + max((channel for _, channel in order), default=len(rows) - 1)
    peers: list[list] = [[] for _ in range(channels)]
    for (rank, channel), peer_order in sorted(order.items()):
        peers[channel].append((rank, peer_order))
    first: dict[tuple, int] = {}
    return tuple(first.setdefault((rows[c % len(rows)], tuple(peers[c])), c) for c in range(channels))
