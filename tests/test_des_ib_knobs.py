"""NCCL's IB transport knobs in the DES (nicksim/model/ib.py): queue pairs per connection, how data is
split over them, adaptive routing, and the QP timeout that turns a dead link into a completion error."""
from collections import Counter
from dataclasses import replace
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nicksim.calls import call_for_size
from nicksim.graph.cluster import fabric_route, fabric_routes
from nicksim.job import JobSpec, load_job
from nicksim.model import engine
from nicksim.model.engine import des_setup, simulate
from nicksim.model.ib import IbTransport, ib_transport
from nicksim.params import read_params

from conftest import run_cli

MiB = 1 << 20
# Two leaves of four nodes each (one leaf per rail and group), four spines, uplinks at half the downlinks:
# every byte between the groups crosses an oversubscribed spine.
SPINY = {"nodes": 8, "hosts_per_leaf": 4, "oversubscription": 2.0, "gpus_per_node": 2, "nics_per_node": 2}


def job_of(fabric="roce", knobs=(), **spec):
    spec = {**SPINY, **spec}
    return load_job(JobSpec(system="dgx-h100", nccl_version="2.30", fabric=fabric, **spec),
                    read_params({}, ["NCCL_ALGO=Ring", "NCCL_PROTO=Simple", *knobs]))


def run(job, nbytes=64 * MiB, collective="all_reduce", **setup):
    return simulate(des_setup(job, **setup), call_for_size(collective, nbytes, "float", "sum", 0, job.nranks))


def spine_bytes(result) -> dict[str, float]:
    """Bytes on the cables between leaves and spines, by cable."""
    return {name: n for name, n in result.link_nbytes.items() if "spine" in name and n > 0}


# --- the settings as read -------------------------------------------------------------------------

def test_the_knobs_are_read_with_nccls_defaults_per_fabric():
    ib, roce, tcp = (ib_transport(job_of(fabric)) for fabric in ("ib", "roce", "tcp"))
    assert (ib.qps, ib.split_data, ib.timeout, ib.retry_cnt) == (1, False, 20, 7)
    # NCCL_IB_ADAPTIVE_ROUTING=-2: on where the link layer is InfiniBand, off on RoCE (ncclIbInit).
    assert ib.adaptive and not roce.adaptive
    assert ib.verbs and roce.verbs and not tcp.verbs and not tcp.multipath and tcp.retry_exceeded_us is None
    forced = ib_transport(job_of("roce", ["NCCL_IB_ADAPTIVE_ROUTING=1", "NCCL_IB_QPS_PER_CONNECTION=4",
                                          "NCCL_IB_SPLIT_DATA_ON_QPS=1", "NCCL_IB_TIMEOUT=14", "NCCL_IB_RETRY_CNT=3"]))
    assert (forced.adaptive, forced.qps, forced.split_data, forced.timeout, forced.retry_cnt) == (True, 4, True, 14, 3)
    assert not ib_transport(job_of("ib", ["NCCL_IB_ADAPTIVE_ROUTING=0"])).adaptive


def test_how_a_connections_bytes_spread_over_the_spine_routes():
    # RoCE without adaptive routing: ECMP puts QP q on route q mod routes.
    split = IbTransport(verbs=True, ethernet=True, qps=4, split_data=True)
    assert split.path_weights(4) == (0.25,) * 4
    assert split.path_weights(3) == (0.5, 0.25, 0.25)  # QP 3 wraps onto the first route
    assert split.path_weights(1) == (1.0,)
    rr = IbTransport(verbs=True, ethernet=True, qps=4, split_data=False)
    assert rr.path_weights(4, 0, 1) == (1.0, 0.0, 0.0, 0.0)  # one message, one QP
    assert rr.path_weights(4, 5, 1) == (0.0, 1.0, 0.0, 0.0)  # the sixth message is on QP 1
    assert rr.path_weights(4, 2, 4) == (0.25,) * 4  # four messages, one per QP
    assert rr.path_weights(4, 3, 2) == (0.5, 0.0, 0.0, 0.5)
    # One QP, or InfiniBand's destination-LID routing: every QP on the one route.
    assert IbTransport(verbs=True, ethernet=True, qps=1).path_weights(4) == (1.0, 0.0, 0.0, 0.0)
    assert IbTransport(verbs=True, ethernet=False, qps=4, split_data=True).path_weights(4) == (1.0, 0.0, 0.0, 0.0)
    # Adaptive routing sprays evenly over every route, whatever the QPs.
    assert IbTransport(verbs=True, adaptive=True, qps=3).path_weights(4) == (0.25,) * 4
    # Not NCCL's IB transport (sockets, a plugin): nothing moves.
    assert IbTransport(verbs=False, adaptive=True, qps=4, ethernet=True).path_weights(4) == (1.0, 0.0, 0.0, 0.0)


def test_the_spine_routes_between_two_leaves_start_with_the_d_mod_k_one():
    job = job_of("roce")
    routes = fabric_routes(job.cluster, (3, 0), (4, 0))  # node 4 is the first under the second leaf
    assert [next(hop for hop in r.nodes if hop[0] == "spine") for r in routes] == [("spine", s) for s in range(4)]
    assert routes[0] == fabric_route(job.cluster, (3, 0), (4, 0))
    assert {r.lat_us for r in routes} == {routes[0].lat_us}
    assert [next(hop for hop in r.nodes if hop[0] == "spine")[1] for r in fabric_routes(job.cluster, (0, 0), (6, 0))] \
        == [2, 3, 0, 1]
    assert len(fabric_routes(job.cluster, (0, 0), (1, 0))) == 1  # one leaf: no spine


def _spread_whole_paths(paths, weights, short):
    """The definition _spread keeps: every link of every route with a share, in the routes' order."""
    share, times = {}, {}
    for path, weight in zip(paths, weights):
        if weight <= 0:
            continue
        for link, n in Counter(path).items():
            share[link] = share.get(link, 0.0) + weight * n
            times[link] = max(times.get(link, 0), n)
    links = []
    for link, carried in share.items():
        links += [link] * times[link]
        if times[link] - carried > 1e-9:
            short[link] = short.get(link, 0.0) + times[link] - carried
    return links


_LEG = st.lists(st.integers(0, 9), max_size=4)  # node links (ids below the cables')
_CABLES = st.lists(st.lists(st.integers(10, 16), min_size=1, max_size=5), min_size=1, max_size=5)


@settings(max_examples=300, deadline=None)
@given(_LEG, _CABLES, _LEG.map(lambda leg: [20 + link for link in leg]), st.data())
def test_a_spread_over_its_parts_lists_what_the_whole_routes_list_in_the_same_order(head, cables, tail, data):
    # the head and tail are on every route, so they are counted once; the order and the float sums
    # must be the whole routes' to the last bit (the DES's answers are compared byte for byte)
    from nicksim.model.engine import _spread
    weights = tuple(data.draw(st.lists(st.sampled_from([0.0, 0.125, 0.25, 1 / 3, 0.5, 1.0]),
                                       min_size=len(cables), max_size=len(cables))))
    short, expected_short = {}, {}
    got = _spread(tuple(head), tuple(map(tuple, cables)), tuple(tail), weights, short)
    expected = _spread_whole_paths([tuple(head) + tuple(c) + tuple(tail) for c in cables], weights, expected_short)
    assert got == expected
    assert list(short.items()) == list(expected_short.items())


# --- NCCL_IB_QPS_PER_CONNECTION -------------------------------------------------------------------

def test_more_queue_pairs_spread_a_roce_connection_over_more_spines_and_speed_it_up():
    # Each leaf-to-spine uplink carries 25 GB/s (the leaf's 4 x 50 GB/s of downlinks, halved, over four
    # spines), half a NIC. One QP: each connection climbs to its destination's D-mod-K spine and that one
    # uplink binds. Four QPs hash onto four spines (ECMP on their UDP source ports): the connection gets
    # four uplinks' worth, and the NIC binds again.
    one = run(job_of("roce"))
    four = run(job_of("roce", ["NCCL_IB_QPS_PER_CONNECTION=4"]))
    assert one.hang is None and four.hang is None
    assert len(spine_bytes(four)) == 4 * len(spine_bytes(one))
    assert sum(spine_bytes(four).values()) == pytest.approx(sum(spine_bytes(one).values()), rel=1e-6)
    assert four.time_us < 0.75 * one.time_us
    two = run(job_of("roce", ["NCCL_IB_QPS_PER_CONNECTION=2"]))
    assert len(spine_bytes(two)) == 2 * len(spine_bytes(one))
    assert four.time_us <= two.time_us < one.time_us


def test_queue_pairs_change_no_route_on_infiniband_without_adaptive_routing():
    # IB switches forward on the destination LID, the same for every QP of a connection.
    knobs = ["NCCL_IB_ADAPTIVE_ROUTING=0"]
    one = run(job_of("ib", knobs))
    four = run(job_of("ib", knobs + ["NCCL_IB_QPS_PER_CONNECTION=4", "NCCL_IB_SPLIT_DATA_ON_QPS=1"]))
    assert spine_bytes(four) == spine_bytes(one)
    assert four.time_us == pytest.approx(one.time_us, rel=1e-9)


def test_queue_pairs_change_nothing_within_a_leaf_or_over_sockets():
    flat = {"hosts_per_leaf": 8}  # one leaf per rail: no spine on any route
    assert run(job_of("roce", **flat)).time_us == \
        run(job_of("roce", ["NCCL_IB_QPS_PER_CONNECTION=4"], **flat)).time_us
    sockets = run(job_of("tcp", ["NCCL_IB_QPS_PER_CONNECTION=4", "NCCL_IB_ADAPTIVE_ROUTING=1"]))
    assert spine_bytes(sockets) == spine_bytes(run(job_of("tcp")))


# --- NCCL_IB_SPLIT_DATA_ON_QPS --------------------------------------------------------------------

def test_split_data_spreads_every_message_where_round_robin_spreads_only_a_stream_of_them():
    knobs = ["NCCL_IB_QPS_PER_CONNECTION=4"]
    # A 2 MiB broadcast over 8 channels: each connection sends one message. Round-robin puts it whole on
    # the first QP, i.e. the D-mod-K route that one QP takes; split mode puts a quarter of it on every
    # route, evenly, and gets there sooner.
    one = run(job_of("roce"), 2 * MiB, "broadcast")
    rr = run(job_of("roce", knobs), 2 * MiB, "broadcast")
    split = run(job_of("roce", knobs + ["NCCL_IB_SPLIT_DATA_ON_QPS=1"]), 2 * MiB, "broadcast")
    assert spine_bytes(rr) == spine_bytes(one)
    assert len(spine_bytes(split)) == 4 * len(spine_bytes(rr))
    per_cable = sorted(spine_bytes(split).values())
    assert per_cable[0] == pytest.approx(per_cable[-1], rel=1e-6)
    assert split.time_us < 0.95 * rr.time_us
    # A large call keeps several messages in flight on every connection: round-robin reaches every QP too,
    # and the two modes come within a few percent of each other.
    rr_big, split_big = run(job_of("roce", knobs)), run(job_of("roce", knobs + ["NCCL_IB_SPLIT_DATA_ON_QPS=1"]))
    assert set(spine_bytes(rr_big)) == set(spine_bytes(split_big))
    assert rr_big.time_us == pytest.approx(split_big.time_us, rel=0.05)


# --- NCCL_IB_ADAPTIVE_ROUTING ---------------------------------------------------------------------

@pytest.mark.parametrize("fabric, knobs", [("ib", []), ("roce", ["NCCL_IB_ADAPTIVE_ROUTING=1"])])
def test_adaptive_routing_sprays_every_flow_over_every_spine(fabric, knobs):
    static = run(job_of(fabric, ["NCCL_IB_ADAPTIVE_ROUTING=0"]))
    ar = run(job_of(fabric, knobs))
    cables = spine_bytes(ar)
    # Every leaf that sends across reaches every spine, each with the same bytes.
    leaves = {name.split("->")[0] for name in cables if name.startswith("leaf")}
    assert len([n for n in cables if n.startswith("leaf")]) == 4 * len(leaves)
    assert min(cables.values()) == pytest.approx(max(cables.values()), rel=1e-6)
    assert len(cables) > len(spine_bytes(static))
    assert ar.time_us < 0.75 * static.time_us
    # Adaptive routing does not wait for queue pairs: one is enough.
    assert run(job_of(fabric, knobs + ["NCCL_IB_QPS_PER_CONNECTION=4"])).time_us == pytest.approx(ar.time_us, rel=1e-6)


@pytest.mark.parametrize("knobs", [["NCCL_IB_QPS_PER_CONNECTION=4"],
                                   ["NCCL_IB_QPS_PER_CONNECTION=3", "NCCL_IB_SPLIT_DATA_ON_QPS=1"],
                                   ["NCCL_IB_ADAPTIVE_ROUTING=1"]])
def test_nodes_collapsed_by_symmetry_still_give_the_full_answer_over_several_spines(knobs):
    job = job_of("roce", knobs, gpus_per_node=1, nics_per_node=1)
    setup = des_setup(job)
    call = call_for_size("all_reduce", 16 * MiB, "float", "sum", 0, job.nranks)
    collapsed, full = simulate(setup, call), simulate(setup, call, collapse=False)
    assert collapsed.n_node_classes < full.n_node_classes == 8
    assert collapsed.time_us == pytest.approx(full.time_us, rel=0.01)
    assert sum(collapsed.link_nbytes.values()) == pytest.approx(sum(full.link_nbytes.values()), rel=1e-6)


def _without_trunks(setup):
    """The same setup with every connection spread over the spine cables one by one."""
    return replace(setup, fabric=replace(setup.fabric, trunks=(), trunk_of=MappingProxyType({})), derived={})


def test_a_leaf_has_a_trunk_each_way_over_its_cables_to_every_spine():
    fabric = des_setup(job_of("ib")).fabric
    names = [link.name for link in fabric.links]
    assert [(t.name, len(t.members)) for t in fabric.trunks[:2]] == [("spines->leaf(0,0)", 4),
                                                                    ("leaf(0,0)->spines", 4)]
    assert {names[x] for x in fabric.trunks[1].members} == {f"leaf(0,0)->spine({k})" for k in range(4)}
    assert set(fabric.trunk_of) == {x for t in fabric.trunks for x in t.members}
    # One node: no switch, no trunk.
    assert des_setup(job_of("ib", nodes=1)).fabric.trunks == ()


@pytest.mark.parametrize("fabric, knobs, collective, collapse", [
    ("ib", [], "all_reduce", True), ("ib", [], "all_reduce", False),
    ("roce", ["NCCL_IB_ADAPTIVE_ROUTING=1"], "all_gather", True), ("ib", [], "alltoall", True),
    ("ib", [], "alltoall", False)])
def test_trunks_give_what_every_spine_cable_at_a_share_gives(monkeypatch, fabric, knobs, collective, collapse):
    # Adaptive routing spreads every connection evenly, so a leaf's S uplinks each carry 1/S of
    # what crosses them together: one link of S times their capacity has the same max-min rates.
    job = job_of(fabric, knobs)
    setup = des_setup(job)
    call = call_for_size(collective, 16 * MiB, "float", "sum", 0, job.nranks)
    crossed = []
    real = engine.trunk_route
    monkeypatch.setattr(engine, "trunk_route", lambda f, cables: crossed.append(cables) or real(f, cables))
    trunked = simulate(setup, call, collapse=collapse)
    assert any(len(cables) == job.cluster.spines == 4 for cables in crossed)
    n_crossed = len(crossed)
    cables = simulate(_without_trunks(setup), call, collapse=collapse)
    assert len(crossed) == n_crossed  # not used without trunks
    assert trunked.time_us == pytest.approx(cables.time_us, rel=1e-9)
    assert trunked.link_nbytes.keys() == cables.link_nbytes.keys()
    assert spine_bytes(trunked)
    for link, moved in cables.link_nbytes.items():
        assert trunked.link_nbytes[link] == pytest.approx(moved, rel=1e-9), link
        assert trunked.link_busy_us[link] == pytest.approx(cables.link_busy_us[link], rel=1e-9, abs=1e-9), link


def test_a_fault_on_a_spine_cable_spreads_over_the_cables_themselves():
    job = job_of("ib")
    call = call_for_size("all_reduce", 16 * MiB, "float", "sum", 0, job.nranks)
    degraded = ["degrade:leaf(0,0)->spine(1):0.02"]
    slowed = simulate(des_setup(job, faults=degraded), call)
    assert slowed.time_us == pytest.approx(simulate(_without_trunks(des_setup(job, faults=degraded)), call).time_us,
                                           rel=1e-12)
    assert slowed.time_us > 2 * run(job, 16 * MiB).time_us


# --- NCCL_IB_TIMEOUT and NCCL_IB_RETRY_CNT --------------------------------------------------------

def _cut(knobs, fabric="ib", timeout_us=1e6, **spec):
    """A ring all_reduce on two nodes whose first NIC port on node 0 loses its link 100 us in."""
    job = job_of(fabric, knobs, **{"nodes": 2, "hosts_per_leaf": 32, **spec})
    return run(job, 64 * MiB, faults=["link-down:nic(0,0)-leaf(0,0)@100us"], timeout_us=timeout_us)


def _first_error(hang):
    return min(hang.net_errors, key=lambda e: (e.time_us, e.rank))


def test_a_dead_link_ends_in_a_retry_exceeded_completion_error_timed_by_the_qp_settings():
    hang = _cut(["NCCL_IB_TIMEOUT=10", "NCCL_IB_RETRY_CNT=7"]).hang
    assert hang is not None and hang.aborted and not hang.watchdog
    # The first connection whose data got stuck on the dead cable (at 100 us, or when its next slice
    # started) errors out (retry_cnt + 1) local ACK timeouts of 4.096 us x 2^10 later, and NCCL aborts there.
    first = _first_error(hang)
    assert first.link in ("nic(0,0)->leaf(0,0)", "leaf(0,0)->nic(0,0)")
    assert first.rank // 2 != first.peer // 2  # a connection between the nodes
    assert 100.0 <= first.stuck_us < 200.0
    wait = 8 * 4.096 * 2 ** 10
    assert first.time_us - first.stuck_us == pytest.approx(wait)
    assert hang.time_us == pytest.approx(first.time_us)
    lines = hang.lines()
    assert "NCCL aborted on a NET/IB completion error" in lines[0]
    assert f"  rank {first.rank}: NET/IB completion error status=12 (retry exceeded) on the connection to rank " \
           f"{first.peer} at {first.time_us / 1e6:.6g} s (NCCL_IB_TIMEOUT=10, NCCL_IB_RETRY_CNT=7" in "\n".join(lines)
    # One more step of the timeout exponent doubles the wait; half the attempts halve it.
    later = _first_error(_cut(["NCCL_IB_TIMEOUT=11", "NCCL_IB_RETRY_CNT=7"]).hang)
    fewer = _first_error(_cut(["NCCL_IB_TIMEOUT=10", "NCCL_IB_RETRY_CNT=3"]).hang)
    assert later.time_us - later.stuck_us == pytest.approx(2 * wait)
    assert fewer.time_us - fewer.stuck_us == pytest.approx(wait / 2)
    assert (later.stuck_us, fewer.stuck_us) == (first.stuck_us, first.stuck_us)


def test_the_error_past_the_watchdog_limit_is_reported_as_what_would_come():
    # NCCL's defaults (20, 7): 8 x 4.096 us x 2^20 = 34.36 s, after this run's 1 s watchdog.
    hang = _cut([]).hang
    assert hang.watchdog and not hang.aborted and hang.time_us == 1e6
    first = _first_error(hang)
    assert first.time_us - first.stuck_us == pytest.approx(8 * 4.096 * 2 ** 20)
    assert f"would come at {first.time_us / 1e6:.6g} s, after the watchdog limit (NCCL_IB_TIMEOUT=20, " \
           "NCCL_IB_RETRY_CNT=7" in "\n".join(hang.lines())
    # Under PyTorch's 600 s watchdog the error comes first and ends the run there.
    assert _cut([], timeout_us=600e6).hang.time_us == pytest.approx(first.time_us)


def test_no_completion_error_over_sockets_or_with_an_infinite_timeout():
    # NCCL_IB_TIMEOUT=0 disables the local ACK timer (IB spec): the QP waits for ever.
    for hang in (_cut(["NCCL_IB_TIMEOUT=10"], fabric="tcp").hang, _cut(["NCCL_IB_TIMEOUT=0"]).hang):
        assert hang is not None and hang.watchdog and not hang.net_errors and hang.stalls
        assert not any("status=12" in line for line in hang.lines())


def test_perf_prints_the_completion_error_after_the_table():
    out = run_cli("perf", "all_reduce", "-b", "64M", "-e", "64M", "--engine", "des", "--nodes", "2",
                  "--fault", "link-down:nic(0,0)->leaf(0,0)@10us", "--env", "NCCL_IB_TIMEOUT=12")
    assert out.returncode == 1, out.stderr
    assert "# nicksim: hang:" in out.stdout and "NCCL aborted on a NET/IB completion error" in out.stdout
    assert "rank 0: NET/IB completion error status=12 (retry exceeded) on the connection to rank 8" in out.stdout
