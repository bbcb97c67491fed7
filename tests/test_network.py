"""Transfers sharing links in simulated time (nicksim/model/network.py)."""
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from nicksim.model.network import FluidNetwork


def run(capacity, starts, latency=None):
    """Start each (time, route, nbytes) and return when each arrived (None if it never did)."""
    env = simpy.Environment()
    net = FluidNetwork(env, capacity, latency)
    arrived = [None] * len(starts)

    def one(i, at, route, nbytes):
        yield env.timeout(at)
        yield net.transfer(route, nbytes)
        arrived[i] = env.now

    for i, (at, route, nbytes) in enumerate(starts):
        env.process(one(i, at, route, nbytes))
    env.run(until=10_000)
    return arrived


def test_one_transfer_takes_bytes_over_bandwidth_plus_latency():
    # 1 MB at 10 GB/s = 100 us; 2 us of latency on the way.
    assert run([10.0], [(0, [0], 1e6)], latency=[2.0]) == [pytest.approx(102.0)]


def test_two_transfers_on_one_link_share_it():
    assert run([10.0], [(0, [0], 1e6), (0, [0], 1e6)]) == [pytest.approx(200.0)] * 2


def test_a_late_transfer_slows_the_first_only_while_both_move():
    # A alone for 50 us (0.5 MB), then 5 GB/s each: A ends at 150; B has 0.5 MB left alone: 200.
    assert run([10.0], [(0, [0], 1e6), (50, [0], 1e6)]) == [pytest.approx(150.0), pytest.approx(200.0)]


def test_only_the_shared_link_slows_anyone():
    # A crosses links 0 and 1, B only 1 (4 GB/s): 2 GB/s each; C on link 0 gets 10 - 2 = 8.
    arrived = run([10.0, 4.0], [(0, [0, 1], 2e5), (0, [1], 2e5), (0, [0], 8e5)])
    assert arrived == [pytest.approx(100.0), pytest.approx(100.0), pytest.approx(100.0)]


def test_a_dead_link_never_delivers():
    assert run([0.0, 10.0], [(0, [0], 1e6), (0, [1], 1e6)]) == [None, pytest.approx(100.0)]


def test_nothing_to_send_arrives_at_once():
    assert run([10.0], [(5, [0], 0), (0, [], 1e6)]) == [5, 0]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100), st.floats(1e3, 1e6)), min_size=1, max_size=10), st.floats(1, 100))
def test_a_single_link_never_idles_while_bytes_wait(items, capacity):
    # Work conservation: once everyone has started, the link drains all bytes at full speed, so the last
    # transfer arrives exactly when the bytes would at line rate (never before, never after).
    arrived = run([capacity], [(at, [0], nbytes) for at, nbytes in items])
    assert all(t is not None for t in arrived)
    events = sorted(items)
    clock = 0.0
    for at, nbytes in events:  # the link is busy from the first start on, idling only while nothing waits
        clock = max(clock, at) + nbytes / (capacity * 1e3)
    assert max(arrived) == pytest.approx(clock, rel=1e-6)


def test_a_transfer_taking_its_predecessors_place_keeps_the_division():
    # Two senders on one 10 GB/s link, each sending 4 slices back to back: whenever one slice
    # leaves and the next starts at that instant on the same route, the rates cannot change, so
    # the links are divided when both start and when both are done, not at every slice — and the
    # answer is the shared one: 8 MB through 10 GB/s is 800 us.
    env = simpy.Environment()
    net = FluidNetwork(env, [10.0, 100.0, 100.0])
    ends = {}

    def sender(name, route, nbytes):
        for _ in range(4):
            yield net.transfer2(route, nbytes, 0.0, nbytes)[2]
        ends[name] = env.now

    env.process(sender("a", [0, 1], 1e6))
    env.process(sender("b", [0, 2], 1e6))
    env.run()
    assert ends == {"a": pytest.approx(800.0), "b": pytest.approx(800.0)}
    assert net.n_divisions == 2


def test_what_moves_on_a_solo_link_divides_it_alone():
    # A proxy-like link (3) that only one-link posts cross: two posts share it (1 GB/s: 2 us each
    # for 1,000 bytes) while a transfer crosses links 0 and 1. The posts come and go without
    # re-dividing the other links, and everything arrives when it would with no solo link declared.
    def scenario(solo):
        env = simpy.Environment()
        net = FluidNetwork(env, [10.0, 10.0, 10.0, 1.0], solo_links=solo)
        ends = {}

        def move(name, at, route, nbytes):
            yield env.timeout(at)
            yield net.transfer(route, nbytes)
            ends[name] = env.now

        env.process(move("bulk", 0, [0, 1], 1e6))
        for k in range(3):
            env.process(move(f"post{k}", 10 * k + 5, [3], 1e3))
            env.process(move(f"again{k}", 10 * k + 5, [3], 1e3))
        env.run()
        return ends, net.n_divisions

    plain, plain_divisions = scenario(())
    solo, solo_divisions = scenario([3])
    assert solo == pytest.approx(plain)
    assert solo["bulk"] == pytest.approx(100.0) and solo["post0"] == pytest.approx(7.0)
    assert solo_divisions == 2 < plain_divisions  # the bulk transfer's start and end only


def test_a_route_may_not_mix_a_solo_link_with_others():
    net = FluidNetwork(simpy.Environment(), [1.0, 1.0], solo_links=[1])
    with pytest.raises(ValueError):
        net.transfer([0, 1], 10.0)
