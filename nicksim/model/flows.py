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
from collections.abc import Sequence

import numpy as np

__all__ = ["max_min_rates", "fair_rates_flat"]

_FULL = 1e-9  # relative slack under which a link counts as full


def max_min_rates(routes: Sequence[Sequence[int]], capacity_gbps: Sequence[float]) -> list[float]:
    """The max-min fair rate (GB/s) of each route (link ids, a link listed twice crossed twice)
    over links of the given capacities."""
    uses = [Counter(route) for route in routes]
    sizes = np.array([len(use) for use in uses], dtype=np.int64)
    owner = np.repeat(np.arange(len(uses)), sizes)
    link = np.array([k for use in uses for k in use], dtype=np.int64)
    times = np.array([t for use in uses for t in use.values()], dtype=float)
    return fair_rates_flat(link, times, owner, sizes, np.asarray(capacity_gbps, dtype=float)).tolist()


def fair_rates_flat(link: np.ndarray, times: np.ndarray, owner: np.ndarray, sizes: np.ndarray,
                    capacity_gbps: np.ndarray) -> np.ndarray:
    """max_min_rates over the (transfer, link) pairs already laid out flat, as the network keeps
    them: pair k is transfer `owner[k]` crossing `link[k]` `times[k]` times; `sizes[i]` is transfer
    i's number of pairs. Progressive filling, vectorised over every pair."""
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
