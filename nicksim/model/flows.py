"""How concurrent transfers share links: max-min fairness, the fluid model the DES engine runs on.

`max_min_rates(routes, capacity_gbps)` gives each transfer (a route: the link ids it crosses, a link
listed twice carrying it twice) the max-min fair rate: every transfer's rate grows at the same pace
until some link is full; the transfers crossing a full link keep the rate they reached, the others
go on growing (progressive filling). The result never exceeds a link's capacity, and every
transfer crosses a full link on which no other transfer runs faster — the bottleneck is where it
really is. A transfer on no link (a copy inside one GPU) is not limited: its rate is infinite.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["max_min_rates", "rates_for_uses", "fair_rates", "fair_rates_flat"]

_FULL = 1e-9  # relative slack under which a link counts as full


def max_min_rates(routes: Sequence[Sequence[int]], capacity_gbps: Mapping[int, float] | Sequence[float]
                  ) -> list[float]:
    """The max-min fair rate (GB/s) of each route over links of the given capacities."""
    return rates_for_uses([Counter(route) for route in routes], capacity_gbps)


def rates_for_uses(uses: Sequence[Mapping[int, int]], capacity_gbps: Mapping[int, float] | Sequence[float]
                   ) -> list[float]:
    """max_min_rates for routes already counted: {link: times the route crosses it} each."""
    rates = [0.0 if use else math.inf for use in uses]
    active = {f for f, use in enumerate(uses) if use}
    left = {link: float(capacity_gbps[link]) for use in uses for link in use}
    for f in list(active):
        if any(left[link] <= 0 for link in uses[f]):
            active.discard(f)  # a dead link: this transfer does not move
    while active:
        weight: Counter = Counter()
        for f in active:
            weight.update(uses[f])
        step = min(left[link] / w for link, w in weight.items())
        for f in active:
            rates[f] += step
        full = set()
        for link, w in weight.items():
            left[link] -= step * w
            if left[link] <= _FULL * max(1.0, float(capacity_gbps[link])):
                full.add(link)
        active = {f for f in active if not full.intersection(uses[f])}
    return rates


def fair_rates(links: Sequence[np.ndarray], counts: Sequence[np.ndarray], capacity_gbps: np.ndarray) -> np.ndarray:
    """rates_for_uses over numpy arrays: transfer i crosses `links[i]` (distinct link ids) `counts[i]`
    times each; the same progressive filling, vectorised over every (transfer, link) pair."""
    n = len(links)
    if n == 0:
        return np.zeros(0)
    sizes = np.array([x.size for x in links], dtype=np.int64)
    owner = np.repeat(np.arange(n), sizes)
    return fair_rates_flat(np.concatenate(links), np.concatenate(counts), owner, sizes, capacity_gbps)


def fair_rates_flat(link: np.ndarray, times: np.ndarray, owner: np.ndarray, sizes: np.ndarray,
                    capacity_gbps: np.ndarray) -> np.ndarray:
    """fair_rates over the (transfer, link) pairs already laid out flat: pair k is transfer
    `owner[k]` crossing `link[k]` `times[k]` times; `sizes[i]` is transfer i's number of pairs."""
    n = len(sizes)
    rates = np.zeros(n)
    times = times.astype(float, copy=False)
    rates[sizes == 0] = math.inf
    left = capacity_gbps.astype(float).copy()
    slack = _FULL * np.maximum(1.0, capacity_gbps)
    dead = left <= 0
    active = sizes > 0
    if dead.any():
        stuck = np.bincount(owner, weights=dead[link].astype(float), minlength=n) > 0
        active &= ~stuck
    while active.any():
        on = active[owner]
        weight = np.bincount(link[on], weights=times[on], minlength=len(left))
        used = weight > 0
        step = np.min(left[used] / weight[used])
        rates[active] += step
        left[used] -= step * weight[used]
        full = used & (left <= slack)
        touched = np.bincount(owner[on], weights=full[link[on]].astype(float), minlength=n) > 0
        active &= ~touched
    return rates
