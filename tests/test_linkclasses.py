"""Links crossed alike merged in the max-min division (nicksim/model/linkclasses.py, network.py)."""
import numpy as np
import pytest
import simpy
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nicksim.model.linkclasses import LinkClasses
from nicksim.model.network import FluidNetwork


def test_a_chain_crossed_alike_is_one_class_led_by_its_tightest_link():
    classes = LinkClasses([10.0, 4.0, 4.0, 7.0])
    assert classes.add([0, 1, 2], [1.0, 1.0, 1.0]) == []
    assert [classes.rep(x) for x in range(4)] == [1, 1, 1, 3]
    links, times = classes.reduced(np.array([0, 1, 2]), np.array([1.0, 1.0, 1.0]))
    assert links.tolist() == [1] and times.tolist() == [1.0]


def test_a_shape_crossing_part_of_a_class_splits_it():
    classes = LinkClasses([10.0, 4.0, 4.0])
    classes.add([0, 1, 2], [1.0, 1.0, 1.0])
    # Link 1 is crossed by the new shape and links 0 and 2 are not: 1 leaves; 2 now leads 0 and 2.
    assert classes.add([1], [1.0]) == [(1, [0, 1, 2])]
    assert [classes.rep(x) for x in range(3)] == [2, 1, 2]


def test_links_crossed_a_different_number_of_times_are_not_alike():
    classes = LinkClasses([10.0, 4.0])
    classes.add([0, 1], [2.0, 1.0])
    assert [classes.rep(x) for x in range(2)] == [0, 1]
    classes = LinkClasses([10.0, 4.0])
    classes.add([0, 1], [1.0, 1.0])
    assert classes.add([0, 1], [1.0, 3.0]) == [(1, [0, 1])]
    assert [classes.rep(x) for x in range(2)] == [0, 1]


def simulate(capacity, starts, merge, cut=None):
    """Each (time, route, nbytes) started; `cut` = (time, link, GB/s) changes a capacity. Returns
    the arrivals, the links' busy time and bytes, the divisions and the pairs they saw."""
    env = simpy.Environment()
    net = FluidNetwork(env, capacity, merge_links=merge)
    arrived = [None] * len(starts)

    def one(i, at, route, nbytes):
        yield env.timeout(at)
        yield net.transfer(route, nbytes)
        arrived[i] = env.now

    def change(at, link, bw):
        yield env.timeout(at)
        net.set_capacity(link, bw)

    for i, (at, route, nbytes) in enumerate(starts):
        env.process(one(i, at, route, nbytes))
    if cut is not None:
        env.process(change(*cut))
    env.run(until=10_000)
    return arrived, net.busy_us.tolist(), net.bytes_on, net.n_divisions, net.n_pairs


def test_a_chain_of_links_is_divided_as_its_tightest_link_alone():
    # Two transfers over the chain 0-1-2 (link 1 the tightest, 5 GB/s), one more over 2 alone.
    starts = [(0, [0, 1, 2], 1e6), (0, [0, 1, 2], 1e6), (30, [2], 1e5)]
    merged, whole = simulate([20.0, 5.0, 8.0], starts, True), simulate([20.0, 5.0, 8.0], starts, False)
    assert merged[:4] == whole[:4]
    # Until the third starts the division sees one link per transfer, then links 0-1 and 2 apart.
    assert merged[4] < whole[4]
    assert merged[0] == [pytest.approx(400.0), pytest.approx(400.0), pytest.approx(30 + 1e5 / 3e3)]


def test_a_shape_with_nothing_to_send_still_splits_the_links_it_crosses():
    # A and B cross links 0-1 (link 1 the tighter): the division sees link 1 alone. At 5 us a transfer
    # of no bytes over link 0 splits the two; A arrives at 40 us and the division then must count
    # link 0 again, or link 0 would look idle from there while B still crosses it until 220 us.
    starts = [(0, [0, 1], 1e5), (0, [0, 1], 1e6), (5, [0], 0.0)]
    merged, whole = simulate([10.0, 5.0], starts, True), simulate([10.0, 5.0], starts, False)
    assert merged[0] == whole[0] == [pytest.approx(40.0), pytest.approx(220.0), 5]
    assert merged[1][:2] == pytest.approx(whole[1][:2]) == [220.0, 220.0]


routes = st.lists(st.integers(0, 5), min_size=1, max_size=5)
starts = st.lists(st.tuples(st.floats(0, 200), routes, st.one_of(st.just(0.0), st.floats(1e3, 1e6))),
                  min_size=1, max_size=12)
capacities = st.lists(st.sampled_from([2.0, 5.0, 10.0, 10.0, 40.0]), min_size=6, max_size=6)


@settings(max_examples=150, deadline=None)
@given(capacities, starts, st.one_of(st.none(), st.tuples(st.floats(0, 300), st.integers(0, 5),
                                                          st.sampled_from([0.0, 1.0, 20.0]))))
# A capacity change lays the merged rows out again, closing holes the other run keeps: the pairs
# the divisions see are those of the transfers moving, holes left out.
@example([2.0] * 6, [(0.0, [0], 0.0), (0.0, [0], 1000.0), (0.0, [0], 1667.0), (0.0, [0], 1667.0),
                     (0.0, [0], 1667.0), (1.0, [0], 1000.0), (4.0, [0], 1000.0)], (3.0, 0, 1.0))
def test_merging_links_changes_no_arrival_and_no_links_account(capacity, items, cut):
    # Routes over six links (some crossed twice), started at random times, some with nothing to send,
    # some with a capacity changed on the way: every arrival, every link's busy time and bytes, and the number of
    # divisions are those of the division that sees every link.
    merged, whole = simulate(capacity, items, True, cut), simulate(capacity, items, False, cut)
    assert merged[0] == whole[0]
    assert merged[1] == pytest.approx(whole[1], rel=1e-12, abs=1e-9)
    assert merged[2] == whole[2]
    assert merged[3] == whole[3]
    assert merged[4] <= whole[4]
