"""Topology detection (nicksim/detect.py) against a sysfs tree and an NVML shaped like a DGX H100's.

The fake sysfs lays devices out as Linux does: /sys/devices/pciDDDD:BB/<root port>/<switch
upstream>/<switch downstream>/<GPU>, with /sys/bus/pci/devices/<busid> linking to each. The fake
NVML module has pynvml's function names and return shapes (busId as NVML writes it,
"00000000:1B:00.0"; 18 NVLinks per H100, spread 5/4/4/5 over four NVSwitches)."""
from __future__ import annotations

import types
from pathlib import Path

import pytest

from conftest import run_cli
from nicksim.constants import parse_version, topo_rules
from nicksim.topology.detect import DetectedGpu, normalize_busid, nvml_gpus, topology_from_gpus
from nicksim.errors import TopologyError
from nicksim.job import JobSpec, load_job
from nicksim.params import read_params
from nicksim.topology.system import build_system
from nicksim.topology.xml import write_topo_xml

# (root complex, root port, switch upstream, switch downstream, GPU, numa node), two GPUs a switch.
H100_GPUS = [
    ("pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:1b:00.0", 0),
    ("pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:01.0", "0000:43:00.0", 0),
    ("pci0000:48", "0000:48:01.0", "0000:49:00.0", "0000:4a:00.0", "0000:52:00.0", 0),
    ("pci0000:48", "0000:48:01.0", "0000:49:00.0", "0000:4a:01.0", "0000:61:00.0", 0),
    ("pci0000:97", "0000:97:01.0", "0000:98:00.0", "0000:99:00.0", "0000:9d:00.0", 1),
    ("pci0000:97", "0000:97:01.0", "0000:98:00.0", "0000:99:01.0", "0000:c3:00.0", 1),
    ("pci0000:cc", "0000:cc:01.0", "0000:cd:00.0", "0000:ce:00.0", "0000:d1:00.0", 1),
    ("pci0000:cc", "0000:cc:01.0", "0000:cd:00.0", "0000:ce:01.0", "0000:df:00.0", 1),
]
NVSWITCHES = ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
LINKS_PER_SWITCH = [5, 4, 4, 5]  # an H100 SXM's 18 NVLinks over a DGX H100's four NVSwitch chips
CPUINFO = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\nmodel name\t: Xeon 8480C\n"


def _device(root: Path, path: Path, cls: str, speed: str = "32.0 GT/s PCIe", width: str = "16",
            numa: int = 0) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for name, value in (("class", cls), ("vendor", "0x10de" if cls.startswith("0x03") else "0x1000"),
                        ("device", "0x2330"), ("subsystem_vendor", "0x10de"), ("subsystem_device", "0x16c1"),
                        ("max_link_speed", speed), ("max_link_width", width), ("numa_node", str(numa))):
        (path / name).write_text(value + "\n")
    link = root / "bus/pci/devices" / path.name
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists():
        link.symlink_to(path)


def fake_sysfs(root: Path, slow_port: str | None = None, visible_switches: int = 2) -> Path:
    """A DGX H100's PCI tree under `root`; `slow_port`'s link is Gen4; the first
    `visible_switches` NVSwitches show in sysfs (class 0x068000), the others do not."""
    for rc, port, up, down, gpu, numa in H100_GPUS:
        base = root / "devices" / rc
        _device(root, base / port, "0x060400", numa=numa)
        _device(root, base / port / up, "0x060400", numa=numa)
        _device(root, base / port / up / down, "0x060400", "16.0 GT/s PCIe" if down == slow_port else
                "32.0 GT/s PCIe", numa=numa)
        _device(root, base / port / up / down / gpu, "0x030200", numa=numa)
    for switch in NVSWITCHES[:visible_switches]:
        _device(root, root / "devices/pci0000:00/0000:00:02.0" / switch, "0x068000")
    for numa, mask in ((0, "00000000,0000ffff"), (1, "ffffffff,ffff0000")):
        node = root / "devices/system/node" / f"node{numa}"
        node.mkdir(parents=True)
        (node / "cpumap").write_text(mask + "\n")
    return root


class _NvmlError(Exception):
    pass


def fake_nvml(gpus=H100_GPUS, links_per_switch=LINKS_PER_SWITCH, down_link: tuple[int, int] | None = None,
              sm=(9, 0)):
    """A module with pynvml's functions for these GPUs, every NVLink up except `down_link`
    (GPU index, link). Calls outside init/shutdown fail as NVML does when not initialised."""
    state = {"init": False}

    def need_init():
        if not state["init"]:
            raise _NvmlError("Uninitialized")

    targets = [s for s, n in zip(NVSWITCHES, links_per_switch) for _ in range(n)]

    def pci(index):
        need_init()
        bus = gpus[index][4]
        return types.SimpleNamespace(busId=f"0000{bus.upper()}".encode(), busIdLegacy=bus.encode())

    def remote(handle, link):
        need_init()
        if link >= len(targets):
            raise _NvmlError("Not Supported")
        return types.SimpleNamespace(busId=f"0000{targets[link].upper()}")

    def set_init(value):
        state["init"] = value

    return types.SimpleNamespace(
        NVMLError=_NvmlError, NVML_NVLINK_CAP_P2P_SUPPORTED=0, NVML_FEATURE_ENABLED=1, NVML_FEATURE_DISABLED=0,
        nvmlInit=lambda: set_init(True), nvmlShutdown=lambda: set_init(False),
        nvmlDeviceGetCount=lambda: (need_init(), len(gpus))[1],
        nvmlDeviceGetHandleByIndex=lambda i: (need_init(), i)[1],
        nvmlDeviceGetCudaComputeCapability=lambda h: (need_init(), sm)[1],
        nvmlDeviceGetPciInfo=pci,
        nvmlDeviceGetNvLinkCapability=lambda h, link, cap: (need_init(), int(link < len(targets)))[1],
        nvmlDeviceGetNvLinkState=lambda h, link: (need_init(), 0 if (h, link) == down_link else 1)[1],
        nvmlDeviceGetNvLinkRemotePciInfo=remote,
        state=state,
    )


def test_nvml_gives_every_gpu_its_bus_id_sm_and_active_nvlinks():
    nvml = fake_nvml(down_link=(3, 0))
    gpus = nvml_gpus(nvml)
    assert [g.busid for g in gpus] == [g[4] for g in H100_GPUS]
    assert {g.sm for g in gpus} == {90}
    assert len(gpus[0].nvlink_targets) == 18
    assert len(gpus[3].nvlink_targets) == 17  # its link 0 is down
    assert gpus[0].nvlink_targets.count("0000:05:00.0") == 5
    assert nvml.state["init"] is False  # shut down again


def test_an_older_gpu_probes_fewer_links():
    gpus = nvml_gpus(fake_nvml(sm=(8, 0)))  # an A100 has 12 NVLinks: NCCL asks about 12 only
    assert len(gpus[0].nvlink_targets) == 12


def test_bus_ids_take_sysfs_form():
    assert normalize_busid(b"00000000:1B:00.0\0") == "0000:1b:00.0"
    assert normalize_busid("00000001:C3:00.0") == "0001:c3:00.0"


def _detected(tmp_path, **sysfs_kwargs):
    sysfs = fake_sysfs(tmp_path / "sys", **sysfs_kwargs)
    return topology_from_gpus(nvml_gpus(fake_nvml()), sysfs, CPUINFO)


def _find(node, tag, **attrs):
    found = []
    if node.tag == tag and all(node.get(k) == v for k, v in attrs.items()):
        found.append(node)
    for child in node.children:
        found += _find(child, tag, **attrs)
    return found


def test_the_pci_tree_climbs_to_the_switch_upstream_port_and_the_cpu(tmp_path):
    doc = _detected(tmp_path)
    cpus = doc.root.children
    assert [c.get("numaid") for c in cpus] == ["0", "1"]
    assert cpus[0].get("affinity") == "00000000,0000ffff"
    assert (cpus[0].get("arch"), cpus[0].get("vendor"), cpus[0].get("familyid"), cpus[0].get("modelid")) == \
        ("x86_64", "GenuineIntel", "6", "143")
    # Under each CPU, the switches' upstream ports (root ports and downstream ports are skipped).
    assert [p.get("busid") for p in cpus[0].children] == ["0000:16:00.0", "0000:49:00.0"]
    switch = cpus[0].children[0]
    assert switch.get("class") == "0x060400"
    assert [p.get("busid") for p in switch.children] == ["0000:1b:00.0", "0000:43:00.0"]
    gpu = switch.children[0].children[0]
    assert (gpu.tag, gpu.get("dev"), gpu.get("sm"), gpu.get("rank")) == ("gpu", "0", "90", "0")


def test_a_link_is_as_fast_as_the_slower_of_device_and_port(tmp_path):
    doc = _detected(tmp_path, slow_port="0000:17:01.0")
    (gpu_on_slow_port,) = _find(doc.root, "pci", busid="0000:43:00.0")
    (other,) = _find(doc.root, "pci", busid="0000:1b:00.0")
    assert gpu_on_slow_port.get("link_speed") == "16.0 GT/s PCIe"
    assert other.get("link_speed") == "32.0 GT/s PCIe"
    assert other.get("link_width") == "16"


def test_nvlinks_are_counted_by_target_with_its_class(tmp_path):
    doc = _detected(tmp_path, visible_switches=2)
    gpu = _find(doc.root, "gpu", dev="0")[0]
    links = {n.get("target"): (n.get("count"), n.get("tclass")) for n in gpu.children}
    assert links == {s: (str(n), "0x068000") for s, n in zip(NVSWITCHES, LINKS_PER_SWITCH)}


def test_an_nvlink_target_sysfs_does_not_show_is_taken_for_an_nvswitch(tmp_path):
    sysfs = fake_sysfs(tmp_path / "sys", visible_switches=0)
    gpus = (DetectedGpu(0, "0000:1b:00.0", 90, ("fffffff:ffff:ff",) * 2 + ("0000:05:00.0",)),)
    gpu = _find(topology_from_gpus(gpus, sysfs, CPUINFO).root, "gpu")[0]
    assert [(n.get("target"), n.get("count"), n.get("tclass")) for n in gpu.children] == \
        [("fffffff:ffff:ff", "2", "0x068000"), ("0000:05:00.0", "1", "0x068000")]


def test_a_gpu_sysfs_does_not_show_is_a_clear_error():
    gpus = (DetectedGpu(0, "0000:1b:00.0", 90),)
    with pytest.raises(TopologyError, match="not in /nonexistent-sysfs/bus/pci/devices"):
        topology_from_gpus(gpus, "/nonexistent-sysfs", CPUINFO)


def test_the_extended_family_is_shifted_as_cpuid_holds_it(tmp_path):
    sysfs = fake_sysfs(tmp_path / "sys")
    amd = "vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
    doc = topology_from_gpus(nvml_gpus(fake_nvml()), sysfs, amd)
    assert doc.root.children[0].get("familyid") == str(0xF + (0xA << 4))  # Zen 3: family 0xF, extended 0xA


def test_a_detected_dgx_h100_is_searched_as_the_catalogs(tmp_path):
    doc = _detected(tmp_path)
    path = tmp_path / "local.xml"
    write_topo_xml(doc, path)
    system = build_system(doc, topo_rules(parse_version("2.27")))
    assert len(system.gpus()) == 8
    detected = load_job(JobSpec(system=str(path), nccl_version="2.27"), read_params({}))
    catalog = load_job(JobSpec(system="dgx-h100", nccl_version="2.27"), read_params({}))
    for name in ("ring", "tree"):
        got, want = detected.graphs[name], catalog.graphs[name]
        assert (got.n_channels, got.bw_intra, got.type_intra) == (want.n_channels, want.bw_intra, want.type_intra)
        assert got.type_intra == "NVL"


def test_a_dead_nvlink_changes_the_search(tmp_path):
    sysfs = fake_sysfs(tmp_path / "sys")
    full = topology_from_gpus(nvml_gpus(fake_nvml()), sysfs, CPUINFO)
    half = topology_from_gpus(nvml_gpus(fake_nvml(links_per_switch=[5, 4, 0, 0])), sysfs, CPUINFO)
    totals = []
    for doc in (full, half):
        path = tmp_path / f"t{len(totals)}.xml"
        write_topo_xml(doc, path)
        ring = load_job(JobSpec(system=str(path), nccl_version="2.27"), read_params({})).graphs["ring"]
        totals.append(ring.n_channels * ring.bw_intra)
    assert totals[1] < totals[0]  # 9 of 18 links: the rings carry less in all


def test_system_local_without_nvml_is_one_line_and_status_2():
    result = run_cli("topo", "--system", "local")
    if result.returncode == 0:  # a host with NVIDIA GPUs and NVML: it prints them
        assert "GPU" in result.stdout
        return
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "NVML" in lines[0] and "SYSTEM" in lines[0], lines


def test_gpus_linked_to_each_other_are_planned_over_nvlink(tmp_path):
    sysfs = fake_sysfs(tmp_path / "sys")
    a, b = H100_GPUS[0][4], H100_GPUS[1][4]
    gpus = (DetectedGpu(0, a, 80, (b,) * 4), DetectedGpu(1, b, 80, (a,) * 4))  # an NVLink bridge of 4 links
    doc = topology_from_gpus(gpus, sysfs, CPUINFO)
    assert [n.get("tclass") for n in _find(doc.root, "nvlink")] == ["0x030200", "0x030200"]
    path = tmp_path / "pair.xml"
    write_topo_xml(doc, path)
    ring = load_job(JobSpec(system=str(path), nccl_version="2.27"), read_params({})).graphs["ring"]
    assert ring.type_intra == "NVL"
