"""How concurrent transfers share links: max-min fairness, the fluid model the DES engine runs on.

`max_min_rates(routes, capacity_gbps)` gives each transfer (a route: the link ids it crosses, a link
listed twice carrying it twice) the max-min fair rate: every transfer's rate grows at the same pace
until some link is full; the transfers crossing a full link keep the rate they reached, the others
go on growing (progressive filling). The result never exceeds a link's capacity, and every
transfer crosses a full link on which no other transfer runs faster — the bottleneck is where it
really is. A transfer on no link (a copy inside one GPU) is not limited: its rate is infinite.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from ._jit import njit

__all__ = ["max_min_rates", "fair_rates_flat", "Workspace"]

_FULL = 1e-9  # relative slack under which a link counts as full


def max_min_rates(routes: Sequence[Sequence[int]], capacity_gbps: Sequence[float]) -> list[float]:
    """The max-min fair rate (GB/s) of each route (link ids, a link listed twice crossed twice)
    over links of the given capacities."""
    uses = [Counter(route) for route in routes]
    sizes = np.array([len(use) for use in uses], dtype=np.int64)
    link = np.array([k for use in uses for k in use], dtype=np.int64)
    times = np.array([t for use in uses for t in use.values()], dtype=float)
    return fair_rates_flat(link, times, sizes, np.asarray(capacity_gbps, dtype=float))[0].tolist()


class Workspace:
    """Arrays fair_rates_flat works in, kept between calls and grown as needed: a network that
    divides its links thousands of times would otherwise allocate (and fault in) fresh pages of
    the size of every (transfer, link) pair at each division."""

    def __init__(self):
        self.pairs = np.empty((3, 0), dtype=np.int64)     # link numbers, their ids, transfers per link
        self.links = np.empty((5, 0), dtype=np.int64)     # CSR offsets, counts, fill, links in use, full
        self.link_f = np.empty((3, 0), dtype=np.float64)  # capacity, capacity left, weight
        self.firsts = np.empty(0, dtype=np.int64)
        self.active = np.empty(0, dtype=np.bool_)

    def fit(self, n_transfers: int, n_pairs: int) -> None:
        n_pairs = max(n_pairs, 1)
        if self.pairs.shape[1] < n_pairs:
            size = max(n_pairs, 2 * self.pairs.shape[1])
            self.pairs = np.empty((3, size), dtype=np.int64)
            self.links = np.empty((5, size + 1), dtype=np.int64)
            self.link_f = np.empty((3, size), dtype=np.float64)
        if self.active.size < n_transfers:
            size = max(n_transfers, 2 * self.active.size)
            self.firsts = np.empty(size + 1, dtype=np.int64)
            self.active = np.empty(size, dtype=np.bool_)


def fair_rates_flat(link: np.ndarray, times: np.ndarray, sizes: np.ndarray, capacity_gbps: np.ndarray,
                    skip: np.ndarray | None = None, scratch: np.ndarray | None = None,
                    work: Workspace | None = None) -> tuple[np.ndarray, np.ndarray]:
    """max_min_rates over the (transfer, link) pairs already laid out flat, as the network keeps
    them: transfer i owns the next `sizes[i]` pairs, pair k crossing `link[k]` `times[k]` times.
    Transfers marked in `skip` are left out (rate 0, their links not counted). Returns the rates
    and the links that the transfers that move keep busy. `scratch`, one int64 per link holding
    -1, lets a caller that divides the same links many times keep the work in proportion to the
    pairs rather than to every link of the fabric (it is left as it was given); `work` keeps the
    arrays the division works in from one call to the next."""
    if skip is None:
        skip = np.zeros(len(sizes), dtype=np.bool_)
    if scratch is None:
        scratch = np.full(len(capacity_gbps), -1, dtype=np.int64)
    link = np.ascontiguousarray(link, dtype=np.int64)
    sizes = np.ascontiguousarray(sizes, dtype=np.int64)
    work = work or Workspace()
    work.fit(sizes.size, link.size)
    return _progressive_filling(link, np.ascontiguousarray(times, dtype=np.float64), sizes,
                                np.ascontiguousarray(capacity_gbps, dtype=np.float64),
                                np.ascontiguousarray(skip, dtype=np.bool_), scratch,
                                work.pairs, work.links, work.link_f, work.firsts, work.active)


@njit(cache=True)
def _progressive_filling(link_ids, times, sizes, capacity_all, skip, scratch, pairs, links, link_f, firsts,
                         actives):  # pragma: no cover - compiled
    # Each round raises every active transfer's rate by the largest step no link can refuse, then
    # freezes the transfers on the links it filled. Compiled: the network divides its links
    # thousands of times per call, over tens of thousands of (transfer, link) pairs, and each round
    # touches only the links still in use and the pairs of the transfers it freezes. The links the
    # pairs cross are numbered 0.. first (scratch maps a link to its number), so that nothing here
    # grows with the links no transfer crosses. Every array but the rates lives in the workspace.
    n = sizes.size
    rates = np.zeros(n)
    first = firsts[:n + 1]
    first[0] = 0
    for i in range(n):
        first[i + 1] = first[i] + sizes[i]
    ids = pairs[0]
    link = pairs[1]
    capacity = link_f[0]
    left = link_f[1]
    weight = link_f[2]
    active = actives[:n]
    on_link = links[0]  # active pairs per link, then CSR offsets
    on_link[0] = 0
    # One pass numbers the links as transfers first cross them, finds the transfers a dead link
    # stops, and weighs each link by the transfers that move (in their order, as a pass of its
    # own would: the sums are the same to the last bit).
    n_links = 0
    for i in range(n):
        active[i] = False
        if sizes[i] == 0:
            rates[i] = np.inf
            continue
        if skip[i]:
            continue  # its pairs are never read
        alive = True
        for k in range(first[i], first[i + 1]):
            x = link_ids[k]
            j = scratch[x]
            if j < 0:
                j = n_links
                scratch[x] = j
                ids[j] = x
                capacity[j] = capacity_all[x]
                left[j] = capacity[j]
                weight[j] = 0.0
                on_link[j + 1] = 0
                n_links += 1
            link[k] = j
            if capacity[j] <= 0.0:
                alive = False  # a dead link: the transfer never moves
        active[i] = alive
        if alive:
            for k in range(first[i], first[i + 1]):
                on_link[link[k] + 1] += 1
                weight[link[k]] += times[k]
    for j in range(n_links):
        scratch[ids[j]] = -1
    count = links[1, :n_links]
    for j in range(n_links):
        count[j] = on_link[j + 1]
    for j in range(n_links):
        on_link[j + 1] += on_link[j]
    crossing = pairs[2]  # per link, the transfers crossing it
    fill = links[2, :n_links]
    for j in range(n_links):
        fill[j] = on_link[j]
    for i in range(n):
        if active[i]:
            for k in range(first[i], first[i + 1]):
                crossing[fill[link[k]]] = i
                fill[link[k]] += 1
    used = links[3]
    m = 0
    step = np.inf  # the least share of a link in use: how far the next round raises the level
    for j in range(n_links):
        if count[j] > 0:
            used[m] = j
            m += 1
            share = left[j] / weight[j]
            if share < step:
                step = share
    busy = ids[used[:m]]
    full = links[4]
    level = 0.0
    while m > 0:
        level += step
        n_full = 0
        for j in range(m):
            x = used[j]
            left[x] -= step * weight[x]
            if left[x] <= _FULL * max(1.0, capacity[x]):
                full[n_full] = x
                n_full += 1
        for f in range(n_full):
            x = full[f]
            for p in range(on_link[x], on_link[x + 1]):
                i = crossing[p]
                if not active[i]:
                    continue
                active[i] = False
                rates[i] = level
                for k in range(first[i], first[i + 1]):
                    weight[link[k]] -= times[k]
                    count[link[k]] -= 1
        # The links still in use, and the next round's step with them (one pass, not two).
        kept = 0
        step = np.inf
        for j in range(m):
            x = used[j]
            if count[x] > 0:
                used[kept] = x
                kept += 1
                share = left[x] / weight[x]
                if share < step:
                    step = share
        m = kept
    return rates, busy
