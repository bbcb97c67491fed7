"""Many events fired at one instant for the price of one entry on SimPy's queue.

A network arrival can finish thousands of transfers at once, and a proxy thread end thousands of
posts: each fired on its own costs a push and a pop on SimPy's queue, and a queue of hundreds of
thousands of entries makes every pop slow. `Batches` fires such events through one carrier event
per instant, running each member's callbacks in the order the members were added, exactly as
SimPy would have run them had each been scheduled alone in that order: SimPy orders its queue by
time, priority and insertion, nothing else is inserted at that instant between the members (the
callers add them in one go), and whatever a member's callbacks schedule comes after every member
but an urgent event (a process starting), which SimPy runs before the next member — so does a
carrier of the members left, queued between urgent and normal priority. Each member takes a number
in SimPy's count of events as if queued alone, so a run's count of events fired is what it was
(plus one for each carrier that takes over after an urgent event).
"""
from __future__ import annotations

import simpy
from simpy.events import NORMAL, URGENT

__all__ = ["Batches"]

_BETWEEN = (URGENT + NORMAL) / 2  # after the urgent events of an instant, before its normal ones


class Batches:
    """Events to fire, each `delay_us` from now, in the order added: one carrier per delay. Use one
    `Batches` per run of additions with nothing else scheduled in between, and let it go."""

    __slots__ = ("env", "_members")

    def __init__(self, env: simpy.Environment):
        self.env = env
        self._members: dict[float, list[simpy.Event]] = {}

    def add(self, delay_us: float, event: simpy.Event) -> None:
        """Trigger `event` now (as succeed() would) and process it `delay_us` from now (at once
        where that is not positive)."""
        event._ok, event._value = True, None
        delay_us = delay_us if delay_us > 0 else 0.0
        members = self._members.get(delay_us)
        if members is None:
            members = self._members[delay_us] = []
            _carry(self.env, members, NORMAL, delay_us)
        else:
            next(self.env._eid)  # numbered as if queued alone: a run's count of events fired stays the same
        members.append(event)


def _carry(env: simpy.Environment, members: list[simpy.Event], priority: float, delay_us: float = 0.0) -> None:
    carrier = simpy.Event(env)
    carrier._ok, carrier._value = True, None
    carrier.callbacks.append(lambda _: _process(env, members))
    env.schedule(carrier, priority, delay_us)


def _process(env: simpy.Environment, members: list[simpy.Event]) -> None:
    queue = env._queue
    last = len(members) - 1
    for index, event in enumerate(members):
        callbacks, event.callbacks = event.callbacks, None
        for callback in callbacks:
            callback(event)
        # The priority first: it is nearly always NORMAL or later, and the test ends there.
        if queue and queue[0][1] < NORMAL and queue[0][0] == env._now and index < last:
            _carry(env, members[index + 1:], _BETWEEN)  # an urgent event runs first, as it would have
            return
