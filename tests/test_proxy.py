"""The proxy threads' time (nicksim/model/proxy.py)."""
import pytest
import simpy

from nicksim.model.network import FluidNetwork
from nicksim.model.proxy import ProxyThreads


def ends_of(posts, threads=None):
    """Give each (name, at, thread, cost_us, weight) to ProxyThreads; return when each ended."""
    env = simpy.Environment()
    proxy = ProxyThreads(env)
    ends = {}

    def one(name, at, thread, cost_us, weight):
        yield env.timeout(at)
        done = env.event()
        proxy.post(thread, cost_us, weight, done)
        yield done
        ends[name] = env.now

    for post in posts:
        env.process(one(*post))
    env.run()
    return ends


def test_a_post_alone_costs_its_time_once_per_channel_it_stands_for():
    assert ends_of([("a", 3, 0, 2.0, 1), ("b", 3, 1, 2.0, 4)]) == {"a": pytest.approx(5.0), "b": pytest.approx(11.0)}


def test_posts_on_one_thread_share_it_evenly():
    # A alone from 0 to 5 (5 of its 10 us done), then A and B at half speed each: A ends at 15, B (5 us left
    # then) alone at 20. C, asked at the same time as B on another thread, is not slowed.
    ends = ends_of([("A", 0, 7, 10.0, 1), ("B", 5, 7, 10.0, 1), ("C", 5, 8, 10.0, 1)])
    assert ends == {"A": pytest.approx(15.0), "B": pytest.approx(20.0), "C": pytest.approx(15.0)}


def test_posts_asked_together_end_together():
    assert ends_of([(k, 0, 0, 1.0, 1) for k in range(4)]) == {k: pytest.approx(4.0) for k in range(4)}


def test_a_thread_ends_its_posts_when_a_1_gbps_link_would_carry_them():
    # The thread is a processor shared as the fluid network shares a link: posts of t us as t x 1000 bytes on a
    # 1 GB/s link (a post standing for k channels as a transfer of weight k) end at the same times.
    posts = [(f"p{k}", (7 * k) % 11 + 0.5 * k, 0, 1.0 + (k % 3), 1 + k % 2) for k in range(12)]
    env = simpy.Environment()
    net = FluidNetwork(env, [1.0])
    ends = {}

    def one(name, at, _thread, cost_us, weight):
        yield env.timeout(at)
        yield net.transfer2([0], cost_us * 1e3, 0.0, cost_us * 1e3, weight=weight)[1]
        ends[name] = env.now

    for post in posts:
        env.process(one(*post))
    env.run()
    assert ends_of(posts) == {name: pytest.approx(t) for name, t in ends.items()}


def test_a_free_post_ends_at_once():
    assert ends_of([("a", 2, 0, 0.0, 3)]) == {"a": 2}


def test_a_burst_of_posts_plans_one_wake_up_per_thread_not_one_per_post():
    # A call's launch gives each rank's thread a post per peer at once: the wake-ups queued for
    # them stay a handful, and the posts still end as processor sharing says (a smaller one first).
    env = simpy.Environment()
    proxy = ProxyThreads(env)
    done = [env.event() for _ in range(1001)]
    for k in range(1000):
        proxy.post("t", 1.0, 1, done[k])
    proxy.post("t", 0.5, 1, done[1000])
    assert len(env._queue) <= 3
    env.run()
    assert env.now == pytest.approx(1000.5)
    assert all(event.processed for event in done)
    env2 = simpy.Environment()
    proxy2, ends = ProxyThreads(env2), {}
    for k, cost in enumerate((1.0, 1.0, 0.5)):
        event = env2.event()
        event.callbacks.append(lambda _, k=k: ends.setdefault(k, env2.now))
        proxy2.post("t", cost, 1, event)
    env2.run()
    assert ends == {2: pytest.approx(1.5), 0: pytest.approx(2.5), 1: pytest.approx(2.5)}


@pytest.mark.parametrize("at_us, gap_us, cost_us", [(134297.66508, 0.0003, 0.00046), (1e5 + 0.1, 0.0001, 0.0001),
                                                    (7e4 + 1 / 3, 0.00023, 0.00046)])
def test_tiny_posts_late_in_a_run_end_though_the_clock_cannot_step_their_residue(at_us, gap_us, cost_us):
    # Posts of a fraction of a ns, 100 ms into a run, arriving while others run: the float residue of a post's
    # remaining work is below what the clock can step at that time. It ends now, not in a wake-up that never
    # moves the clock (each of these cases woke the thread forever before).
    env = simpy.Environment()
    proxy = ProxyThreads(env)
    ended = []

    def one(k):
        yield env.timeout(at_us + k * gap_us)
        done = env.event()
        proxy.post(0, cost_us, 2, done)
        yield done
        ended.append(env.now)

    for k in range(40):
        env.process(one(k))
    steps = 0
    while env._queue and steps < 100_000:  # bounded: a thread that wakes forever fails, not hangs
        env.step()
        steps += 1
    assert len(ended) == 40 and max(ended) < at_us + 40 * gap_us + 80 * cost_us
