"""Transfers over shared links in simulated time (SimPy), at max-min fair rates.

`FluidNetwork(env, capacity_gbps, latency_us)` promises: `transfer(route, nbytes, lat_us)` returns an
event that fires when the last byte has arrived: the bytes leave at the rate max-min fairness gives
the transfer among all transfers moving at that moment (flows.py) and arrive the route's latency
(plus `lat_us`) later. `transfer2` returns three events: the first `head_nbytes` arrived (what a
pipelined receiver can start on), all arrived, and all sent (when the sender is free again). Whenever transfers start or end, or `set_capacity` changes a link, the links are
re-divided once all that happens at the same simulated instant is known (so a thousand transfers
starting together cost one division, not a thousand). Simulated time is in microseconds; 1 GB/s
moves 1,000 bytes per microsecond. A transfer over a link of no capacity never ends (the engine
reports what is left waiting as a hang). `bytes_on` and `busy_us` account, per link, what crossed it
and for how long it carried anything.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import simpy

import numpy as np

from .flows import fair_rates

__all__ = ["FluidNetwork"]

_BYTES_PER_US = 1e3  # per GB/s
_DONE = 1e-6         # bytes under which a transfer counts as arrived (float residue)
_LATE = 2            # SimPy priority after NORMAL: runs once everything else at this instant has
_EPS_US = 1e-9       # transfers this close to arriving arrive together


class _Transfer:
    __slots__ = ("route", "use", "links", "counts", "left", "rate", "done", "head", "head_left", "sent", "lat", "tag")

    def __init__(self, shape: tuple, nbytes: float, done: simpy.Event, sent: simpy.Event, lat: float,
                 head: simpy.Event | None = None, head_nbytes: float = 0.0):
        self.route, self.use, self.links, self.counts = shape
        self.left, self.rate, self.done = float(nbytes), 0.0, done
        self.sent, self.lat = sent, lat
        self.tag = None
        self.head = head
        self.head_left = float(nbytes) - head_nbytes  # `left` at which the head has arrived


class FluidNetwork:
    """Links of fixed capacity (GB/s) and latency (us) shared fairly by the transfers on them."""

    def __init__(self, env: simpy.Environment, capacity_gbps: Sequence[float],
                 latency_us: Sequence[float] | None = None, record: bool = False):
        self.env = env
        self.capacity = np.array(capacity_gbps, dtype=float)
        self.latency = list(latency_us) if latency_us is not None else [0.0] * len(self.capacity)
        self.moving: list[_Transfer] = []
        self.bytes_on = [0.0] * len(self.capacity)
        self.busy_us = np.zeros(len(self.capacity))
        self._busy = np.zeros(0, dtype=np.int64)  # links carrying something since the last division
        self._since = 0.0
        self._wake = 0          # generation of the pending wake-up; older ones are stale
        self._pending = False   # a re-division is scheduled for this instant
        # With `record`, (time, link, GB/s) whenever a link's carried rate changes.
        self.series: list[tuple[float, int, float]] | None = [] if record else None
        self._load = np.zeros(len(self.capacity))
        self._shapes: dict[tuple, tuple] = {}  # (route, weight) -> (route, use, links, counts, latency)
        self.n_transfers = 0

    def transfer(self, route: Sequence[int], nbytes: float, lat_us: float = 0.0) -> simpy.Event:
        """An event fired when `nbytes` sent along `route` (link ids) have all arrived."""
        return self.transfer2(route, nbytes, lat_us, nbytes)[1]

    def transfer2(self, route: Sequence[int], nbytes: float, lat_us: float, head_nbytes: float, tag=None,
                  weight: int = 1, route_lat_us: float | None = None) -> tuple[simpy.Event, simpy.Event, simpy.Event]:
        """(head, done, sent): fired when the first `head_nbytes` and when all `nbytes` have arrived,
        and when the last byte has left. `tag` names the transfer in `stalled()`; a `weight` of k
        stands for k identical transfers moving together (each link carries k times its rate);
        `route_lat_us` replaces the route's summed link latency (a route that is several parallel
        ones, each with that latency)."""
        self.n_transfers += 1
        done, sent = self.env.event(), self.env.event()
        head = done if head_nbytes >= nbytes else self.env.event()
        shape = self._shape(tuple(route), weight)
        path_lat = shape[4] if route_lat_us is None else route_lat_us
        item = _Transfer(shape[:4], nbytes, done, sent, lat_us + path_lat, None if head is done else head,
                         head_nbytes)
        item.tag = tag
        self._start(item)
        return head, done, sent

    def _shape(self, route: tuple[int, ...], weight: int) -> tuple:
        """A route's links counted (times crossed x weight) and its latency, computed once per route."""
        key = (route, weight)
        shape = self._shapes.get(key)
        if shape is None:
            use = Counter(route)
            links = np.fromiter(use.keys(), dtype=np.int64, count=len(use))
            counts = np.fromiter(use.values(), dtype=np.float64, count=len(use)) * weight
            shape = self._shapes[key] = (route, use, links, counts, sum(self.latency[link] for link in route))
        return shape

    def set_capacity(self, link: int, bw_gbps: float) -> None:
        """Change a link's capacity from now on (a fault, a degraded port)."""
        self._advance()
        self.capacity[link] = bw_gbps
        self._later()

    def stalled(self) -> list[tuple[object, int]]:
        """(tag, dead link) of every transfer left on a link of no capacity."""
        return [(item.tag, next(link for link in item.use if self.capacity[link] <= 0))
                for item in self.moving if any(self.capacity[link] <= 0 for link in item.use)]

    def _start(self, item: _Transfer) -> None:
        if item.left <= _DONE or not item.route:
            self._fire_head(item)
            self._finish(item)
            return
        # Rates change only when the links are re-divided, which advances everyone first; a new
        # transfer waits for that division at rate 0.
        for link, times in zip(item.links.tolist(), item.counts.tolist()):
            self.bytes_on[link] += item.left * times
        self.moving.append(item)
        self._later()

    def _later(self) -> None:
        if not self._pending:
            self._pending = True
            # A triggered event queued behind every NORMAL event of this instant (SimPy orders
            # its queue by time, then priority); succeed() would only offer NORMAL.
            event = simpy.Event(self.env)
            event.callbacks.append(self._replan)
            event._ok, event._value = True, None
            self.env.schedule(event, _LATE)

    def _advance(self) -> None:
        """Move every transfer forward by what its rate carried since the last change."""
        elapsed = self.env.now - self._since
        if elapsed > 0:
            for item in self.moving:
                item.left -= item.rate * _BYTES_PER_US * elapsed
            self.busy_us[self._busy] += elapsed
        self._since = self.env.now

    def _replan(self, _event=None) -> None:
        """Re-divide the links and wake up when the first of the moving transfers arrives."""
        self._pending = False
        self._advance()
        rates = fair_rates([item.links for item in self.moving], [item.counts for item in self.moving], self.capacity)
        for item, rate in zip(self.moving, rates.tolist()):
            item.rate = rate
        moving = [item.links for item in self.moving if item.rate > 0]
        self._busy = np.unique(np.concatenate(moving)) if moving else np.zeros(0, dtype=np.int64)
        if self.series is not None:
            self._record()
        self._wake += 1
        times = [(item.left - (item.head_left if item.head is not None else 0.0)) / (item.rate * _BYTES_PER_US)
                 for item in self.moving if item.rate > 0]
        if times:
            wake = self._wake
            self.env.timeout(max(0.0, min(times))).callbacks.append(lambda _: self._arrive(wake))

    def _record(self) -> None:
        load = np.zeros(len(self.capacity))
        for item in self.moving:
            if 0 < item.rate < float("inf"):
                load[item.links] += item.counts * item.rate
        for link in np.nonzero(np.abs(load - self._load) > 1e-9)[0].tolist():
            self.series.append((self.env.now, link, float(load[link])))
        self._load = load

    def _arrive(self, wake: int) -> None:
        if wake != self._wake:
            return  # the links were re-divided since this wake-up was planned
        self._advance()
        for item in self.moving:
            if item.head is not None and item.left - item.head_left <= max(_DONE, item.rate * _BYTES_PER_US * _EPS_US):
                self._fire_head(item)
        arrived = [item for item in self.moving
                   if item.left <= max(_DONE, item.rate * _BYTES_PER_US * _EPS_US)]
        if arrived:
            gone = set(map(id, arrived))
            self.moving = [item for item in self.moving if id(item) not in gone]
            for item in arrived:
                self._fire_head(item)
                self._finish(item)
        self._later()

    def _after(self, delay: float, event: simpy.Event) -> None:
        if delay > 0:
            self.env.timeout(delay).callbacks.append(lambda _: event.succeed())
        else:
            event.succeed()

    def _fire_head(self, item: _Transfer) -> None:
        if item.head is not None:
            head, item.head = item.head, None
            self._after(item.lat, head)

    def _finish(self, item: _Transfer) -> None:
        item.sent.succeed()
        self._after(item.lat, item.done)
