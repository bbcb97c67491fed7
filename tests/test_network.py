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


@pytest.mark.parametrize("more", [0, 6])
def test_a_byte_costs_what_its_link_says_there_alone(more):
    # 1 MB over links 0 (10 GB/s) and 1 (4 GB/s); on link 0 each byte counts 5 times: 2 GB/s of
    # bytes there, 500 us. A cost on a link the route does not cross changes nothing; so do `more`
    # costs of 1 on links of the route, past the few looked up one by one.
    env = simpy.Environment()
    route = list(range(2 + more))
    net = FluidNetwork(env, [10.0, 4.0] + [100.0] * more + [1.0])
    costs = ((0, 5.0), (2 + more, 3.0)) + tuple((link, 1.0) for link in range(2, 2 + more))
    done = net.transfer2(route, 1e6, 0.0, 1e6, costs=costs)[1]
    env.run(until=done)
    assert env.now == pytest.approx(500.0)


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




def test_the_transfers_left_after_arrivals_keep_their_own_rates_and_links():
    # Three on link 0 (10 GB/s), one of them also on link 1 (2 GB/s): A (0.1 MB) and C (0.5 MB) on link 0,
    # B (0.2 MB) on links 0 and 1 at 2 GB/s. A and C share the rest (4 GB/s each): A ends at 25 us. Then C
    # gets 8: B ends at 100, C (0.4 MB left at 25 us) at 25 + 0.4e6 / 8e3 = 75. D (0.21 MB) starts at 80 on
    # link 0 after A and C have left, beside B: 8 GB/s until B ends at 100 (0.16 MB), the last 0.05 MB at
    # 10 GB/s: 105.
    env = simpy.Environment()
    net = FluidNetwork(env, [10.0, 2.0])
    ends = {}

    def move(name, at, route, nbytes):
        yield env.timeout(at)
        yield net.transfer(route, nbytes)
        ends[name] = env.now

    for name, at, route, nbytes in (("A", 0, [0], 1e5), ("B", 0, [0, 1], 2e5), ("C", 0, [0], 5e5),
                                    ("D", 80, [0], 2.1e5)):
        env.process(move(name, at, route, nbytes))
    env.run()
    assert ends == {"A": pytest.approx(25.0), "B": pytest.approx(100.0), "C": pytest.approx(75.0),
                    "D": pytest.approx(105.0)}
    # Link 0 carried something (B at least) from 0 to 105, link 1 from 0 to 100.
    assert net.busy_us[:2].tolist() == [pytest.approx(105.0), pytest.approx(100.0)]


def held(hold, gap_us=None):
    """A (0.5 MB) and B (1 MB) share one 10 GB/s link; with `gap_us`, A's successor of the same shape
    (0.25 MB) starts that long after A arrives. Returns the arrivals and the divisions made."""
    env = simpy.Environment()
    net = FluidNetwork(env, [10.0], hold=hold)
    ends = {}

    def move(name, at, nbytes, then=None):
        yield env.timeout(at)
        yield net.transfer([0], nbytes)
        ends[name] = env.now
        if then is not None:
            yield env.timeout(then)
            yield net.transfer([0], 2.5e5)
            ends[name + "2"] = env.now

    env.process(move("A", 0, 5e5, gap_us))
    env.process(move("B", 0, 1e6))
    env.run()
    return ends, net.n_divisions


def test_an_arrived_transfers_share_is_held_for_at_most_hold_times_its_duration():
    # Exact: A ends at 100 us (5 GB/s each), B has 0.5 MB left and ends at 150. Holding A's share for 10% of
    # its 100 us leaves B at 5 GB/s until 110 (0.45 MB left), then 10 GB/s: 155.
    assert held(0.0)[0] == {"A": pytest.approx(100.0), "B": pytest.approx(150.0)}
    assert held(0.1)[0] == {"A": pytest.approx(100.0), "B": pytest.approx(155.0)}


def test_a_successor_of_the_same_shape_takes_the_held_share_without_a_division():
    # A's successor A2 starts 2 us after A ends, within the 10 us held, at A's 5 GB/s: 0.25 MB in 50 us, to
    # 152. A2's own share is held 5 us more (10% of its 50 us), so B moves at 5 GB/s until 157 (0.215 MB
    # left), then alone: 178.5. Exactly, B would have had the link alone from 100 to 102 and from 152 on: 175.
    ends, divisions = held(0.1, gap_us=2.0)
    assert ends == {"A": pytest.approx(100.0), "A2": pytest.approx(152.0), "B": pytest.approx(178.5)}
    exact, exact_divisions = held(0.0, gap_us=2.0)
    assert exact == {"A": pytest.approx(100.0), "A2": pytest.approx(152.0), "B": pytest.approx(175.0)}
    assert divisions == exact_divisions - 2  # A's arrival and A2's start cost none


@pytest.mark.parametrize("hold", [0.0, 2.0])
def test_a_transfer_no_one_awaits_ends_where_it_would_and_leaves_the_others_bit_for_bit(hold):
    # transfer2(arrivals=False) makes no head or done event (a receive's copy out of its buffer),
    # yet the network must wake at its head as before: every time, its own `sent` included, is
    # the same to the last bit as when head and done are made and fired.
    def times(arrivals: bool) -> dict[tuple[int, str], float]:
        env = simpy.Environment()
        net = FluidNetwork(env, [3.066, 18.097, 10.692], [0.5, 0.25, 1.0], hold=hold)
        out: dict[tuple[int, str], float] = {}

        def one(i, at, route, nbytes, head_nbytes, awaited):
            yield env.timeout(at)
            head, done, sent = net.transfer2(route, nbytes, 0.3, head_nbytes, arrivals=awaited)
            assert (head is None and done is None) == (not awaited)
            for name, event in (("sent", sent), ("head", head), ("done", done)):
                if event is not None:
                    yield event
                    out[(i, name)] = env.now

        # Odd sizes and rates: a wake-up more or less leaves a different float residue.
        for i, (at, route, nbytes, head_nbytes) in enumerate(((1.127, [2], 437339.0, 385051.9),
                                                             (3.523, [0, 2], 721647.1, 164666.9),
                                                             (1.974, [0, 1, 2], 230963.8, 142921.6))):
            env.process(one(i, at, route, nbytes, head_nbytes, True))
        env.process(one(3, 1.061, [0, 1, 2], 740076.7, 148419.9, arrivals))  # its head a wake-up of its own
        env.run(until=10_000)
        return out

    with_events, without = times(True), times(False)
    assert set(with_events) - set(without) == {(3, "head"), (3, "done")}
    assert without == {key: t for key, t in with_events.items() if key in without}  # ==: the same float residue
