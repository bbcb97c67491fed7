"""Links that carry exactly what a class-mate's link carries, left out of the division of the links.

Where nodes are collapsed (symmetry.py), a representative's transfer crosses the links of every
node it stands for. Two nodes that stand together on every channel (the same representative in
every row of the Collapse: twins) then have links that every transfer crosses alike: a twin's
NVLink port, PCIe link, NIC, NIC cable, CTA and network-connection links carry, at every moment,
the transfers its first twin's do, as often and at the same capacity. Max-min fairness gives the
same rates whether such a copy is a constraint or not, so `Mirrors.reduce(route, short)` keeps, of
each group of twins' copies in a route, the first twin's link only, and names the copies it left
out (their bytes and busy time are the first twin's: `FluidNetwork.mirror`). It checks what it
relies on in every route it reduces: each group complete (a copy for every twin) and crossed as
often, by as much of the bytes, at one capacity; where a route breaks that it raises `Asymmetric`,
and the engine runs the call again with every link divided. The per-channel split (nodes collapsed
on each channel's own relations) leaves many more twins than classes: on 1024 GPUs (NVLS Tree,
24 classes) a division's (transfer, link) pairs fall from 93,000 to 35,000 on average.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

__all__ = ["Mirrors", "Asymmetric"]


class Asymmetric(Exception):
    """A route whose twins' links are not crossed alike: leaving copies out would change the rates."""


class Mirrors:
    """The twins of a Collapse on a fabric, and the links each twin's copy stands for. `canon(x)`
    is the first twin's link for a copy, `x` itself for every other link."""

    def __init__(self, fabric, router, collapse, capacity):
        self.router, self.capacity = router, capacity
        self.per_node, self.per_fabric_node = collapse.per_node, fabric.per_node
        self.nodes = fabric.nodes
        first: dict[tuple, int] = {}
        self.twin = [first.setdefault(tuple(row[n] for row in collapse.rep_node), n) for n in range(self.nodes)]
        sizes = Counter(self.twin)
        self.group = [sizes[self.twin[n]] for n in range(self.nodes)]
        self.any = any(size > 1 for size in sizes.values())
        self._known: dict[int, tuple[int, int]] = {}  # link -> (its canon, the size of the canon's group)
        self._canon_of: np.ndarray | None = None
        self._nic_cables: dict[tuple, int] = {}  # (node, port, away from the NIC) -> cable id
        self._cable_owner: dict[int, tuple] = {}
        for (a, b), link in fabric.cables.items():
            for end, away in ((a, True), (b, False)):
                if end[0] == "nic":
                    self._nic_cables[(end[1], end[2], away)] = link
                    self._cable_owner[link] = (end[1], end[2], away)

    def _owner(self, link: int) -> int:
        """The node whose copy `link` is (-1: a link no node owns, a leaf-spine cable)."""
        if link < self.per_fabric_node * self.nodes:
            return link // self.per_fabric_node
        if link < self.router.cta_base:
            owner = self._cable_owner.get(link)
            return owner[0] if owner is not None else -1
        return self.router.rank_link(link)[0] // self.per_node

    def canon(self, link: int) -> int:
        node = self._owner(link)
        if node < 0 or self.twin[node] == node:
            return link
        twin = self.twin[node]
        if link < self.per_fabric_node * self.nodes:
            return link + (twin - node) * self.per_fabric_node
        if link < self.router.cta_base:
            _, port, away = self._cable_owner[link]
            return self._nic_cables.get((twin, port, away), link)
        return link + (twin - node) * self.per_node * self.router.rank_link(link)[1]

    def reduce(self, route, short: dict[int, float]) -> tuple[list[int], dict[int, float], dict[int, int]]:
        """`route` without the twins' copies, `short` likewise, and copy -> first twin's link for each
        copy left out; Asymmetric where a copy's group is not crossed alike."""
        uses = Counter(route)
        groups: dict[int, list[int]] = {}
        known = self._known
        for link in uses:
            got = known.get(link)
            if got is None:
                got = known[link] = (self.canon(link), self._group_of(self.canon(link)))
            groups.setdefault(got, []).append(link)
        copies: dict[int, int] = {}
        for (canon, group), links in groups.items():
            if len(links) == 1 and links[0] == canon and group == 1:
                continue
            if len(links) != group or canon not in uses:
                raise Asymmetric(f"link {canon}: {len(links)} of {group} twins' copies")
            for link in links:
                if (uses[link] != uses[canon] or self.capacity[link] != self.capacity[canon]
                        or abs(short.get(link, 0.0) - short.get(canon, 0.0)) > 1e-12):
                    raise Asymmetric(f"link {link} is not crossed as link {canon} is")
                if link != canon:
                    copies[link] = canon
        if not copies:
            return list(route), short, copies
        kept = [link for link in route if link not in copies]
        return kept, {x: d for x, d in short.items() if x not in copies}, copies

    def canon_of(self) -> np.ndarray:
        """`canon` of every link id, as one array (made once)."""
        if self._canon_of is None:
            self._canon_of = np.fromiter((self.canon(link) for link in range(self.router.n_links)), dtype=np.int64,
                                         count=self.router.n_links)
        return self._canon_of

    def _group_of(self, canon: int) -> int:
        node = self._owner(canon)
        return 1 if node < 0 else self.group[node]
