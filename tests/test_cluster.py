"""The inter-node fabric graph: rails, leaves, spines, oversubscription."""
import networkx as nx
import pytest

from conftest import build
from nicksim.graph.cluster import ClusterSpec, build_cluster, fabric_route
from nicksim.errors import UsageError
from nicksim.topology.hardware import fabric


def cluster(nodes, **kw):
    system, paths = build("dgx-h100", nodes=nodes)
    return build_cluster(system, paths, ClusterSpec(nodes=nodes, fabric=fabric("ib"), **kw))


def test_rail_optimized_two_nodes():
    c = cluster(2)
    assert c.nranks == 16 and c.leaves == 8
    same_rail = fabric_route(c, (0, 3), (1, 3))
    assert same_rail.switches == 1 and same_rail.bw_gbps == pytest.approx(50.0)
    cross_rail = fabric_route(c, (0, 3), (1, 4))
    assert cross_rail.switches == 3  # leaf, spine, leaf
    assert cross_rail.lat_us > same_rail.lat_us


def test_not_rail_optimized_shares_leaves():
    c = cluster(2, rail_optimized=False)
    assert c.leaves == 1 and fabric_route(c, (0, 3), (1, 4)).switches == 1


def test_oversubscription_divides_uplinks():
    full = cluster(4, hosts_per_leaf=2)
    half = cluster(4, hosts_per_leaf=2, oversubscription=2.0)
    a, b = fabric_route(full, (0, 0), (3, 0)), fabric_route(half, (0, 0), (3, 0))
    assert a.switches == b.switches == 3
    assert b.bw_gbps == pytest.approx(a.bw_gbps / 2)
    # Inside one leaf nothing changes.
    assert fabric_route(half, (0, 0), (1, 0)).bw_gbps == pytest.approx(50.0)


def test_every_nic_reaches_every_nic():
    c = cluster(64)
    assert nx.is_connected(c.graph)
    assert c.graph.number_of_nodes() == 64 * 8 + c.leaves + c.spines


def test_single_node_has_no_switches():
    c = cluster(1)
    assert c.leaves == c.spines == 0 and c.graph.number_of_edges() == 0


@pytest.mark.parametrize("spec", [ClusterSpec(nodes=0), ClusterSpec(nodes=2, oversubscription=0.5),
                                  ClusterSpec(nodes=2, hosts_per_leaf=0)])
def test_bad_specs(spec):
    system, paths = build("dgx-h100")
    with pytest.raises(UsageError):
        build_cluster(system, paths, spec)


def test_nvl72_ports_are_distinct_although_net_devs_repeat_per_tray():
    system, paths = build("gb200-nvl72", nodes=2)
    c = build_cluster(system, paths, ClusterSpec(nodes=2, fabric=fabric("ib")))
    nics = [n for n, data in c.graph.nodes(data=True) if data["kind"] == "nic"]
    assert len(nics) == 2 * 72 and c.leaves == 72
    assert fabric_route(c, (0, 71), (1, 71)).switches == 1


def test_routes_between_leaves_take_the_destinations_spine():
    # D-mod-K (InfiniBand ftree routing): the spine is the destination's position under its leaf
    # modulo the spines, so the two nodes under leaf 1 of rail 0 come down different spines, and
    # every source reaches one destination through the same spine.
    c = cluster(4, hosts_per_leaf=2)
    assert c.spines == 2
    spine = lambda src, dst: next(h for h in fabric_route(c, src, dst).nodes if h[0] == "spine")  # noqa: E731
    assert spine((0, 0), (2, 0)) != spine((0, 0), (3, 0))
    assert spine((0, 0), (2, 0)) == spine((1, 0), (2, 0)) == spine((1, 5), (2, 0))
    assert {spine((0, 0), (d, 0)) for d in (2, 3)} == {("spine", 0), ("spine", 1)}
