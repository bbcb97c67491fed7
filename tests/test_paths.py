"""Paths and transport decisions (paths.cc), on catalog systems, env knobs and generated topologies."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import build
from nicksim.constants import MODELLED_VERSIONS, topo_rules
from nicksim.params import read_params
from nicksim.graph.paths import compute_paths, local_net
from nicksim.topology.system import build_system
from nicksim.topology.xml import parse_topo_xml


def net_by_dev(system, dev):
    return next(n for n in system.nets() if system.nodes[n].net.dev == dev)


def test_dgx_h100_paths_and_pxn():
    system, paths = build("dgx-h100", nodes=2)
    g0, g1 = system.gpu_by_rank(0), system.gpu_by_rank(1)
    assert paths.path(g0, g1).type == "NVL" and paths.path(g0, g1).bw_gbps == pytest.approx(370.8)
    assert paths.path(g0, net_by_dev(system, 0)).type == "PIX"
    # NIC 1 sits with GPU 1: GPU 0 reaches it through GPU 1 over NVLink (PXN) instead of through the CPU.
    pxn = paths.path(g0, net_by_dev(system, 1))
    assert pxn.type == "PXN" and system.nodes[pxn.nodes[-4]].kind in ("GPU", "DEV")
    assert paths.gdr_send[(0, net_by_dev(system, 1))].proxy_rank == 1
    _, no_pxn = build("dgx-h100", env={"NCCL_PXN_DISABLE": "1"}, nodes=2)
    assert no_pxn.path(g0, net_by_dev(system, 1)).type == "PHB"
    assert no_pxn.path(g0, net_by_dev(system, 4)).type == "SYS"


def test_dev_nodes_of_2_30_do_not_change_decisions():
    new_sys, new = build("dgx-h100", "2.30", nodes=2)
    old_sys, old = build("dgx-h100", "2.29", nodes=2)
    for a in range(8):
        for b in range(8):
            pa, pb = new.gpu_path(a, b), old.gpu_path(a, b)
            assert (pa.type, pa.bw_gbps) == (pb.type, pb.bw_gbps)
        for dev in range(8):
            na, nb = net_by_dev(new_sys, dev), net_by_dev(old_sys, dev)
            pa, pb = new.path(new_sys.gpu_by_rank(a), na), old.path(old_sys.gpu_by_rank(a), nb)
            assert (pa.type, pa.bw_gbps) == (pb.type, pb.bw_gbps)
    assert new.transports == old.transports


def test_p2p_level_and_disable():
    system, paths = build("dgx-h100")
    assert paths.transports[(0, 1)].detail == "P2P/CUMEM"
    for env in ({"NCCL_P2P_DISABLE": "1"}, {"NCCL_P2P_LEVEL": "LOC"}, {"NCCL_P2P_LEVEL": "0"}):
        _, off = build("dgx-h100", env=env)
        assert off.p2p_level == "LOC"
        assert off.transports[(0, 1)].kind == "SHM"
        assert off.gpu_path(0, 1).type == "PHB"
        # Across sockets the CPU path (SYS, 22 GB/s) is slower than both GPUs' PIX path to a NIC (48):
        # ncclTopoCheckNet sends that traffic over the network instead of SHM, and ncclTopoTrimSystem
        # leaves rank 0 a view of its own socket only, which makes the job "inter" (4 GPUs, 8 ranks).
        assert off.transports[(0, 4)].kind == "NET"
        assert sorted(off.system.nodes[g].gpu.rank for g in off.system.gpus()) == [0, 1, 2, 3]
        assert off.inter and len(off.node_system.gpus()) == 8
    _, shm_off = build("dgx-h100", env={"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"})
    assert shm_off.transports[(0, 1)].kind == "NET"
    assert [shm_off.system.nodes[g].gpu.rank for g in shm_off.system.gpus()] == [0]  # every GPU its own domain


def test_ampere_nvlink_uses_p2p_read():
    _, paths = build("dgx-a100")
    assert paths.transports[(0, 1)].detail == "P2P/CUMEM/read"  # paths.cc: read for SM80 pairs over NVL


def test_pcie_boxes_without_p2p_use_shm():
    system, paths = build("pcie-8x-rtx4090")
    # Each GPU on its own root port: PHB within a socket, SYS (AMD_BW 16) across; P2P level PXB.
    assert paths.gpu_path(0, 1).type == "PHB" and paths.gpu_path(0, 4).type == "SYS"
    assert paths.gpu_path(0, 4).bw_gbps == pytest.approx(16.0)
    assert {t.kind for t in paths.transports.values()} == {"SHM"}
    system, paths = build("pcie-2x-rtx2080ti")
    # One PCIe switch would allow P2P, but the driver reports P2P unsupported: NCCL diverts through the CPU.
    assert paths.transports[(0, 1)].kind == "SHM" and paths.gpu_path(0, 1).type == "PHB"
    assert any("P2P is disabled between connected GPUs" in n for n in paths.notes)


def test_l40s_p2p_under_a_switch_but_not_across():
    _, paths = build("pcie-8x-l40s")
    assert paths.gpu_path(0, 1).type == "PIX" and paths.transports[(0, 1)].kind == "P2P"
    assert paths.transports[(0, 2)].kind == "SHM"


def test_gdr_level_and_ib_disable():
    system, paths = build("dgx-h100", nodes=2)
    assert all(g.enabled for (rank, n), g in paths.gdr_send.items()
               if paths.path(system.gpu_by_rank(rank), n).type == "PIX")
    _, no_gdr = build("dgx-h100", env={"NCCL_NET_GDR_LEVEL": "LOC"}, nodes=2)
    assert not any(g.enabled for g in no_gdr.gdr_send.values())
    assert no_gdr.path(system.gpu_by_rank(0), net_by_dev(system, 0)).type == "PHB"  # bounce through the CPU
    _, sock = build("dgx-h100", env={"NCCL_IB_DISABLE": "1"}, nodes=2)
    assert sock.net_plugin == "Socket" and not any(g.enabled for g in sock.gdr_recv.values())


def test_gb200_nic_over_c2c_is_p2c_with_gdr():
    system, paths = build("gb200-nvl72", nodes=2)
    g0 = system.gpu_by_rank(0)
    n = local_net(paths, 0)
    assert paths.path(g0, n).type == "P2C" and paths.gdr_send[(0, n)].enabled
    old_sys, old = build("gb200-nvl72", "2.26", nodes=2)
    n_old = local_net(old, 0)
    assert old.path(old_sys.gpu_by_rank(0), n_old).type == "PHB"  # no P2C before 2.27


# ---------------------------------------------------------------------------------------------
# Properties over generated topologies

_CPUS = (
    'arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143"',
    'arch="x86_64" vendor="AuthenticAMD" familyid="175" modelid="1"',
    'arch="arm64"',
)
_SPEEDS = ("8.0 GT/s PCIe", "16.0 GT/s PCIe", "32.0 GT/s PCIe")


@st.composite
def topologies(draw):
    counter = iter(range(1, 250))
    cpu_attrs = draw(st.sampled_from(_CPUS))
    sm = draw(st.sampled_from((70, 80, 90, 100)))
    wiring = draw(st.sampled_from(("none", "nvswitch", "pairs")))
    gpus, nics, lines = [], [], ['<system version="1">']
    socket_of: dict[str, int] = {}
    speed = st.sampled_from(_SPEEDS)
    width = st.sampled_from((4, 8, 16))

    def endpoint(kind, indent):
        bus = next(counter)
        busid = f"0000:{bus:02x}:00.0"
        attrs = f'busid="{busid}" link_speed="{draw(speed)}" link_width="{draw(width)}"'
        if kind == "gpu":
            gpus.append(busid)
            socket_of[busid] = numa_now[0]
            return [f'{indent}<pci {attrs} class="0x030200"><gpu dev="{len(gpus) - 1}" sm="{sm}" '
                    f'rank="{len(gpus) - 1}" gdr="1">@NV{busid}@</gpu></pci>']
        nics.append(busid)
        return [f'{indent}<pci {attrs} class="0x020000"><nic><net name="n{len(nics)}" dev="{len(nics) - 1}" '
                f'speed="{draw(st.sampled_from((100000, 200000, 400000)))}" port="1" gdr="1"/></nic></pci>']

    def switch(depth, indent):
        bus = next(counter)
        out = [f'{indent}<pci busid="0000:{bus:02x}:00.0" class="0x060400" link_speed="{draw(speed)}" '
               f'link_width="{draw(width)}">']
        for kind in draw(st.lists(st.sampled_from(("gpu", "nic", "switch")), min_size=1, max_size=3)):
            if kind == "switch" and depth < 2:
                out += switch(depth + 1, indent + "  ")
            elif kind != "switch":
                out += endpoint(kind, indent + "  ")
        return out + [f"{indent}</pci>"]

    numa_now = [0]
    for numa in range(draw(st.integers(1, 2))):
        numa_now[0] = numa
        lines.append(f'  <cpu numaid="{numa}" {cpu_attrs}>')
        for kind in draw(st.lists(st.sampled_from(("gpu", "nic", "switch")), min_size=1, max_size=3)):
            lines += switch(0, "    ") if kind == "switch" else endpoint(kind, "    ")
        lines.append("  </cpu>")
    lines.append("</system>")
    text = "\n".join(lines)
    if not gpus:
        text = text.replace("</cpu>", endpoint("gpu", "    ")[0] + "\n  </cpu>", 1)
    if not nics:
        text = text.replace("</cpu>", endpoint("nic", "    ")[0] + "\n  </cpu>", 1)
    # NVLink bridges pair GPUs of the same socket (NCCL's paths are only symmetric then: an NVLink
    # across sockets lets one direction reach the far CPU through a GPU and not the other).
    peers: dict[str, str] = {}
    for numa in set(socket_of.values()):
        local = [b for b in gpus if socket_of[b] == numa]
        for a, b in zip(local[0::2], local[1::2]):
            peers[a], peers[b] = b, a
    for busid in gpus:
        link = ""
        if wiring == "nvswitch":
            link = '<nvlink target="ffff:ff:00.0" count="12" tclass="0x068000"/>'
        elif wiring == "pairs" and busid in peers:
            link = f'<nvlink target="{peers[busid]}" count="4" tclass="0x030200"/>'
        text = text.replace(f"@NV{busid}@", link)
    version = draw(st.sampled_from(MODELLED_VERSIONS))
    return text, version, wiring


def _check_path_against_links(system, src, path):
    # Each hop names the link it crosses; the hops chain from the source to the destination.
    assert len(path.links) == len(path.nodes)
    prev = src
    for (node, pos), nxt in zip(path.links, path.nodes, strict=True):
        assert node == prev
        link = system.nodes[node].links[pos]
        assert link.dst == nxt
        assert path.bw_gbps <= link.bw_gbps + 1e-9
        prev = nxt


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topologies(), st.sampled_from(({}, {"NCCL_P2P_DISABLE": "1"}, {"NCCL_PXN_DISABLE": "1"},
                                       {"NCCL_NET_GDR_LEVEL": "LOC"})))
def test_path_properties(topology, env):
    text, version, wiring = topology
    node = build_system(parse_topo_xml(text, "generated.xml"), topo_rules(version))
    paths = compute_paths(node, read_params(env), nranks=2 * len(node.gpus()))
    system = paths.system  # rank 0's view: NCCL may trim GPUs it only reaches over the network
    gpus, nets = system.gpus(), system.nets()
    assert gpus and set(system.nodes[g].gpu.rank for g in gpus) <= set(node.nodes[g].gpu.rank for g in node.gpus())
    for g in gpus:
        for t in gpus + nets:
            path = paths.path(g, t)
            if t == g:
                assert path.type == "LOC"
                continue
            # Bandwidth never exceeds the narrowest link the path crosses.
            _check_path_against_links(system, g, path)
            assert path.bw_gbps > 0 and path.type != "DIS"  # every GPU reaches every GPU and NIC
        if wiring == "pairs":
            # NCCL's paths are not symmetric with GPU-GPU NVLink bridges: a path towards a CPU may relay
            # through the NVLink peer's PCIe link in one direction only (paths.cc, one NVLink hop).
            continue
        for h in gpus:
            a, b = paths.path(g, h), paths.path(h, g)
            assert (a.type, a.bw_gbps) == (b.type, b.bw_gbps)


def test_p2p_pxn_level_picks_the_nic_and_the_proxy():
    from nicksim.graph.paths import p2p_net

    def choice(env):
        system, paths = build("dgx-h100", env=env, nodes=2)
        return [(system.nodes[n].net.dev, proxy) for n, proxy in (p2p_net(paths, 0, d) for d in range(8))]
    # search.cc ncclTopoGetNetDev: level 2 (default) sends to peer GPU d through the NIC next to local GPU d,
    # with GPU d as proxy (PXN); level 1 only where the path is PXN or better; level 0 keeps the own NIC.
    assert choice({}) == [(d, d) for d in range(8)]
    assert choice({"NCCL_P2P_PXN_LEVEL": "1"}) == [(d, d) for d in range(8)]
    assert choice({"NCCL_P2P_PXN_LEVEL": "0"}) == [(0, 0)] * 8
    assert choice({"NCCL_PXN_DISABLE": "1"}) == [(0, 0)] * 8
    assert choice({"NCCL_P2P_PXN_LEVEL": "0", "NCCL_CROSS_NIC": "0"}) == [(d, 0) for d in range(8)]
