"""run_until against SimPy's own Environment.run(until=...): the same events in the same order."""
from __future__ import annotations

import pytest
import simpy

from nicksim.model.clock import run_until
from nicksim.model.firing import Batches


def _scenario(env: simpy.Environment, log: list, stop_at: float | None = None) -> None:
    """Processes, plain events, timeouts at shared instants, an urgent process start in the middle
    of an instant, a batch, and (where asked) a callback that ends the run."""
    def worker(name: str, delays):
        for delay in delays:
            yield env.timeout(delay)
            log.append((env.now, name))
            if name == "a" and env.now == 2.0:
                env.process(worker("late", [0.0, 1.0]))  # an urgent start at an instant in progress

    for name, delays in (("a", [1.0, 1.0, 3.0]), ("b", [2.0, 0.0, 1.0]), ("c", [0.5] * 9)):
        env.process(worker(name, delays))

    def fire_batch(_event):
        batch = Batches(env)
        for k in range(3):
            event = simpy.Event(env)
            event.callbacks.append(lambda _e, k=k: log.append((env.now, f"batch {k}")))
            batch.add(0.5 * (k % 2), event)

    env.timeout(2.0).callbacks.append(fire_batch)
    if stop_at is not None:
        stopper = env.timeout(stop_at)
        stopper.callbacks += [simpy.core.StopSimulation.callback, lambda _e: log.append((env.now, "after stop"))]


def _run(runner, until: float, stop_at: float | None = None):
    env, log = simpy.Environment(), []
    _scenario(env, log, stop_at)
    runner(env, until)
    ended = (list(log), env.now, next(env._eid), sorted((t, p) for t, p, _, _ in env._queue))
    env.run(until=until + 50.0)  # what was left waiting goes on from there as SimPy left it
    return ended, log


@pytest.mark.parametrize("until, stop_at", [(100.0, None), (3.0, None), (2.0, None), (100.0, 2.5), (2.5, 2.5)])
def test_run_until_processes_what_simpys_run_does_in_its_order(until, stop_at):
    def simpy_run(env, at):
        env.run(until=at)

    ours = _run(run_until, until, stop_at)
    assert ours == _run(simpy_run, until, stop_at)
    log = ours[0][0]
    assert log and all(t <= until for t, _ in log)
    assert any(name == "late" for _, name in log) == (until > 2.0 and (stop_at is None or stop_at > 2.0))


def test_a_failed_event_that_no_one_defused_raises_and_a_defused_one_does_not():
    env = simpy.Environment()
    env.timeout(1.0).callbacks.append(lambda _e: failing.fail(RuntimeError("the link went down")))
    failing = simpy.Event(env)
    with pytest.raises(RuntimeError, match="the link went down"):
        run_until(env, 10.0)
    env = simpy.Environment()
    defused = simpy.Event(env)
    defused.callbacks.append(lambda event: setattr(event, "_defused", True))
    defused.fail(RuntimeError("seen and handled"))
    run_until(env, 10.0)
    assert env.now == 10.0


def test_a_time_not_ahead_of_the_clock_is_refused():
    env = simpy.Environment()
    run_until(env, 5.0)
    with pytest.raises(ValueError, match="greater than the current simulation time"):
        run_until(env, 5.0)
