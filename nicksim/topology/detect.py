"""This host's topology, detected as NCCL detects it: GPUs from NVML, their PCI tree from sysfs.

`nvml_gpus(nvml)` asks an NVML binding (pynvml, from nvidia-ml-py) for every GPU: its bus id,
compute capability and the remote end of each NVLink that is P2P-capable and up.
`topology_from_gpus(gpus, sysfs, cpuinfo)` builds the `<system>` NCCL's ncclTopoGetXmlFromSys
would (src/graph/xml.cc, NCCL 2.29.7): each GPU's PCI path is the real path of
/sys/bus/pci/devices/BUSID, climbed two directories at a time (past the switch's downstream port
to its upstream one) until a root complex, which becomes the `<cpu>` of the device's numa_node;
every PCI node takes class, vendor and device ids from sysfs, and the slower of its own and its
port's max_link_speed and max_link_width; a `<cpu>` takes its cpumap as affinity and the
processor's vendor, family and model as cpuid reports them; a `<gpu>` lists its NVLinks by
target, counted, with the target's PCI class (NVSwitch where sysfs does not show the target).
`detect_topology()` does both on this machine, or raises TopologyError saying why it cannot.
NICs are not detected: the real backend moves data between hosts over its own sockets.
"""
from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import TopologyError
from .xml import TopoXml, XmlNode

__all__ = ["DetectedGpu", "nvml_gpus", "topology_from_gpus", "detect_topology", "normalize_busid"]

_NVSWITCH_CLASS = "0x068000"  # xml.cc PCI_NVSWITCH_CLASS
_UNSEEN_TARGET = "fffffff:ffff:ff"  # xml.cc: an NVLink whose remote bus id NVML cannot give
_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]$")  # xml.cc checkBDFFormat
_ARCH = {"x86_64": "x86_64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64", "ppc64": "ppc64"}


@dataclass(frozen=True)
class DetectedGpu:
    """One GPU as NVML reports it: its index, bus id (sysfs form), SM version and, per active
    P2P-capable NVLink, the bus id of the device at the other end (`_UNSEEN_TARGET` if none)."""

    index: int
    busid: str
    sm: int
    nvlink_targets: tuple[str, ...] = ()


def normalize_busid(busid: str | bytes) -> str:
    """NVML's "00000000:07:00.0" as sysfs names it, "0000:07:00.0" (lower case, 4-digit domain)."""
    text = busid.decode() if isinstance(busid, bytes) else busid
    text = text.strip("\0 ").lower()
    domain, _, rest = text.partition(":")
    if not rest:
        return text
    return f"{int(domain, 16):04x}:{rest}"


def _max_nvlinks(sm: int) -> int:
    """NVLinks NCCL probes per GPU by generation (xml.cc ncclTopoGetXmlFromGpu, 2.29.7)."""
    return 0 if sm < 60 else 4 if sm < 70 else 6 if sm < 80 else 12 if sm < 90 else 18


def nvml_gpus(nvml) -> tuple[DetectedGpu, ...]:
    """Every GPU NVML sees, through `nvml`, a module with pynvml's functions (initialised here
    and shut down before returning)."""
    nvml.nvmlInit()
    try:
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            sm = major * 10 + minor
            busid = normalize_busid(nvml.nvmlDeviceGetPciInfo(handle).busId)
            gpus.append(DetectedGpu(index, busid, sm, _nvlink_targets(nvml, handle, sm)))
        return tuple(gpus)
    finally:
        nvml.nvmlShutdown()


def _nvlink_targets(nvml, handle, sm: int) -> tuple[str, ...]:
    targets = []
    for link in range(_max_nvlinks(sm)):
        try:
            if not nvml.nvmlDeviceGetNvLinkCapability(handle, link, nvml.NVML_NVLINK_CAP_P2P_SUPPORTED):
                continue
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                continue
        except nvml.NVMLError:
            continue  # a link NVML cannot query is skipped, as NCCL skips it
        try:
            remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId
        except nvml.NVMLError:
            continue
        text = remote.decode(errors="replace") if isinstance(remote, bytes) else str(remote)
        text = text.strip("\0 ")
        targets.append(normalize_busid(text) if text and text.isprintable() else _UNSEEN_TARGET)
    return tuple(targets)


def _read(path: Path, default: str = "") -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return default


def _speed(text: str) -> float:
    match = re.match(r"\s*([0-9.]+)\s*GT/s", text)
    return float(match.group(1)) if match else float("inf")


def _width(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        return 1 << 30


def _pci_attrs(device: Path) -> tuple[tuple[str, str], ...]:
    """A PCI node's attributes as xml.cc fills them from sysfs: ids, then the slower of the
    device's and its upstream port's link speed and width."""
    attrs = [("busid", device.name), ("class", _read(device / "class"))]
    for key in ("vendor", "device", "subsystem_vendor", "subsystem_device"):
        attrs.append((key, _read(device / key)))
    own, port = _read(device / "max_link_speed"), _read(device.parent / "max_link_speed")
    attrs.append(("link_speed", port if _speed(port) < _speed(own) else own))
    widths = [_width(_read(device / "max_link_width")), _width(_read(device.parent / "max_link_width"))]
    attrs.append(("link_width", str(min(widths)) if min(widths) < 1 << 30 else ""))
    return tuple(attrs)


def _parent_bridge(path: Path) -> Path | None:
    """The PCI node NCCL hangs `path` under: two directories up (the switch's upstream port),
    or None where a root complex comes first (the device sits under a CPU)."""
    up = path.parent
    if not _BDF.match(up.name):
        return None
    up = up.parent
    return up if _BDF.match(up.name) else None


def _cpu_attrs(numaid: str, sysfs: Path, cpuinfo: str) -> tuple[tuple[str, str], ...]:
    """A `<cpu>`'s attributes (xml.cc ncclTopoGetXmlFromCpu): affinity from the node's cpumap;
    arch; on x86 the vendor string and cpuid's family and model, which add the extended fields
    shifted left by four (not as /proc/cpuinfo adds them)."""
    attrs = [("numaid", numaid), ("affinity", _read(sysfs / "devices/system/node" / f"node{numaid}" / "cpumap"))]
    arch = _ARCH.get(platform.machine(), "")
    if arch:
        attrs.append(("arch", arch))
    fields = dict(re.findall(r"^(vendor_id|cpu family|model)\s*:\s*(\S+)\s*$", cpuinfo, re.M))
    if arch == "x86_64" and fields:
        family, model = int(fields.get("cpu family", "0")), int(fields.get("model", "0"))
        if family > 0xF:  # Linux reports family + extended family; cpuid holds 0xF and the extension
            family = 0xF + ((family - 0xF) << 4)
        attrs += [("vendor", fields.get("vendor_id", "")), ("familyid", str(family)), ("modelid", str(model))]
    return tuple(attrs)


def _gpu_element(gpu: DetectedGpu, rank: int, sysfs: Path) -> XmlNode:
    counts: dict[str, int] = {}
    for target in gpu.nvlink_targets:
        counts[target] = counts.get(target, 0) + 1
    links = []
    for target, count in counts.items():
        tclass = _read(sysfs / "bus/pci/devices" / target / "class") if target != _UNSEEN_TARGET else ""
        links.append(XmlNode("nvlink", (("target", target), ("count", str(count)),
                                        ("tclass", tclass or _NVSWITCH_CLASS))))
    attrs = (("dev", str(gpu.index)), ("sm", str(gpu.sm)), ("rank", str(rank)), ("gdr", "1"))
    return XmlNode("gpu", attrs, tuple(links))


class _Tree:
    """The tree as it grows: CPUs by numa id, PCI nodes by bus id, each with its children's keys."""

    def __init__(self):
        self.cpus: dict[str, list[str]] = {}
        self.pci: dict[str, tuple[tuple[str, str], ...]] = {}
        self.children: dict[str, list[str]] = {}
        self.gpu_of: dict[str, XmlNode] = {}

    def add_child(self, parent: str, child: str) -> None:
        kids = self.children.setdefault(parent, [])
        if child not in kids:
            kids.append(child)

    def element(self, busid: str) -> XmlNode:
        kids = tuple(self.element(k) for k in sorted(self.children.get(busid, ())))
        if busid in self.gpu_of:
            kids = (self.gpu_of[busid],) + kids
        return XmlNode("pci", self.pci[busid], kids)


def topology_from_gpus(gpus: tuple[DetectedGpu, ...], sysfs: str | Path = "/sys", cpuinfo: str = "") -> TopoXml:
    """The `<system>` of these GPUs as NCCL detects it (see the module docstring); GPUs take
    ranks in bus id order. Raises TopologyError for a GPU sysfs does not show."""
    sysfs = Path(sysfs)
    tree = _Tree()
    for rank, gpu in enumerate(sorted(gpus, key=lambda g: g.busid)):
        link = sysfs / "bus/pci/devices" / gpu.busid
        if not link.exists():
            raise TopologyError(f"GPU {gpu.index} at {gpu.busid} is not in {sysfs}/bus/pci/devices", "detect",
                                "a host whose sysfs shows its GPUs (not a container without /sys)")
        path = Path(os.path.realpath(link))
        tree.gpu_of[gpu.busid] = _gpu_element(gpu, rank, sysfs)
        node = path
        while True:
            tree.pci[node.name] = _pci_attrs(node)
            parent = _parent_bridge(node)
            if parent is None:
                numaid = _read(node / "numa_node", "0")
                if numaid.startswith("-"):  # no NUMA node (one socket, many VMs): the first CPU
                    numaid = "0"
                cpu_kids = tree.cpus.setdefault(numaid, [])
                if node.name not in cpu_kids:
                    cpu_kids.append(node.name)
                break
            tree.add_child(parent.name, node.name)
            node = parent
    cpus = tuple(XmlNode("cpu", _cpu_attrs(numaid, sysfs, cpuinfo), tuple(tree.element(b) for b in sorted(kids)))
                 for numaid, kids in sorted(tree.cpus.items(), key=lambda kv: int(kv[0])))
    return TopoXml(XmlNode("system", (("version", "1"),), cpus), (), "local")


def detect_topology(sysfs: str = "/sys", where: str = "SYSTEM") -> TopoXml:
    """This machine's topology (`topology_from_gpus` over `nvml_gpus`), or TopologyError saying
    what is missing: the NVML binding, the driver, or any GPU."""
    try:
        import pynvml
    except ImportError:
        raise TopologyError("no NVML binding to detect this host's GPUs with", where,
                            "pip install nvidia-ml-py (the gpu extra), or a catalog system or topology file") from None
    try:
        gpus = nvml_gpus(pynvml)
    except pynvml.NVMLError as err:
        raise TopologyError(f"NVML cannot list this host's GPUs: {err}", where,
                            "a host with an NVIDIA driver, or a catalog system or topology file") from None
    if not gpus:
        raise TopologyError("NVML sees no GPU on this host", where, "a catalog system or topology file")
    return topology_from_gpus(gpus, sysfs, _read(Path("/proc/cpuinfo")))
