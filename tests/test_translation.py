"""Point-to-point calls run by the first block of nodes for every block (nicksim/model/translation.py)."""
import numpy as np
import pytest

from nicksim.calls import call_for_size
from nicksim.job import JobSpec, load_job
from nicksim.model.engine import des_setup, simulate
from nicksim.model.fabric import build_fabric
from nicksim.model.network import FluidNetwork
from nicksim.model.routes import Router
from nicksim.model.symmetry import Collapse
from nicksim.model import engine, translation
from nicksim.model.translation import NoTranslation, Translation, programs_shift, transfers_key, transfers_shift
from nicksim.params import read_params
from nicksim.plan.build import call_plan, job_programs
from nicksim.plan.p2p import p2p_setup

MiB = 1 << 20


def job_of(nodes, env=None, **spec):
    return load_job(JobSpec(system="dgx-h100", nodes=nodes, nccl_version="2.30", **spec), read_params(env or {}))


def test_a_shift_by_a_leafs_nodes_maps_every_link_onto_one_like_it():
    job = job_of(4, hosts_per_leaf=2)
    fabric = build_fabric(job.cluster)
    router = Router(job, fabric, "ring", 2)
    shift = Translation(fabric, router, 2)
    names = [link.name for link in fabric.links]
    image = lambda name: names[int(shift.image([names.index(name)], 1)[0])]  # noqa: E731
    assert image("nic(0,0)->leaf(0,0)") == "nic(2,0)->leaf(0,1)"
    assert image("leaf(3,1)->spine(1)") == "leaf(3,0)->spine(1)"
    assert sorted(shift.perm.tolist()) == list(range(router.n_links))
    # Two shifts by two of four nodes bring every link back; a rank's CTA link goes to the rank 16 on.
    assert shift.image(range(router.n_links), 2).tolist() == list(range(router.n_links))
    assert shift.image([router.cta(3, 1)], 1).tolist() == [router.cta(19, 1)]
    # A leaf's trunk (its cables to every spine as one link) goes to the image leaf's, up to up.
    trunk = {(t.leaf, t.up): len(fabric.links) + i for i, t in enumerate(fabric.trunks)}
    assert len(trunk) == 2 * fabric.cluster.leaves
    assert shift.image([trunk[(("leaf", 1, 1), True)]], 1).tolist() == [trunk[(("leaf", 1, 0), True)]]
    assert shift.image([trunk[(("leaf", 0, 0), False)]], 1).tolist() == [trunk[(("leaf", 0, 1), False)]]


def test_a_shift_that_splits_a_leaf_is_no_symmetry():
    job = job_of(4, hosts_per_leaf=2)
    fabric = build_fabric(job.cluster)
    with pytest.raises(NoTranslation):
        Translation(fabric, Router(job, fabric, "ring", 2), 1)


def test_alltoall_and_sendrecv_programs_look_the_same_a_node_on():
    job = job_of(4)
    for collective in ("alltoall", "sendrecv"):
        call = call_for_size(collective, 16 * MiB, "float", "sum", 0, job.nranks)
        programs = job_programs(job, call_plan(job, call))
        assert programs_shift(programs, 8, job.nranks) and programs_shift(programs, 16, job.nranks)
        assert not programs_shift(programs, 3, job.nranks)  # local ranks do not look alike
        # Take one rank's programs away: the shift no longer holds.
        assert not programs_shift({r: p for r, p in programs.items() if r != 5}, 8, job.nranks)
        # Asked of the transfers the programs are built from, the answer is the same.
        setup = p2p_setup(job)
        keys = [transfers_key(setup.transfers(call, r), r, job.nranks) for r in range(job.nranks)]
        for shift in (8, 16, 3, 4, 12):
            assert transfers_shift(keys, shift) == programs_shift(programs, shift, job.nranks), (collective, shift)


P2P_CASES = [
    ("alltoall", 4, {}, {"hosts_per_leaf": 2}, 2, (1 * MiB, 64 * MiB)),             # one leaf's nodes
    ("alltoall", 8, {}, {"hosts_per_leaf": 4, "oversubscription": 2.0}, 4, (4 * MiB,)),  # across a 2:1 spine
    ("alltoall", 4, {"NCCL_IB_QPS_PER_CONNECTION": "4"}, {"fabric": "roce", "hosts_per_leaf": 2}, 2, (4 * MiB,)),
    ("sendrecv", 4, {}, {"hosts_per_leaf": 2}, 2, (1 * MiB, 64 * MiB)),
    ("alltoall", 4, {}, {}, 1, (4 * MiB,)),                                             # one leaf: one class
]


@pytest.mark.parametrize("collective, nodes, env, spec, classes, sizes", P2P_CASES)
def test_point_to_point_run_by_one_block_gives_the_every_node_answer(collective, nodes, env, spec, classes, sizes):
    # The first block's ranks run for every block: every transfer's rate, every link's bytes and
    # busy time are the whole run's (max-min gives the shifted transfers the same rates).
    job = job_of(nodes, env, **spec)
    setup = des_setup(job)
    for nbytes in sizes:
        call = call_for_size(collective, nbytes, "float", "sum", 0, job.nranks)
        shifted, full = simulate(setup, call), simulate(setup, call, collapse=False)
        assert (shifted.n_node_classes, full.n_node_classes) == (classes, nodes)
        assert shifted.n_events * nodes == pytest.approx(full.n_events * classes, rel=0.1)
        assert shifted.time_us == pytest.approx(full.time_us, rel=1e-9), nbytes
        assert shifted.link_nbytes.keys() == full.link_nbytes.keys()
        for link, moved in full.link_nbytes.items():
            assert shifted.link_nbytes[link] == pytest.approx(moved, rel=1e-9), link
            assert shifted.link_busy_us[link] == pytest.approx(full.link_busy_us[link], rel=1e-9, abs=1e-9), link


def test_a_straggler_keeps_every_node_simulated():
    job = job_of(4, hosts_per_leaf=2)
    call = call_for_size("alltoall", 4 * MiB, "float", "sum", 0, job.nranks)
    assert simulate(des_setup(job, stragglers=["9:20us"]), call).n_node_classes == 4


@pytest.mark.parametrize("nodes, spec", [(4, {"hosts_per_leaf": 2}),
                                         (8, {"hosts_per_leaf": 2, "rail_optimized": False}),
                                         (6, {"hosts_per_leaf": 3, "fabric": "roce"})])
def test_every_route_shifted_is_the_shifted_ranks_route(nodes, spec):
    # What lets the engine take a class-mate's route as its representative's image without working
    # it out: the router's routes commute with the shift, point-to-point (NICs picked per peer) or not.
    job = job_of(nodes, **spec)
    fabric = build_fabric(job.cluster)
    for graph in ("p2p", "ring"):
        router = Router(job, fabric, graph, 2)
        shift = Translation(fabric, router, spec["hosts_per_leaf"])
        moved = shift.nodes_shift * router.per_node
        image = lambda links: tuple(shift.image(list(links), 1).tolist())  # noqa: E731
        for channel in range(2):
            for src in range(job.nranks):
                later = lambda rank: (rank + moved) % job.nranks  # noqa: E731
                assert image([router.cta(src, channel), router.net_conn(src, channel, 1)]) == \
                    (router.cta(later(src), channel), router.net_conn(later(src), channel, 1))
                for dst in range(job.nranks):
                    if src // router.per_node == dst // router.per_node:
                        shifted = router.peer(channel, later(src), later(dst))[0]
                        assert image(router.peer(channel, src, dst)[0]) == shifted
                        continue
                    head, cables, tail = router.net_parts(channel, src, dst)
                    assert (image(head), tuple(map(image, cables)), image(tail)) == \
                        router.net_parts(channel, later(src), later(dst))


def test_a_port_that_comes_down_another_spine_shifted_is_no_symmetry(monkeypatch):
    # D-mod-K by a position the shift does not keep: the shifted route takes another spine, so the
    # call runs every node, and its answer is the whole run's (RoCE: one queue pair, one route; over
    # InfiniBand adaptive routing spreads every connection over all spines alike, P2P_CASES).
    job = job_of(4, fabric="roce", hosts_per_leaf=2)
    call = call_for_size("alltoall", 4 * MiB, "float", "sum", 0, job.nranks)
    full = simulate(des_setup(job), call, collapse=False)
    monkeypatch.setattr(translation, "spine_position", lambda cluster, dst: dst[0] // 2 + dst[0])
    with pytest.raises(NoTranslation, match="another spine"):
        Translation(build_fabric(job.cluster), Router(job, build_fabric(job.cluster), "p2p", 2), 2)
    every_node = simulate(des_setup(job), call)
    assert every_node.n_node_classes == 4
    assert every_node.time_us == full.time_us and every_node.link_nbytes == full.link_nbytes


@pytest.mark.parametrize("env, spec, shares", [
    ({}, {"nodes": 8, "hosts_per_leaf": 2}, False),  # InfiniBand, adaptive routing: over the trunks
    ({"NCCL_IB_QPS_PER_CONNECTION": "4"}, {"nodes": 4, "hosts_per_leaf": 2, "fabric": "roce"}, True)])  # ECMP
def test_a_class_worked_out_on_arrays_is_what_reducing_every_mates_route_gives(monkeypatch, env, spec, shares):
    # The class-mates' routes as images, their twins' copies left out on arrays, against every
    # mate's route listed and Mirrors.reduce'd: the same links in the same order, bit for bit.
    job = job_of(spec.pop("nodes"), env, **spec)
    call = call_for_size("alltoall", 4 * MiB, "float", "sum", 0, job.nranks)
    on_arrays = simulate(des_setup(job), call)
    seen = []
    registered = {}  # every copy the arrays' way hands to the network, so far

    def recording(self, at, of):
        registered.update(zip(at.tolist(), of.tolist()))
        real_mirror_arrays(self, at, of)

    def hand_over(self, copies):  # the reference's copies, to the network but not to `registered`
        real_mirror_arrays(self.net, np.array(list(copies), dtype=np.int64),
                           np.array(list(copies.values()), dtype=np.int64))

    def listed_and_reduced(self, own, short_own):
        links, short = [], {}
        for block in range(job.nodes // self.translation.nodes_shift):
            more, less = self._shifted(own, short_own, block * self.collapse.shift)
            links += more
            for x, d in less.items():
                short[x] = short.get(x, 0.0) + d
        return self.mirrors.reduce(links, short)

    def checked_shifted_class(self, own, short_own):
        links, short, copies = listed_and_reduced(self, own, short_own)
        same = (links, short) == real_shifted_class(self, own, short_own) and copies.items() <= registered.items()
        hand_over(self, copies)
        seen.append((same, bool(short)))
        return links, short

    def checked_class_route(self, parts):
        own = tuple(link for part in parts for link in part)
        links, short, copies = listed_and_reduced(self, own, {})
        same = links == real_class_route(self, parts) and copies.items() <= registered.items()
        hand_over(self, copies)
        seen.append((same, bool(short)))
        return links

    real_shifted_class, real_class_route = engine._Sim._shifted_class, engine._Sim._class_route
    real_mirror_arrays = FluidNetwork.mirror_arrays
    monkeypatch.setattr(FluidNetwork, "mirror_arrays", recording)
    monkeypatch.setattr(engine._Sim, "_shifted_class", checked_shifted_class)
    monkeypatch.setattr(engine._Sim, "_class_route", checked_class_route)
    reduced = simulate(des_setup(job), call)
    assert on_arrays.n_node_classes == reduced.n_node_classes < job.nodes
    assert seen and all(same for same, _ in seen)
    assert any(spread for _, spread in seen) == shares  # links crossed by a share of the bytes
    assert (on_arrays.time_us, on_arrays.link_nbytes, on_arrays.link_busy_us) == \
        (reduced.time_us, reduced.link_nbytes, reduced.link_busy_us)
    # A first-block rank's mates are 1, 2, ... blocks on, in that order.
    assert Collapse.shifted(8, 8, 2).members(3, 0) == (3, 19, 35, 51)
