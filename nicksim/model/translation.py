"""Point-to-point calls whose every node behaves as the node a whole block of nodes before it.

NCCL's point-to-point schedule (init.cc p2pSchedule) gives rank r the peers r + d and r - d in round
d's turn, so an alltoall or a ring of sendrecvs looks the same from every node: shifted by a whole
number of nodes, every rank's programs are another rank's with every peer shifted alike. Where the
fabric looks the same shifted too (leaves hold whole blocks of nodes: a shift by a leaf's nodes
maps each leaf to the next, each spine to itself), the first block of nodes can stand for every
block, as symmetry.py's classes do for rings and trees.

`Translation(fabric, router, nodes_shift)` promises `image(links, k)`: the links that the same
route, shifted by k blocks, crosses. It exists only where the shift maps every link of the fabric
onto a link of the same kind, capacity and latency, and every route between two NIC ports onto the
route between the shifted ports (else `NoTranslation`). Then the router's every route, shifted, is
the shifted ranks' route: a node copy's links and a rank's own links are numbered from the node and
the rank (routes.py), a GPU's way to its NIC depends on its local rank alone, and a route between
NIC ports climbs from the port's leaf to the spine D-mod-K gives the destination's position
(cluster.py fabric_route_hops): leaves map onto leaves, each spine onto itself, and each port onto
a port of the same spine, all checked here (`any_spine`: but for the last, where connections spread
evenly over every spine, ib.py, and routes through different spines are alike).
`programs_shift(programs, shift_ranks, nranks)` says whether every rank's programs are those of the
rank `shift_ranks` before it with every peer shifted alike; `transfers_shift` says it of the
transfers the programs are built from (`transfers_key`), without building them.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..graph.cluster import spine_position

__all__ = ["Translation", "NoTranslation", "programs_shift", "transfers_key", "transfers_shift", "node_shift"]


class NoTranslation(Exception):
    """The fabric, the programs or a route do not look the same shifted by the block of nodes."""


class Translation:
    """The shift by `nodes_shift` nodes as a permutation of the fabric's and the ranks' links."""

    def __init__(self, fabric, router, nodes_shift: int, any_spine: bool = False):
        nodes, per_fabric_node = fabric.nodes, fabric.per_node
        self.nodes_shift, self.per_node = nodes_shift, router.per_node
        n_links = router.n_links
        perm = np.arange(n_links, dtype=np.int64)
        node_links = per_fabric_node * nodes
        ids = np.arange(node_links, dtype=np.int64)
        perm[:node_links] = (ids + nodes_shift * per_fabric_node) % node_links
        ends = self._cables(fabric, perm, nodes, nodes_shift)
        self._trunks(fabric, perm, ends)
        self._check(fabric, perm)
        if not any_spine:
            self._spines_kept(fabric, nodes, nodes_shift)
        nranks = router.job.nranks
        shift_ranks = nodes_shift * self.per_node
        for link in range(router.cta_base, n_links):
            rank, stride = router.rank_link(link)
            perm[link] = link + ((rank + shift_ranks) % nranks - rank) * stride
        self.perm = perm
        self._powers = [np.arange(n_links, dtype=np.int64), perm]
        self._stacked: np.ndarray | None = None

    def image(self, links, k: int) -> np.ndarray:
        """`links` (ids) as the route shifted by `k` blocks crosses them."""
        return self._power(k)[np.asarray(links, dtype=np.int64)]

    def images(self, links, blocks: int) -> np.ndarray:
        """`links` shifted by 0, 1, ... `blocks` - 1 blocks, one after the other: the images of
        `image(links, k)` for every k in turn, in one array."""
        if self._stacked is None or len(self._stacked) != blocks:
            self._stacked = np.stack([self._power(k) for k in range(blocks)])
        return self._stacked[:, np.asarray(links, dtype=np.int64)].ravel()

    def _power(self, k: int) -> np.ndarray:
        """The shift by `k` blocks as a permutation of the links."""
        while len(self._powers) <= k:
            self._powers.append(self.perm[self._powers[-1]])
        return self._powers[k]

    @staticmethod
    def _cables(fabric, perm: np.ndarray, nodes: int, shift: int) -> dict[tuple, tuple]:
        """Each cable onto the one between the shifted ends: a NIC port onto the same port `shift`
        nodes on, a leaf onto the leaf its ports' images hang from, a spine onto itself."""
        leaf_of = {a: b for a, b in fabric.cables if a[0] == "nic"}  # NIC port -> the leaf it hangs from
        ends: dict[tuple, tuple] = {nic: ("nic", (nic[1] + shift) % nodes, *nic[2:]) for nic in leaf_of}
        for nic, leaf in leaf_of.items():
            target = leaf_of.get(ends[nic])
            if target is None or ends.setdefault(leaf, target) != target:
                raise NoTranslation(f"{leaf} has no single image under a shift of {shift} nodes")
        for (a, b), link in fabric.cables.items():
            image = fabric.cables.get((ends.get(a, a), ends.get(b, b)))
            if image is None:
                raise NoTranslation(f"cable {a}->{b} has no image under a shift of {shift} nodes")
            perm[link] = image
        return ends

    @staticmethod
    def _trunks(fabric, perm: np.ndarray, ends: dict[tuple, tuple]) -> None:
        """Each leaf's trunk onto the image leaf's (fabric.py Trunk; all alike where there are any)."""
        base = len(fabric.links)
        at = {(trunk.leaf, trunk.up): base + i for i, trunk in enumerate(fabric.trunks)}
        for (leaf, up), link in at.items():
            image = at.get((ends.get(leaf, leaf), up))
            if image is None:
                raise NoTranslation(f"the trunk of {leaf} has no image")
            perm[link] = image

    @staticmethod
    def _spines_kept(fabric, nodes: int, shift: int) -> None:
        """Every NIC port's shifted port comes down the same spine (D-mod-K), so that the route
        between shifted ports goes through the spine the unshifted one does."""
        cluster = fabric.cluster
        if cluster.spines < 2:
            return
        for a, _ in fabric.cables:
            if a[0] != "nic":
                continue
            node, port = a[1], a[2]
            here = spine_position(cluster, (node, port)) % cluster.spines
            if spine_position(cluster, ((node + shift) % nodes, port)) % cluster.spines != here:
                raise NoTranslation(f"NIC port {port} of node {node} comes down another spine {shift} nodes on")

    @staticmethod
    def _check(fabric, perm: np.ndarray) -> None:
        links = fabric.links
        n = len(links)
        if sorted(perm[:n].tolist()) != list(range(n)):
            raise NoTranslation("the shift does not map the fabric's links one to one")
        for link, image in enumerate(perm[:n].tolist()):
            a, b = links[link], links[image]
            if (a.kind, a.bw_gbps, a.lat_us) != (b.kind, b.bw_gbps, b.lat_us):
                raise NoTranslation(f"{a.name} and its image {b.name} differ")


def _apart(peers: tuple[int, ...], rank: int, nranks: int) -> tuple[int, ...]:
    """Each peer as how far on from `rank` it is (a switch, negative, as itself)."""
    return tuple((p - rank) % nranks if p >= 0 else p for p in peers)


def programs_shift(programs: dict[int, tuple], shift_ranks: int, nranks: int) -> bool:
    """Whether every rank's point-to-point programs are, channel by channel and primitive by
    primitive, those of the rank `shift_ranks` before it with every peer shifted alike. Offsets are
    left out: they place a rank's pieces in its own buffers (an alltoall's block r at r x its size),
    which a transfer's timing does not depend on. Peers are compared by how far on from their rank
    they are, which is the same test ((p + shift) mod n is p' exactly when p - r and p' - (r + shift)
    agree mod n) with one key per rank, compared as transfers_shift compares them."""
    def key(rank: int) -> list:
        return [(prog.channel, stream.protocol, prim.op, prim.nelem, prim.pat, prim.conn, prim.steps,
                 _apart(prim.recv_from, rank, nranks), _apart(prim.send_to, rank, nranks))
                for prog in programs.get(rank, ()) for stream in prog.streams for prim in stream.prims] + [
                (prog.channel, len(prog.streams), tuple(len(stream.prims) for stream in prog.streams))
                for prog in programs.get(rank, ())]
    return transfers_shift([key(r) for r in range(nranks)], shift_ranks)


def transfers_key(transfers: list, rank: int, nranks: int) -> tuple:
    """What programs_shift compares of `rank`'s programs, read from the transfers they are built from
    (plan/p2p.py p2p_transfers): programs are a function of a rank's transfers and, through the
    buffer offsets alone, of the ranks (p2p.py transfers_programs), so two ranks whose keys are
    equal have programs alike but for their peers, each as far on from its own rank."""
    return tuple((t.round, t.send, t.nbytes, t.protocol, t.chunk_nbytes, t.channels, (t.peer - rank) % nranks)
                 for t in transfers)


def transfers_shift(keys: Sequence, shift_ranks: int) -> bool:
    """programs_shift from every rank's transfers_key (or an id standing for it, equal ids for equal
    keys): only the ranks that run need their programs built."""
    nranks = len(keys)
    return all(keys[r] == keys[(r + shift_ranks) % nranks] for r in range(nranks))


def node_shift(fabric, router, looks_shifted: Callable[[int], bool], per_node: int, any_spine: bool = False
               ) -> Translation | None:
    """The shift by the fewest nodes (a divisor of the nodes, fewer than all) under which both the
    fabric and the call look the same (`looks_shifted(shift_ranks)`: programs_shift or
    transfers_shift of its programs), or None (`any_spine` as Translation's)."""
    nodes = fabric.nodes
    for shift in range(1, nodes):
        if nodes % shift:
            continue
        try:
            translation = Translation(fabric, router, shift, any_spine)
        except NoTranslation:
            continue
        if looks_shifted(shift * per_node):
            return translation
    return None
