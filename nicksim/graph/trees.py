"""NCCL's binary and double binary trees (trees.cc), over the nodes of a job.

`btree(nranks, rank)` is ncclGetBtree: a tree rooted at 0 alternating leaves and inner
nodes, built on the bits of the rank. `dtree(nranks, rank)` is ncclGetDtree: the first tree is
the btree; the second mirrors it (rank -> nranks-1-rank) when nranks is even and shifts it by one
when odd, so that each rank is a leaf in at least one of the two trees. Both are the same in every
modelled release (trees.cc unchanged in substance from 2.18 to 2.30). The result is frozen
TreeLinks; `format_dtree` prints the two trees rank by rank.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TreeLinks", "DoubleTree", "btree", "dtree", "format_dtree"]


@dataclass(frozen=True)
class TreeLinks:
    """One rank's place in a tree: parent (-1 at the root), up to two children (-1 when absent),
    and whether it is its parent's first (0) or second (1) child (-1 at the root)."""

    up: int
    down0: int
    down1: int
    child_type: int = -1

    @property
    def children(self) -> tuple[int, ...]:
        return tuple(c for c in (self.down0, self.down1) if c != -1)


@dataclass(frozen=True)
class DoubleTree:
    """One rank's place in both trees of the double binary tree."""

    tree0: TreeLinks
    tree1: TreeLinks


def btree(nranks: int, rank: int) -> TreeLinks:
    """ncclGetBtree: parent and children of `rank` in the binary tree over `nranks` ranks."""
    if nranks < 1 or not 0 <= rank < nranks:
        raise ValueError(f"rank {rank} is not in 0..{nranks - 1}")
    bit = 1
    while bit < nranks and not bit & rank:
        bit <<= 1
    if rank == 0:
        # The root's child is > 0, so it is child 1 (down1), not down0.
        return TreeLinks(-1, -1, bit >> 1 if nranks > 1 else -1, -1)
    up = (rank ^ bit) | (bit << 1)
    if up >= nranks:
        up = rank ^ bit
    child_type = 0 if rank < up else 1
    lowbit = bit >> 1
    down0 = -1 if lowbit == 0 else rank - lowbit
    down1 = -1 if lowbit == 0 else rank + lowbit
    while down1 >= nranks:  # trees.cc recomputes with the current lowbit, then halves it
        down1 = -1 if lowbit == 0 else rank + lowbit
        lowbit >>= 1
    return TreeLinks(up, down0, down1, child_type)


def _mapped(links: TreeLinks, fn) -> TreeLinks:
    return TreeLinks(*(x if x == -1 else fn(x) for x in (links.up, links.down0, links.down1)), links.child_type)


def dtree(nranks: int, rank: int) -> DoubleTree:
    """ncclGetDtree: `rank` in the btree and in its mirror (even nranks) or shift by one (odd)."""
    first = btree(nranks, rank)
    if nranks % 2 == 1:
        second = _mapped(btree(nranks, (rank - 1 + nranks) % nranks), lambda r: (r + 1) % nranks)
    else:
        second = _mapped(btree(nranks, nranks - 1 - rank), lambda r: nranks - 1 - r)
    return DoubleTree(first, second)


def format_dtree(nranks: int) -> list[str]:
    """Both trees of `nranks` ranks: the inner (non-leaf) ranks of each, then every rank's links."""
    trees = [dtree(nranks, r) for r in range(nranks)]
    inner0 = [r for r, t in enumerate(trees) if t.tree0.children]
    inner1 = [r for r, t in enumerate(trees) if t.tree1.children]
    lines = [f"p={nranks}: internal tree0={inner0} tree1={inner1}"]

    def side(name: str, links: TreeLinks) -> str:
        kids = list(links.children)
        return f"{name} parent {links.up} / {kids if kids else 'leaf'}"

    for r, t in enumerate(trees):
        lines.append(f"rank {r} | {side('tree0', t.tree0)} | {side('tree1', t.tree1)}")
    return lines
