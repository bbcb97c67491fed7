"""Links that every transfer crosses alike, so that the max-min division needs only the tightest.

A chain of links that one connection alone uses (a GPU's PCIe path to its NIC, the NIC, its cable)
is crossed by the same transfers, as often, at every moment: in progressive filling the link of
least capacity in such a group fills first (or with the others), freezing the same transfers, so
the others never decide a rate. `LinkClasses` promises, for the shapes (a route's links with the
times each is crossed) added to it so far: links in one class are crossed by exactly the same
shapes, each the same number of times, and `rep(link)` is its class's link of least capacity
(the lowest id among equals). A shape's `reduced(links, times)` keeps only representatives, and
max-min rates over reduced shapes are those over whole ones. A new shape can split a class (it
crosses some of its links and not the others, or crosses them a different number of times);
`add` says so, and the reductions made before may then leave out a link that now decides a rate.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["LinkClasses"]


class LinkClasses:
    """The classes of the links crossed by the shapes added so far (module docstring)."""

    def __init__(self, capacity_gbps: Sequence[float]):
        self.capacity = capacity_gbps
        self._rep_of = np.arange(len(capacity_gbps), dtype=np.int64)  # link -> its representative
        self._class: dict[int, int] = {}      # link -> class id
        self._members: list[list[int]] = []   # class id -> its links
        self._rep: list[int] = []             # class id -> its representative

    def rep(self, link: int) -> int:
        return int(self._rep_of[link])

    def add(self, links: Sequence[int], times: Sequence[float]) -> list[tuple[int, list[int]]]:
        """Take in a shape (its distinct links, the times it crosses each). Returns, for every class
        it split, the representative the class had and every link that was in it (now in classes
        that each have a representative of their own)."""
        parts: dict[int | None, dict[float, list[int]]] = {}
        for link, t in zip(links, times):
            parts.setdefault(self._class.get(link), {}).setdefault(t, []).append(link)
        splits = []
        for c, by_times in parts.items():
            if c is None:  # links never crossed before: alike so far if crossed as often
                for group in by_times.values():
                    self._new_class(group)
                continue
            groups = list(by_times.values())
            if len(groups) == 1 and len(groups[0]) == len(self._members[c]):
                continue  # the whole class crossed alike
            before, was = self._rep[c], list(self._members[c])
            if sum(map(len, groups)) == len(self._members[c]):
                groups = groups[1:]  # every link crossed: the first group stays in the class
            moved = [link for group in groups for link in group]
            gone = set(moved)
            self._members[c] = [link for link in self._members[c] if link not in gone]
            self._lead(c, self._members[c])
            for group in groups:
                self._new_class(group)
            splits.append((before, was))
        return splits

    def reduced(self, links: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A shape's links and times without the links its representatives stand for."""
        keep = self._rep_of[links] == links
        return links[keep], times[keep]

    def members(self) -> dict[int, list[int]]:
        """Representative -> every link of its class (itself included)."""
        return {self._rep[c]: links for c, links in enumerate(self._members)}

    def _new_class(self, links: list[int]) -> None:
        c = len(self._members)
        self._members.append(list(links))
        self._rep.append(-1)
        self._lead(c, links)
        for link in links:
            self._class[link] = c

    def _lead(self, c: int, links: list[int]) -> None:
        """Class `c`'s representative: the link of least capacity, the lowest id among equals."""
        self._rep[c] = min(links, key=lambda x: (self.capacity[x], x))
        self._rep_of[links] = self._rep[c]
