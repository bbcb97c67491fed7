"""Transfers over shared links in simulated time (SimPy), at max-min fair rates.

`FluidNetwork(env, capacity_gbps, latency_us)` promises: `transfer(route, nbytes)` returns an event
that fires when the last byte has arrived — after the route's latency, the bytes move at the rate
max-min fairness gives the transfer among all transfers moving at that moment (flows.py), and every
start or end of a transfer re-divides the links. Simulated time is in microseconds; 1 GB/s moves
1,000 bytes per microsecond. A transfer over a link of no capacity never ends (the engine reports
what is left waiting as a hang).
"""
from __future__ import annotations

from collections.abc import Sequence

import simpy

from .flows import max_min_rates

__all__ = ["FluidNetwork"]

_BYTES_PER_US = 1e3  # per GB/s
_DONE = 1e-6         # bytes under which a transfer counts as arrived (float residue)


class _Transfer:
    __slots__ = ("route", "left", "rate", "done")

    def __init__(self, route: tuple[int, ...], nbytes: float, done: simpy.Event):
        self.route, self.left, self.rate, self.done = route, float(nbytes), 0.0, done


class FluidNetwork:
    """Links of fixed capacity (GB/s) and latency (us) shared fairly by the transfers on them."""

    def __init__(self, env: simpy.Environment, capacity_gbps: Sequence[float],
                 latency_us: Sequence[float] | None = None):
        self.env = env
        self.capacity = list(capacity_gbps)
        self.latency = list(latency_us) if latency_us is not None else [0.0] * len(self.capacity)
        self.moving: list[_Transfer] = []
        self._since = 0.0
        self._wake = 0  # generation of the pending wake-up; older ones are stale

    def transfer(self, route: Sequence[int], nbytes: float) -> simpy.Event:
        """An event fired when `nbytes` sent along `route` (link ids) have all arrived."""
        done = self.env.event()
        item = _Transfer(tuple(route), nbytes, done)
        delay = sum(self.latency[link] for link in item.route)
        if delay > 0:
            self.env.timeout(delay).callbacks.append(lambda _: self._start(item))
        else:
            self._start(item)
        return done

    def _start(self, item: _Transfer) -> None:
        self._advance()
        if item.left <= _DONE or not item.route:
            item.done.succeed()
        else:
            self.moving.append(item)
        self._replan()

    def _advance(self) -> None:
        """Move every transfer forward by what its rate carried since the last change."""
        elapsed = self.env.now - self._since
        if elapsed > 0:
            for item in self.moving:
                item.left -= item.rate * _BYTES_PER_US * elapsed
        self._since = self.env.now

    def _replan(self) -> None:
        """Re-divide the links and wake up when the first of the moving transfers arrives."""
        rates = max_min_rates([item.route for item in self.moving], self.capacity)
        for item, rate in zip(self.moving, rates):
            item.rate = rate
        self._wake += 1
        times = [item.left / (item.rate * _BYTES_PER_US) for item in self.moving if item.rate > 0]
        if times:
            wake = self._wake
            self.env.timeout(max(0.0, min(times))).callbacks.append(lambda _: self._arrive(wake))

    def _arrive(self, wake: int) -> None:
        if wake != self._wake:
            return  # the links were re-divided since this wake-up was planned
        self._advance()
        arrived = [item for item in self.moving if item.left <= _DONE * max(1.0, item.rate)]
        self.moving = [item for item in self.moving if item not in arrived]
        for item in arrived:
            item.done.succeed()
        self._replan()
