"""The DES fabric (nicksim/model/fabric.py): every directed link, and routes that share them."""
import pytest

from nicksim.errors import UsageError
from nicksim.job import JobSpec, load_job
from nicksim.model.fabric import build_fabric, net_route, node_route
from nicksim.model.flows import max_min_rates
from nicksim.params import read_params


def job_of(system="dgx-h100", nodes=1, **spec):
    return load_job(JobSpec(system=system, nodes=nodes, **spec), read_params({}))


def bottleneck(fabric, route):
    return min(fabric.links[i].bw_gbps for i in route)


def test_every_link_of_every_node_copy_and_every_cable_both_ways():
    job = job_of(nodes=2)
    fabric = build_fabric(job.cluster)
    per_node = sum(len(node.links) for node in job.paths.system.nodes)
    assert fabric.per_node == per_node
    assert len(fabric.links) == 2 * per_node + 2 * job.cluster.graph.number_of_edges()
    assert len({link.name for link in fabric.links}) == len(fabric.links)


def test_gpu_to_gpu_crosses_the_nvswitch_at_nvlink_speed():
    job = job_of()
    fabric = build_fabric(job.cluster)
    s = job.paths.system
    route = node_route(fabric, 0, s.gpu_by_rank(0), s.gpu_by_rank(1))
    names = [fabric.links[i].name for i in route]
    assert any("NVS/0" in n for n in names)
    assert bottleneck(fabric, route) == pytest.approx(18 * 20.6, rel=1e-6)  # 18 NVLinks x SM90_NVLINK_BW


def test_across_nodes_the_pcie_switch_is_the_bottleneck_and_the_leaf_adds_its_latency():
    job = job_of(nodes=2)
    fabric = build_fabric(job.cluster)
    route = net_route(fabric, (0, 0, 0), (1, 0, 0))
    kinds = {fabric.links[i].kind: fabric.links[i].bw_gbps for i in route}
    assert kinds["NET"] == pytest.approx(50.0) and kinds["CABLE"] == pytest.approx(50.0)  # 400 Gb/s NIC
    assert bottleneck(fabric, route) == pytest.approx(48.0)  # PCIe Gen5 x16 as NCCL rates it
    names = [fabric.links[i].name for i in route]
    assert names[0].startswith("node0:GPU/0") and names[-1].endswith("->GPU/0") and names[-1].startswith("node1:")
    assert sum(fabric.links[i].lat_us for i in route) > 0.0


def test_an_oversubscribed_spine_halves_what_crosses_it():
    job = job_of(nodes=2, hosts_per_leaf=1, oversubscription=2.0)
    fabric = build_fabric(job.cluster)
    route = net_route(fabric, (0, 0, 0), (1, 0, 0))
    assert any("spine" in fabric.links[i].name for i in route)
    assert bottleneck(fabric, route) == pytest.approx(25.0)


def test_gpus_behind_one_socket_link_share_it():
    # 8 RTX 4090: GPUs 4-7 reach CPU 0 over the one inter-socket link, so two of them get half each.
    job = job_of("pcie-8x-rtx4090")
    fabric = build_fabric(job.cluster)
    s = job.paths.system
    cpu0 = s.of_kind("CPU")[0]
    routes = [node_route(fabric, 0, s.gpu_by_rank(r), cpu0) for r in (4, 5)]
    shared = set(routes[0]) & set(routes[1])
    assert len(shared) == 1
    capacity = [link.bw_gbps for link in fabric.links]
    alone = max_min_rates(routes[:1], capacity)[0]
    both = max_min_rates(routes, capacity)
    assert both[0] == both[1] == pytest.approx(min(alone, fabric.links[shared.pop()].bw_gbps / 2))


def test_a_missing_port_is_one_clear_error():
    job = job_of(nodes=2)
    fabric = build_fabric(job.cluster)
    with pytest.raises(UsageError, match="NIC port 9 of node 0"):
        net_route(fabric, (0, 0, 9), (1, 0, 0))
