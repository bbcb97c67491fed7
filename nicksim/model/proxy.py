"""The ranks' proxy threads: the CPU time each network step costs, shared by everything asked of a thread.

NCCL's proxy progress loop (proxy.cc progressOps, net.cc sendProxyProgress/recvProxyProgress)
visits every active operation on each pass and moves each of its channels by one step: a post at
the sender, a test and hand-over at the receiver. A simulated slice stands for several steps, so
slices that wait on one thread together advance together: the thread is a processor shared evenly
among them (a post standing for k lockstep channels counts k times). `ProxyThreads` keeps that
sharing to itself, apart from the fluid network of links: a post starting or ending changes no
link's rate, and the network is not re-divided for it.
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Hashable

import simpy

from .firing import Batches

__all__ = ["ProxyThreads"]

_TOGETHER = 1e-12  # relative difference under which two posts end together (float residue)
_LATE = 2  # SimPy priority after NORMAL: a thread's next end is planned once the instant's posts are in
# The clock is read as env._now, the attribute behind SimPy's `now` property: a large run reads it
# millions of times.


class _Thread:
    __slots__ = ("work", "weight", "since", "ends", "order", "wake", "queued", "planned_at")

    def __init__(self, now: float):
        self.work = 0.0       # work done per unit of weight since the thread was created (us)
        self.weight = 0       # total weight of the posts it holds
        self.since = now      # when `work` was last brought up to date
        self.ends: list[tuple[float, int, int, simpy.Event | None]] = []  # (work at its end, order, weight, event)
        self.order = 0        # ties broken in the order posts came
        self.wake = 0         # generation of the pending wake-up; older ones are stale
        self.queued = False   # its next end is to be planned at the end of this instant
        self.planned_at = -1.0  # when its pending wake-up was planned


class ProxyThreads:
    """Threads named by any hashable key, each a processor shared evenly by the posts it holds. A
    post of `cost_us` and weight k alone on its thread ends after k x cost_us; n posts of equal
    cost and weight asked together end together after n times that.

    A thread's next end is planned at its first post of an instant and, where more posts come in
    that instant, once more after the last of them: a call's launch gives each rank's thread a post
    per peer at once, and a wake-up per post, all but the last stale, would fill SimPy's queue."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self._threads: dict[Hashable, _Thread] = {}
        self._unplanned: list[tuple[Hashable, _Thread]] = []

    def post(self, thread: Hashable, cost_us: float, weight: int = 1, done: simpy.Event | None = None) -> None:
        """Give `thread` a post of `cost_us` standing for `weight` steps; fire `done`, where given,
        when it ends."""
        if cost_us <= 0:
            if done is not None:
                done.succeed()
            return
        state = self._threads.get(thread)
        if state is None:
            state = self._threads[thread] = _Thread(self.env._now)
        self._advance(state)
        state.order += 1
        heapq.heappush(state.ends, (state.work + cost_us, state.order, weight, done))
        state.weight += weight
        if state.planned_at == self.env._now:
            self._plan_later(thread, state)
        else:
            self._plan(thread, state)

    def _advance(self, state: _Thread) -> None:
        now = self.env._now
        if state.weight:
            state.work += (now - state.since) / state.weight
        state.since = now

    def _plan_later(self, thread: Hashable, state: _Thread) -> None:
        """Forget the thread's pending wake-up and plan the next at the end of this instant."""
        state.wake += 1
        if state.queued:
            return
        state.queued = True
        self._unplanned.append((thread, state))
        if len(self._unplanned) == 1:
            event = simpy.Event(self.env)
            event.callbacks.append(self._plan_all)
            event._ok, event._value = True, None
            self.env.schedule(event, _LATE)

    def _plan_all(self, _event) -> None:
        unplanned, self._unplanned = self._unplanned, []
        for thread, state in unplanned:
            state.queued = False
            self._plan(thread, state)

    def _plan(self, thread: Hashable, state: _Thread) -> None:
        state.wake += 1
        state.planned_at = self.env._now
        if not state.ends:
            return
        wake = state.wake
        delay = max(0.0, (state.ends[0][0] - state.work) * state.weight)
        self.env.timeout(delay).callbacks.append(lambda _: self._end(thread, state, wake))

    def _end(self, thread: Hashable, state: _Thread, wake: int) -> None:
        if wake != state.wake:
            return  # a post came since this wake-up was planned
        self._advance(state)
        # Ends closer than the clock can step count as now: a remaining delay below the clock's
        # resolution at this time would never move it, and the thread would wake again forever.
        clock_step = 4 * math.ulp(self.env._now) / max(1, state.weight)
        limit = state.work + max(_TOGETHER * max(1.0, abs(state.work)), clock_step)
        ended = Batches(self.env)
        while state.ends and state.ends[0][0] <= limit:
            _, _, weight, event = heapq.heappop(state.ends)
            state.weight -= weight
            if event is not None:
                ended.add(0.0, event)
        if not state.ends:
            state.weight = 0  # no residue left behind
        self._plan(thread, state)
