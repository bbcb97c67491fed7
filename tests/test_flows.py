"""Max-min fair sharing of links (nicksim/model/flows.py)."""
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from nicksim.model.flows import max_min_rates


def test_two_transfers_on_one_link_get_half_each():
    assert max_min_rates([[0], [0]], [10.0]) == [5.0, 5.0]


def test_the_bottleneck_is_where_it_really_is():
    # B and C share the 4 GB/s link: 2 each; A then takes what B leaves on the 10 GB/s link.
    assert max_min_rates([[0], [0, 1], [1]], [10.0, 4.0]) == [8.0, 2.0, 2.0]


def test_a_link_crossed_twice_carries_the_transfer_twice():
    assert max_min_rates([[0, 0], [0]], [9.0]) == [3.0, 3.0]


def test_a_dead_link_stops_only_what_crosses_it():
    assert max_min_rates([[0, 1], [1]], [0.0, 6.0]) == [0.0, 6.0]


def test_a_copy_inside_a_gpu_is_not_limited():
    assert max_min_rates([[], [0]], [3.0]) == [math.inf, 3.0]


routes = st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=4), min_size=1, max_size=8)
capacities = st.lists(st.floats(0.5, 100.0), min_size=6, max_size=6)


@settings(max_examples=300, deadline=None)
@given(routes, capacities)
def test_max_min_fairness_holds(flows, capacity):
    rates = max_min_rates(flows, capacity)
    load = [0.0] * len(capacity)
    for route, rate in zip(flows, rates):
        for link in route:
            load[link] += rate
    for link, cap in enumerate(capacity):
        assert load[link] <= cap * (1 + 1e-6)  # no link carries more than it can
    for route, rate in zip(flows, rates):
        # Each transfer crosses a full link on which nobody runs faster (else it could grow).
        assert any(load[link] >= cap_ * (1 - 1e-6) and all(r <= rate * (1 + 1e-6)
                                                           for other, r in zip(flows, rates) if link in other)
                   for link, cap_ in ((l, capacity[l]) for l in route))


def test_a_shared_scratch_changes_nothing_and_is_left_as_given():
    # The network reuses one link-numbering scratch over thousands of divisions: each division must
    # give what a fresh one gives (rates and busy links, as fabric link ids) and leave it all -1.
    import numpy as np

    from nicksim.model.flows import fair_rates_flat
    capacity = np.array([10.0, 4.0, 7.0, 1.0, 3.0, 9.0, 2.0, 5.0])
    scratch = np.full(capacity.size, -1, dtype=np.int64)
    for links, times, sizes, skip in (([6, 1, 1, 7], [1.0, 1.0, 2.0, 1.0], [2, 1, 1], [False, False, False]),
                                      ([5, 3, 5, 0, 3], [1.0, 3.0, 1.0, 1.0, 1.0], [2, 2, 1], [False, True, False]),
                                      ([2], [1.0], [1], [False])):
        args = (np.array(links), np.array(times), np.array(sizes), capacity, np.array(skip))
        fresh_rates, fresh_busy = fair_rates_flat(*args)
        rates, busy = fair_rates_flat(*args, scratch)
        assert rates.tolist() == fresh_rates.tolist()
        assert sorted(busy.tolist()) == sorted(fresh_busy.tolist())
        assert set(busy.tolist()) <= set(links)
        assert (scratch == -1).all()
    # Transfer 0 crosses link 6 (2 GB/s) and link 1 (4 GB/s) once, transfer 1 link 1 twice: link 1
    # fills first, at 3 x 4/3, before link 6 would at 2; both keep 4/3.
    rates, busy = fair_rates_flat(np.array([6, 1, 1]), np.array([1.0, 1.0, 2.0]), np.array([2, 1]), capacity,
                                  scratch=scratch)
    assert rates.tolist() == [4 / 3, 4 / 3]
    assert sorted(busy.tolist()) == [1, 6]


def test_a_reused_workspace_gives_what_fresh_arrays_give():
    # The network keeps one Workspace for all its divisions, big ones and small ones in any order:
    # what an earlier division left in it must never show in a later one.
    import numpy as np

    from nicksim.model.flows import Workspace, fair_rates_flat
    rng = np.random.default_rng(7)
    capacity = rng.uniform(0.5, 50.0, 64)
    capacity[[3, 17]] = 0.0  # dead links: their transfers never move
    work = Workspace()
    for n in [40, 3, 120, 1, 0, 77, 5, 200, 2]:
        sizes = rng.integers(0, 6, n)
        links = np.concatenate([rng.choice(64, k, replace=False) for k in sizes]) if n else np.zeros(0, np.int64)
        times = rng.integers(1, 3, links.size).astype(float)
        skip = rng.random(n) < 0.2
        args = (links, times, sizes, capacity, skip)
        fresh_rates, fresh_busy = fair_rates_flat(*args)
        rates, busy = fair_rates_flat(*args, None, work)
        assert rates.tolist() == fresh_rates.tolist()
        assert sorted(busy.tolist()) == sorted(fresh_busy.tolist())
    assert work.pairs.shape[1] >= 200  # grown to the largest division and kept
