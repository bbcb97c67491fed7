"""SimPy's event loop, run to a time with its step inlined.

`run_until(env, at_us)` promises what `env.run(until=at_us)` does: events are processed in SimPy's
own order (time, priority, insertion) until the clock reaches `at_us`, where it stops before any
normal event of that instant, or until a callback raises StopSimulation (an abort); an event that
failed with no one to defuse it raises as `Environment.step` would raise it. It differs only in
cost: `step` is a method call and two exception frames per event, and a large DES processes
millions of events.
"""
from __future__ import annotations

from heapq import heappop

import simpy
from simpy.core import StopSimulation
from simpy.events import URGENT

__all__ = ["run_until"]


def run_until(env: simpy.Environment, at_us: float) -> None:
    """Process `env`'s events until its clock reaches `at_us` (or no event is left)."""
    if at_us <= env.now:
        raise ValueError(f"until ({at_us}) must be greater than the current simulation time")
    stop = simpy.Event(env)
    stop._ok, stop._value = True, None
    env.schedule(stop, URGENT, at_us - env.now)  # before every normal event of that instant, as run() does
    queue = env._queue
    while queue:
        env._now, _, _, event = heappop(queue)
        callbacks, event.callbacks = event.callbacks, None
        if event is stop:  # queued again ahead of everything, as run() leaves it: a later run starts there
            stop.callbacks = []
            env.schedule(stop, -1)
            return
        try:
            for callback in callbacks:
                callback(event)
        except StopSimulation:  # a callback ends the run: the event's other callbacks wait, as step() leaves them
            event.callbacks = callbacks[callbacks.index(callback) + 1:]
            env.schedule(event, -1)
            return
        if not event._ok and not hasattr(event, "_defused"):
            error = type(event._value)(*event._value.args)
            error.__cause__ = event._value
            raise error
