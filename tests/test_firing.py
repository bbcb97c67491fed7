"""Events fired together through one queue entry (nicksim/model/firing.py) fire as SimPy would fire them alone."""
import simpy

from nicksim.model.firing import Batches


def _trace(batched: bool) -> tuple[list, int]:
    """Three events fired at once and two 2 us later, some resuming processes that start others (urgent
    events in SimPy) or schedule more at the same instant; what ran, in order, and the events counted."""
    env = simpy.Environment()
    seen = []

    def child(name):
        seen.append(("child", name, env.now))
        yield env.timeout(0)
        seen.append(("child after", name, env.now))

    def waiter(name, event, spawn):
        yield event
        seen.append((name, env.now))
        if spawn:
            env.process(child(name))  # starts at once: SimPy queues its start as urgent
        env.timeout(0).callbacks.append(lambda _: seen.append(("later", name, env.now)))

    events = [env.event() for _ in range(5)]
    for k, event in enumerate(events):
        env.process(waiter(f"w{k}", event, spawn=k in (1, 3)))
    env.run(until=0.5)  # the waiters are waiting

    def fire():
        yield env.timeout(1.0)
        firing = Batches(env) if batched else None
        for k, event in enumerate(events):
            delay = 2.0 if k % 2 else 0.0
            if firing is not None:
                firing.add(delay, event)
            elif delay:
                event._ok, event._value = True, None
                env.schedule(event, simpy.events.NORMAL, delay)
            else:
                event.succeed()
        seen.append(("fired", env.now))

    env.process(fire())
    env.run()
    return seen, next(env._eid)


def test_a_batch_fires_its_events_in_order_with_whatever_they_start_in_between_as_simpy_would():
    batched, count = _trace(batched=True)
    alone, count_alone = _trace(batched=False)
    assert batched == alone
    # counted as if queued alone, plus one for each carrier that takes over after an urgent event
    # (w1's child at t=3.5 comes before w3; w3's has no member left after it)
    assert count == count_alone + 1
    # the children started by w1 and w3 (at t=3.5) run before the next member of their instant
    assert batched.index(("child", "w1", 3.5)) < batched.index(("w3", 3.5)) < batched.index(("later", "w1", 3.5))
