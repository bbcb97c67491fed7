"""Transfers over shared links in simulated time (SimPy), at max-min fair rates.

`FluidNetwork(env, capacity_gbps, latency_us)` promises: `transfer(route, nbytes, lat_us)` returns an
event that fires when the last byte has arrived: the bytes leave at the rate max-min fairness gives
the transfer among all transfers moving at that moment (flows.py) and arrive the route's latency
(plus `lat_us`) later. `transfer2` returns three events: the first `head_nbytes` arrived (what a
pipelined receiver can start on), all arrived, and all sent (when the sender is free again).
Whenever transfers start or end, or `set_capacity` changes a link, the links are re-divided once
all that happens at the same simulated instant is known (so a thousand transfers starting together
cost one division, not a thousand). With `hold` > 0 an arrived transfer keeps its share until a
transfer of its shape takes its place, for `hold` x its own duration at most, so that a stream of
slices with short gaps between them costs no division at each one. Simulated time is in
microseconds; 1 GB/s moves 1,000 bytes per microsecond. A transfer over a link of no capacity never
ends (the engine reports what is left waiting as a hang). `bytes_on` and `busy_us` account, per
link, what crossed it and for how long it carried anything. With `merge_links` the division sees,
of the links that every route so far crosses alike, only the tightest (linkclasses.py): the same
rates from fewer (transfer, link) pairs.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import repeat

import numpy as np
import simpy

from ._jit import njit
from .firing import Batches
from .flows import Workspace, fair_rates_flat
from .linkclasses import LinkClasses

__all__ = ["FluidNetwork"]

_BYTES_PER_US = 1e3  # per GB/s
_DONE = 1e-6         # bytes under which a transfer counts as arrived (float residue)
_FEW_COSTS = 4       # costed links of a route looked up one by one rather than over the whole route
_LATE = 2            # SimPy priority after NORMAL: runs once everything else at this instant has
_EPS_US = 1e-9       # transfers this close to arriving arrive together
# The clock is read as env._now, the attribute behind SimPy's `now` property: a large run reads it
# millions of times.


@njit(cache=True)
def _first_wait(rate, left, head):  # pragma: no cover - compiled
    # The time until the first moving transfer (or the first step it awaits) arrives; inf if none
    # moves. One pass where numpy would make five temporaries: this runs at every division.
    wait = np.inf
    for i in range(rate.size):
        if rate[i] > 0:
            target = head[i] if head[i] > 0.0 else 0.0
            w = (left[i] - target) / (rate[i] * _BYTES_PER_US)
            if w < wait:
                wait = w
    return wait


@njit(cache=True)
def _add_to(values, index, amount):  # pragma: no cover - compiled
    # values[index] += amount for an index that names no entry twice (the links busy since the
    # last division): numpy's would make three temporaries of the busy links' size, at every division.
    for i in range(index.size):
        values[index[i]] += amount


@njit(cache=True)
def _arrivals(rate, left, head):  # pragma: no cover - compiled
    # The transfers whose first step is in, then those wholly in (within float residue), in
    # row order; the first steps found are marked done (head -inf).
    heads = np.empty(rate.size, dtype=np.int64)
    gone = np.empty(rate.size, dtype=np.int64)
    n_heads = n_gone = 0
    for i in range(rate.size):
        slack = rate[i] * (_BYTES_PER_US * _EPS_US)
        if slack < _DONE:
            slack = _DONE
        if left[i] - head[i] <= slack:
            heads[n_heads] = i
            n_heads += 1
            head[i] = -np.inf
        if left[i] <= slack:
            gone[n_gone] = i
            n_gone += 1
    return heads[:n_heads], gone[:n_gone]


class _Transfer:
    __slots__ = ("route", "links", "counts", "shape", "left", "rate", "done", "head", "head_left",
                 "sent", "lat", "tag", "began")

    def __init__(self, shape: tuple, nbytes: float, done: simpy.Event, sent: simpy.Event, lat: float,
                 head: simpy.Event | None = None, head_nbytes: float = 0.0):
        self.route, self.links, self.counts, self.shape = shape
        self.left, self.rate, self.done = float(nbytes), 0.0, done
        self.sent, self.lat = sent, lat
        self.tag = None
        self.began = 0.0
        self.head = head
        # `left` at which the first `head_nbytes` are in (-inf: all of it). The network wakes up there
        # whether or not anyone waits for the head, so that it divides and advances the rates at the
        # same instants either way, and the float residue stays bit for bit.
        self.head_left = float(nbytes) - head_nbytes if head_nbytes < nbytes else -np.inf


class _Column:
    """A growable array: `values` views its first `n` entries; appending costs what is appended."""

    __slots__ = ("buf", "n")

    def __init__(self, dtype):
        self.buf = np.zeros(16, dtype=dtype)
        self.n = 0

    @property
    def values(self) -> np.ndarray:
        return self.buf[:self.n]

    def extend(self, more) -> None:
        more = np.asarray(more, dtype=self.buf.dtype)
        end = self.n + more.size
        if end > self.buf.size:
            grown = np.zeros(max(end, 2 * self.buf.size), dtype=self.buf.dtype)
            grown[:self.n] = self.buf[:self.n]
            self.buf = grown
        self.buf[self.n:end] = more
        self.n = end

    def keep(self, mask: np.ndarray) -> None:
        kept = self.values[mask]
        self.buf[:kept.size] = kept
        self.n = kept.size


class FluidNetwork:
    """Links of fixed capacity (GB/s) and latency (us) shared fairly by the transfers on them."""

    def __init__(self, env: simpy.Environment, capacity_gbps: Sequence[float],
                 latency_us: Sequence[float] | None = None, record: bool = False, hold: float = 0.0,
                 merge_links: bool = True):
        self.env = env
        self.hold = hold
        self.capacity = np.array(capacity_gbps, dtype=float)
        self.latency = list(latency_us) if latency_us is not None else [0.0] * len(self.capacity)
        # The transfers of the current division, aligned with the arrays below (views of growable
        # columns). One that arrives leaves a hole (None, marked in `_gone_at`), closed once holes
        # are a quarter of the rows, so that neither an arrival nor a start costs work in
        # proportion to all the (transfer, link) pairs.
        self.moving: list[_Transfer | None] = []
        self._new: list[_Transfer] = []       # started since, waiting for the next division
        self._columns = {name: _Column(dtype) for name, dtype in (
            ("_left", float),       # bytes each moving transfer has left (a hole: inf)
            ("_head", float),       # `left` at which its first step is in (-inf: none awaited)
            ("_rate", float),       # GB/s
            ("_sizes", np.int64),   # links each crosses; then its (link, times) pairs
            ("_gone_at", bool),     # holes
            ("_pair_link", np.int64),
            ("_pair_times", float))}
        self._views()
        self._holes = 0
        self._shape_nbytes: list[float] = []  # bytes started per shape (its id): see bytes_on
        self._busy_us = np.zeros(len(self.capacity))
        # The pair columns name links by dense numbers, given as shapes first cross them: the
        # division looks every pair's link up (flows.py), and a table the size of the links that
        # transfers cross stays in cache where one the size of the fabric would not.
        self._dense_of = np.full(len(self.capacity), -1, dtype=np.int64)  # link -> its dense number
        self._dense = _Column(np.int64)          # dense number -> link
        self._dense_capacity = _Column(float)    # dense number -> the link's capacity
        self._scratch = np.full(0, -1, dtype=np.int64)  # flows.py's link numbering, one per dense number
        self._work = Workspace()  # and the arrays it divides in
        self._busy = np.zeros(0, dtype=np.int64)  # links carrying something since `_busy_since`
        self._busy_since = 0.0
        self._since = 0.0
        self._wake = 0          # generation of the pending wake-up; older ones are stale
        self._pending = False   # a re-division is scheduled for this instant
        # With `record`, (time, link, GB/s) whenever a link's carried rate changes.
        self.series: list[tuple[float, int, float]] | None = [] if record else None
        self._load = np.zeros(len(self.capacity))
        self._shapes: dict[tuple, tuple] = {}  # (route, weight, costs) -> (route, links, counts, id)
        # Since the last division: the shapes of the transfers that arrived (id -> count) and the
        # rate each had, and whether a capacity changed. Max-min rates depend only on the multiset
        # of shapes moving and the capacities, so when the transfers started since are exactly
        # those shapes again (a connection's next slice taking its predecessor's place), or nothing
        # changed at all (only a first step arrived), the division would give the same rates.
        self._gone: Counter = Counter()
        self._gone_rate: dict[int, float] = {}
        self._dirty = False
        # With `hold` > 0, a transfer that arrives keeps its share of the links until a transfer of
        # its shape takes its place, or for `hold` x its own duration at most: a connection whose
        # next slice starts a moment later (after a post) costs no division.
        self._held_until = float("inf")
        self._hold_wake = 0
        self.n_divisions = 0
        self.n_pairs = 0  # (transfer, link) pairs the divisions have seen, all together
        self.n_transfers = 0
        self._route_lats: dict[tuple[int, ...], float] = {}
        self._mirror_of = np.full(len(self.capacity), -1, dtype=np.int64)  # a link no route lists -> the link
        # whose load it has (-1: none)
        # Links crossed alike by every shape so far: the pair columns list only each class's tightest
        # link (`_reduced`, per shape id). A new shape that splits a class makes the columns stale.
        self._classes = LinkClasses(self.capacity) if merge_links else None
        self._reduced: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._crossing: dict[int, list[int]] = {}  # link -> the shapes crossing it (their ids)
        self._stale = False

    @property
    def bytes_on(self) -> list[float]:
        """The bytes each link has carried or been given to carry (a link crossed twice, twice)."""
        total = np.zeros(len(self.capacity))
        for shape in self._shapes.values():
            nbytes = self._shape_nbytes[shape[3]]
            if nbytes:
                total[shape[1]] += shape[2] * nbytes  # a shape's links are distinct
        self._copy_mirrors(total)
        return total.tolist()

    @property
    def busy_us(self) -> np.ndarray:
        """How long each link has carried something, up to now (us)."""
        busy = self._busy_us.copy()
        busy[self._busy] += self.env._now - self._busy_since
        if self._classes is not None:  # a class's links carry something exactly when its tightest does
            for rep, links in self._classes.members().items():
                busy[links] = busy[rep]
        self._copy_mirrors(busy)
        return busy

    def mirror(self, copies: dict[int, int]) -> None:
        """Links that no route lists, each carrying at every moment what the link it maps to carries
        (a collapsed node's twin's copy, mirrors.py): its bytes and busy time are that link's."""
        if copies:
            self.mirror_arrays(np.fromiter(copies.keys(), dtype=np.int64, count=len(copies)),
                               np.fromiter(copies.values(), dtype=np.int64, count=len(copies)))

    def mirror_arrays(self, copies: np.ndarray, of: np.ndarray) -> None:
        """`mirror` for links `copies`, each carrying what the link at the same place in `of` does."""
        self._mirror_of[copies] = of

    def _copy_mirrors(self, per_link: np.ndarray) -> None:
        copies = np.flatnonzero(self._mirror_of >= 0)
        if copies.size:
            per_link[copies] = per_link[self._mirror_of[copies]]

    def transfer(self, route: Sequence[int], nbytes: float, lat_us: float = 0.0) -> simpy.Event:
        """An event fired when `nbytes` sent along `route` (link ids) have all arrived."""
        return self.transfer2(route, nbytes, lat_us, nbytes)[1]

    def transfer2(self, route: Sequence[int], nbytes: float, lat_us: float, head_nbytes: float, tag=None,
                  weight: int = 1, route_lat_us: float | None = None,
                  costs: tuple[tuple[int, float], ...] = (), arrivals: bool = True
                  ) -> tuple[simpy.Event | None, simpy.Event | None, simpy.Event]:
        """(head, done, sent): fired when the first `head_nbytes` and when all `nbytes` have arrived,
        and when the last byte has left. `tag` names the transfer in `stalled()`; a `weight` of k
        stands for k identical transfers moving together (each link carries k times its rate);
        `route_lat_us` replaces the route's summed link latency (a route that is several parallel
        ones, each with that latency); `costs` pairs links of the route with what each byte counts
        as on them (NVSwitch multicast traffic at less than the port's rate; a connection whose
        every network step costs a fixed time). With `arrivals` off no one waits for the bytes to
        arrive (a receive's copy out of its buffer): head and done are None, and only `sent` fires."""
        self.n_transfers += 1
        env = self.env
        sent = simpy.Event(env)
        if arrivals:
            done = simpy.Event(env)
            head = done if head_nbytes >= nbytes else simpy.Event(env)
        else:
            done = head = None
        shape = self._shape(tuple(route), weight, costs)
        path_lat = self.route_lat_us(shape[0]) if route_lat_us is None else route_lat_us
        item = _Transfer(shape, nbytes, done, sent, lat_us + path_lat, None if head is done else head,
                         head_nbytes)
        item.tag = tag
        self._start(item)
        return head, done, sent

    def _shape(self, route: tuple[int, ...], weight: int, costs: tuple[tuple[int, float], ...] = ()) -> tuple:
        """A route's links counted (times crossed x weight, x the link's cost where `costs` gives one)
        and its latency, computed once per route."""
        key = (route, weight, costs)
        shape = self._shapes.get(key)
        if shape is None:
            n = len(route)
            if len(set(route)) == n:  # the common case: each link once, the counts the weight
                use = route
                links = np.fromiter(route, dtype=np.int64, count=n)
                counts = np.empty(n)
                counts.fill(weight)  # np.full's wrapper costs more than the fill
            else:
                use = Counter(route)
                n = len(use)
                links = np.fromiter(use.keys(), dtype=np.int64, count=n)
                counts = np.fromiter(use.values(), dtype=np.float64, count=n) * weight
            if costs:
                by_link = dict(costs)
                if len(by_link) <= _FEW_COSTS and use is route:  # a connection's step cost, say: found in place
                    for link, cost in by_link.items():
                        if link in route:
                            counts[route.index(link)] *= cost
                else:  # one pass: a spread route lists hundreds of spine cables at a share
                    counts *= np.fromiter(map(by_link.get, use, repeat(1.0)), dtype=np.float64, count=n)
            shape = self._shapes[key] = (route, links, counts, len(self._shapes))
            self._shape_nbytes.append(0.0)
            if self._classes is not None:
                listed = links.tolist()
                self._split(self._classes.add(listed, counts.tolist()))
                for link in listed:
                    self._crossing.setdefault(link, []).append(shape[3])
        return shape

    def route_lat_us(self, route: tuple[int, ...]) -> float:
        """The sum of a route's link latencies, worked out once per route, where asked for (a
        transfer whose route stands for several parallel ones comes with its own)."""
        got = self._route_lats.get(route)
        if got is None:
            got = self._route_lats[route] = sum(map(self.latency.__getitem__, route))
        return got

    def _split(self, splits: list[tuple[int, list[int]]]) -> None:
        """Classes of links a new shape split: each link of one had, up to now, the busy time of
        its representative; the shapes crossing them are reduced again, and the pair columns laid
        out again before the new shape moves."""
        if not splits:
            return
        self._flush_busy()
        busy = set(self._busy.tolist())
        for before, links in splits:
            self._busy_us[links] = self._busy_us[before]
            if before in busy:
                busy.update(self._classes.rep(x) for x in links)
            for shape in self._crossing.get(before, ()):  # a class's links are crossed by the same shapes
                self._reduced.pop(shape, None)
        self._busy = np.fromiter(busy, dtype=np.int64, count=len(busy))
        self._stale = True

    def _flush_busy(self) -> None:
        _add_to(self._busy_us, self._busy, self.env._now - self._busy_since)
        self._busy_since = self.env._now

    def _pairs_of(self, item: _Transfer) -> tuple[np.ndarray, np.ndarray]:
        """The (link, times) pairs the division sees of a transfer, its links by dense number: every
        link, or its shape's representatives where links are merged."""
        got = self._reduced.get(item.shape)
        if got is None:
            links, times = (item.links, item.counts) if self._classes is None else \
                self._classes.reduced(item.links, item.counts)
            got = self._reduced[item.shape] = (self._dense_numbers(links), times)
        return got

    def _dense_numbers(self, links: np.ndarray) -> np.ndarray:
        dense = self._dense_of[links]
        new = dense < 0
        if new.any():
            fresh = links[new]
            numbers = np.arange(self._dense.n, self._dense.n + fresh.size, dtype=np.int64)
            self._dense_of[fresh] = numbers
            dense[new] = numbers
            self._dense.extend(fresh)
            self._dense_capacity.extend(self.capacity[fresh])
            if self._scratch.size < self._dense.n:
                self._scratch = np.full(2 * self._dense.n, -1, dtype=np.int64)
        return dense

    def set_capacity(self, link: int, bw_gbps: float) -> None:
        """Change a link's capacity from now on (a fault, a degraded port)."""
        self._advance()
        if self._classes is not None:
            self._unmerge()
        self.capacity[link] = bw_gbps
        if self._dense_of[link] >= 0:
            self._dense_capacity.values[self._dense_of[link]] = bw_gbps
        self._dirty = True
        self._later()

    def stalled(self) -> list[tuple[object, int]]:
        """(tag, dead link) of every transfer left on a link of no capacity."""
        return [(item.tag, next(link for link in item.links.tolist() if self.capacity[link] <= 0))
                for item in self.moving + self._new
                if item is not None and (self.capacity[item.links] <= 0).any()]

    def _start(self, item: _Transfer) -> None:
        if item.left <= _DONE or not item.route:
            self._fire_head(item)
            self._finish(item)
            return
        # A new transfer waits at rate 0 for the division of this instant, which takes it in.
        item.began = self.env._now
        self._shape_nbytes[item.shape] += item.left  # spread over the links when asked (bytes_on)
        self._new.append(item)
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
        elapsed = self.env._now - self._since
        if elapsed > 0 and self._left.size:
            self._left -= self._rate * (_BYTES_PER_US * elapsed)
        self._since = self.env._now

    def _replan(self, _event=None) -> None:
        """Take in the new transfers, re-divide the links, and wake up when the first of the moving
        transfers (or the first step of one) arrives. Between divisions the transfers' remaining
        bytes, rates, first-step marks and (link, times) pairs live in arrays aligned with `moving`."""
        self._pending = False
        self._advance()
        new, gone = self._new, self._gone
        started = Counter(item.shape for item in new) if new else {}
        if new:
            self._take_in(new)
        if self._dirty or any(k > gone[x] for x, k in started.items()):
            self._divide()
        else:  # each new transfer took the place (and the rate) of an arrived one of its shape
            for x, k in started.items():
                if gone[x] == k:
                    del gone[x]
                else:
                    gone[x] -= k
            if not gone:
                self._release()
            elif self.env._now >= self._held_until:
                self._divide()
        self._wake += 1
        wait = _first_wait(self._rate, self._left, self._head)  # to the first step, where one is awaited
        if wait < np.inf:
            wake = self._wake
            self.env.timeout(max(0.0, float(wait))).callbacks.append(lambda _: self._arrive(wake))

    def _release(self) -> None:
        """Forget the arrived transfers' shares: the links were divided, or all were taken again."""
        self._gone.clear()
        self._gone_rate.clear()
        self._dirty = False
        self._held_until = float("inf")
        self._hold_wake += 1

    def _hold(self, item: _Transfer) -> None:
        """Keep an arrived transfer's share for at most `hold` x its duration; then re-divide."""
        until = self.env._now + self.hold * (self.env._now - item.began)
        if until <= self.env._now:
            self._held_until = min(self._held_until, until)  # the division of this instant takes it
        elif until < self._held_until:
            self._held_until = until
            self._hold_wake += 1
            wake = self._hold_wake
            self.env.timeout(until - self.env._now).callbacks.append(lambda _: self._hold_over(wake))

    def _hold_over(self, wake: int) -> None:
        if wake == self._hold_wake:
            self._held_until = -float("inf")
            self._later()

    def _unmerge(self) -> None:
        """Every link divided from now on (a capacity changes, and with it which link is tightest)."""
        self._flush_busy()
        members = self._classes.members()
        busy = set(self._busy.tolist())
        for rep in list(busy):
            busy.update(members.get(rep, ()))
        for rep, links in members.items():
            self._busy_us[links] = self._busy_us[rep]
        self._busy = np.fromiter(busy, dtype=np.int64, count=len(busy))
        self._classes = None
        self._reduced.clear()
        self._stale = True
        self._lay_out_again()

    def _take_in(self, new: list[_Transfer]) -> None:
        """Append the new transfers to the arrays (closing the holes first where they are many, or
        laying every row out again where a class of links split); each starts at the rate of the
        arrived transfer of its shape (the division, where one follows, replaces it)."""
        if self._stale:
            self._lay_out_again()
        elif 4 * self._holes > len(self.moving):
            self._close_holes()
        self.moving.extend(new)
        self._new = []
        columns = self._columns
        columns["_left"].extend([item.left for item in new])
        columns["_head"].extend([item.head_left for item in new])
        columns["_rate"].extend([self._gone_rate.get(item.shape, 0.0) for item in new])
        self._add_pairs(new)
        columns["_gone_at"].extend(np.zeros(len(new), dtype=bool))
        self._views()

    def _add_pairs(self, items: list[_Transfer]) -> None:
        pairs = [self._pairs_of(item) for item in items]
        self._columns["_sizes"].extend([links.size for links, _ in pairs])
        if pairs:
            self._columns["_pair_link"].extend(np.concatenate([links for links, _ in pairs]))
            self._columns["_pair_times"].extend(np.concatenate([times for _, times in pairs]))

    def _close_holes(self) -> None:
        keep = ~self._gone_at
        pair_keep = np.repeat(keep, self._sizes)
        for name, column in self._columns.items():
            column.keep(pair_keep if name.startswith("_pair") else keep)
        self.moving = [item for item in self.moving if item is not None]
        self._holes = 0
        self._views()

    def _lay_out_again(self) -> None:
        """Every moving transfer's pairs as `_pairs_of` gives them now (the holes closed)."""
        self._close_holes()
        for name in ("_sizes", "_pair_link", "_pair_times"):
            self._columns[name].n = 0
        self._add_pairs(self.moving)
        self._stale = False
        self._views()

    def _views(self) -> None:
        for name, column in self._columns.items():
            setattr(self, name, column.values)

    def _divide(self) -> None:
        """Max-min fair rates for every moving transfer (flows.py), and the links they keep busy."""
        self.n_divisions += 1
        self._release()
        if self._stale:  # a shape that never moved (nothing to send) split a class since
            self._lay_out_again()
        # The pairs of the transfers moving: an arrived one's row (a hole) waits to be closed, and
        # when holes are closed depends on what else happened, not on the division.
        self.n_pairs += int(self._sizes[~self._gone_at].sum()) if self._holes else self._pair_link.size
        if len(self.moving) > self._holes:
            self._rate[:], busy = fair_rates_flat(self._pair_link, self._pair_times, self._sizes,
                                                  self._dense_capacity.values, self._gone_at, self._scratch,
                                                  self._work)
            busy = self._dense.values[busy]
        else:
            self._rate[:] = 0.0
            busy = np.zeros(0, dtype=np.int64)
        self._flush_busy()
        self._busy = busy
        if self.series is not None:
            self._record()

    def _record(self) -> None:
        load = np.zeros(len(self.capacity))
        for item, rate in zip(self.moving, self._rate.tolist()):
            if item is not None and 0 < rate < float("inf"):
                load[item.links] += item.counts * rate
        for link in np.nonzero(np.abs(load - self._load) > 1e-9)[0].tolist():
            self.series.append((self.env._now, link, float(load[link])))
        self._load = load

    def _arrive(self, wake: int) -> None:
        if wake != self._wake:
            return  # the links were re-divided since this wake-up was planned
        self._advance()
        heads, gone = _arrivals(self._rate, self._left, self._head)
        firing = Batches(self.env)  # thousands of transfers can arrive at once: one queue entry per instant
        for i in heads.tolist():
            self._fire_head(self.moving[i], firing)
        firing = Batches(self.env)  # a new batch: _hold schedules in between
        if gone.size:
            done = [self.moving[i] for i in gone.tolist()]
            for i, item in zip(gone.tolist(), done):
                self._gone[item.shape] += 1
                self._gone_rate[item.shape] = float(self._rate[i])
                self._hold(item)
                self.moving[i] = None
            # A hole: never moving, never arriving, left out of the next division.
            self._gone_at[gone] = True
            self._left[gone], self._head[gone], self._rate[gone] = np.inf, -np.inf, 0.0
            self._holes += gone.size
            for item in done:
                self._fire_head(item, firing)
                self._finish(item, firing)
        self._later()

    def _after(self, delay: float, event: simpy.Event) -> None:
        """`event` fired `delay` from now: scheduled there directly, one event rather than a
        timeout whose callback fires it."""
        if delay > 0:
            event._ok, event._value = True, None
            self.env.schedule(event, simpy.events.NORMAL, delay)
        else:
            event.succeed()

    def _fire_head(self, item: _Transfer, firing: Batches | None = None) -> None:
        if item.head is not None:
            head, item.head = item.head, None
            if firing is None:
                self._after(item.lat, head)
            else:
                firing.add(item.lat, head)

    def _finish(self, item: _Transfer, firing: Batches | None = None) -> None:
        if firing is None:
            item.sent.succeed()
            if item.done is not None:
                self._after(item.lat, item.done)
        else:
            firing.add(0.0, item.sent)
            if item.done is not None:
                firing.add(item.lat, item.done)
