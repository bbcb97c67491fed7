"""The System: NCCL's typed model of a machine, built from topology XML.

`build_system(doc, rules)` does what NCCL's ncclTopoGetSystemFromXml does for the chosen
release line: one node per CPU (NUMA domain), PCIe switch, GPU (and, from 2.30, the GPU's
DEV node), NVSwitch, NIC and network port; links with NCCL's bandwidths (PCIe gen x width,
NVLink count x per-link bandwidth by SM, C2C, inter-CPU by vendor and model, NIC speed);
NVLink aggregation, Broadcom switch flattening, the link order NCCL sorts into. The result is
immutable; paths and search results live in their own stages.

Every value read from the file is checked here, and a wrong one is a TopologyError naming
the file, line, attribute and what would be valid. Unknown attributes and elements are kept
in the XML and ignored, as NCCL does.

`format_system` prints the system as NCCL's GRAPH subsystem does (ncclTopoPrint).
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Mapping

from ..constants.topo_rules import (ARM_BW, BDW_QPI_BW, ERP_QPI_BW, LOC_BW, P9_BW, PCI_DEFAULT_CODE, PCI_GEN_CODES,
                                    SKL_QPI_BW, SRP_QPI_BW, YONGFENG_ZPI_BW, ZPI_BW, TopoRules)
from ..errors import TopologyError
from .fill import parse_busid
from .hardware import GpuModel, gpu_model_for_device
from .xml import KNOWN_TAGS, TopoXml, XmlNode

__all__ = [
    "Link",
    "GpuInfo",
    "CpuInfo",
    "NetInfo",
    "Node",
    "System",
    "build_system",
    "format_system",
    "pci_gen_code",
    "node_label",
    "NODE_KINDS",
    "CPU_ARCH",
    "CPU_VENDOR",
    "f32",
]

# topo.cc topoNodeTypeStr order (GIN/RMA/CXB are not modelled).
NODE_KINDS = ("GPU", "PCI", "NVS", "CPU", "NIC", "NET", "DEV")
CPU_ARCH = {"x86_64": 1, "ppc64": 2, "arm64": 3}
CPU_VENDOR = {"GenuineIntel": 1, "AuthenticAMD": 2, "CentaurHauls": 3, "  Shanghai  ": 3}
_UNDEF = -1
_INTEL_MODEL = {"BDW": 1, "SKL": 2, "SRP": 3, "ERP": 4}
_YONGFENG = 1
_F32 = struct.Struct("f")


def f32(x: float) -> float:
    """`x` as C's (float)x gives it (round to nearest, ties to even), back as a Python float: NCCL keeps
    bandwidths in float. The same as float(numpy.float32(x)), without loading NumPy; a sum or product
    of two such values, rounded by f32, is the float32 operation's result (a double holds it exactly
    or rounds it harmlessly: 53 >= 2 * 24 + 2 bits)."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:  # beyond float's range: the cast gives infinity
        return math.copysign(math.inf, x)


@dataclass(frozen=True)
class Link:
    """A directed link to node index `dst` of type LOC/NVL/C2C/PCI/SYS/NET with bw in GB/s."""

    kind: str
    bw_gbps: float
    dst: int


@dataclass(frozen=True)
class GpuInfo:
    dev: int
    rank: int
    sm: int
    gdr: bool
    busid: str
    model: str | None
    cuda_p2p: bool


@dataclass(frozen=True)
class CpuInfo:
    numaid: int
    arch: int
    vendor: int
    model: int
    affinity: str | None


@dataclass(frozen=True)
class NetInfo:
    dev: int
    name: str
    bw_gbps: float
    latency_us: float
    port: int
    gdr: bool
    maxconn: int
    coll: int
    asic: int
    rail: int = -1
    plane: int = -1


@dataclass(frozen=True)
class Node:
    """A node of the system: kind, NCCL's 64-bit id, outgoing links (NCCL's order), details."""

    kind: str
    id: int
    links: tuple[Link, ...]
    gpu: GpuInfo | None = None
    cpu: CpuInfo | None = None
    net: NetInfo | None = None
    pci_device: int = 0
    line: int | None = None

    @property
    def system_id(self) -> int:
        return self.id >> 56

    @property
    def local_id(self) -> int:
        return self.id & 0x00FFFFFFFFFFFFFF


@dataclass(frozen=True)
class System:
    """An immutable NCCL topology: nodes, per-kind index lists (NCCL's order) and the rules used."""

    nodes: tuple[Node, ...]
    kinds: Mapping[str, tuple[int, ...]]
    rules: TopoRules
    source: str
    host_hashes: tuple[int, ...]
    notes: tuple[str, ...] = field(default=())

    def of_kind(self, kind: str) -> tuple[int, ...]:
        return self.kinds.get(kind, ())

    def gpus(self) -> tuple[int, ...]:
        return self.of_kind("GPU")

    def nets(self) -> tuple[int, ...]:
        return self.of_kind("NET")

    @property
    def device_kind(self) -> str:
        """The node NVLinks attach to: DEV from 2.30, GPU before."""
        return "DEV" if self.of_kind("DEV") else "GPU"

    def gpu_by_rank(self, rank: int) -> int:
        for index in self.gpus():
            if self.nodes[index].gpu.rank == rank:
                return index
        raise KeyError(rank)

    def without(self, removed: set[int]) -> "System":
        """The system with some nodes and every link to them taken out (ncclTopoRemoveNode), order kept."""
        keep = [i for i in range(len(self.nodes)) if i not in removed]
        remap = {old: new for new, old in enumerate(keep)}
        nodes = []
        for old in keep:
            node = self.nodes[old]
            links = tuple(Link(l.kind, l.bw_gbps, remap[l.dst]) for l in node.links if l.dst in remap)
            nodes.append(replace(node, links=links))
        kinds = MappingProxyType({k: tuple(remap[i] for i in v if i in remap)
                                  for k, v in self.kinds.items() if any(i in remap for i in v)})
        return replace(self, nodes=tuple(nodes), kinds=kinds)

    def device_of(self, gpu_index: int) -> int:
        """The DEV node under a GPU (2.30), or the GPU itself."""
        node = self.nodes[gpu_index]
        for link in node.links:
            if link.kind == "LOC" and self.nodes[link.dst].kind == "DEV":
                return link.dst
        return gpu_index


# ---------------------------------------------------------------------------------------------
# Attribute reading with line numbers


class _Reader:
    """Reads typed attributes from XmlNodes; errors name file, line, element and attribute."""

    def __init__(self, source: str):
        self.source = source

    def where(self, node: XmlNode) -> str:
        return f"{self.source}:{node.line}" if node.line else self.source

    def fail(self, node: XmlNode, what: str, valid: str) -> TopologyError:
        return TopologyError(what, self.where(node), valid)

    def int(self, node: XmlNode, key: str, default: int | None = None, required: bool = False) -> int | None:
        text = node.get(key)
        if text is None or text.strip() == "":
            if required:
                raise self.fail(node, f"<{node.tag}> has no {key}=", f"{key}=\"<integer>\"")
            return default
        try:
            return _parse_int(text)
        except ValueError:
            raise self.fail(node, f"<{node.tag}> {key}=\"{text}\" is not an integer",
                            f"{key} as an integer, e.g. {_EXAMPLES.get(key, '1')}") from None

    def float(self, node: XmlNode, key: str, default: float) -> float:
        text = node.get(key)
        if text is None or text.strip() == "":
            return default
        try:
            return float(text)
        except ValueError:
            raise self.fail(node, f"<{node.tag}> {key}=\"{text}\" is not a number",
                            f"{key} as a number, e.g. {_EXAMPLES.get(key, '0.0')}") from None

    def busid(self, node: XmlNode, key: str = "busid") -> str:
        text = node.get(key)
        if text is None:
            raise self.fail(node, f"<{node.tag}> has no {key}=", f'{key}="0000:18:00.0"')
        if parse_busid(text) is None:
            raise self.fail(node, f"<{node.tag}> {key}=\"{text}\" is not a PCI bus id", "dddd:bb:dd.f, e.g. 0000:18:00.0")
        return text.lower()

    def hexint(self, node: XmlNode, key: str) -> int | None:
        text = node.get(key)
        if text is None or text == "":
            return None
        try:
            return int(text, 16)
        except ValueError:
            raise self.fail(node, f"<{node.tag}> {key}=\"{text}\" is not hexadecimal", f"{key}=\"0x10de\"") from None


_EXAMPLES = {"speed": "400000 (Mbit/s)", "link_width": "16", "count": "18", "bw": "40000 (MB/s)",
             "numaid": "0", "dev": "0", "rank": "0", "sm": "90", "gdr": "1", "port": "1",
             "latency": "0.0", "maxconn": "131072", "familyid": "6", "modelid": "143"}


def _parse_int(text: str) -> int:
    """An XML integer: decimal or 0x-hex (leading zeros read as decimal, as dumps write them)."""
    text = text.strip()
    try:
        return int(text, 0)
    except ValueError:
        return int(text, 10)


def pci_gen_code(speed: str | None) -> int | None:
    """xml.h kvConvertToInt over topo.cc kvDictPciGen: the first entry the string *starts with*
    (strncmp over the entry's length, the same in every tag from 2.18 to 2.30), so aws-ofi-nccl
    1.9.2's "32 GT/s PCIe/s" reads as "32 GT/s" (Gen5). None where NCCL falls back to Gen3."""
    if speed is None:
        return None
    return next((code for text, code in PCI_GEN_CODES.items() if speed.startswith(text)), None)


def busid_to_int(busid: str) -> int:
    """topo.cc busIdToInt64: the hex digits of the bus id, separators dropped."""
    return int("".join(ch for ch in busid if ch not in ":."), 16)


# ---------------------------------------------------------------------------------------------
# Building


class _MNode:
    __slots__ = ("kind", "id", "links", "gpu", "cpu", "net", "pci_device", "line", "alive")

    def __init__(self, kind: str, node_id: int, line: int | None):
        self.kind = kind
        self.id = node_id
        self.links: list[list] = []  # [kind, bw, dst]
        self.gpu = self.cpu = self.net = None
        self.pci_device = 0
        self.line = line
        self.alive = True


class _Builder:
    """Mutable construction state, mirroring ncclTopoSystem while it is being filled."""

    def __init__(self, rules: TopoRules, source: str):
        self.rules = rules
        self.read = _Reader(source)
        self.source = source
        self.nodes: list[_MNode] = []
        self.kinds: dict[str, list[int]] = {k: [] for k in NODE_KINDS}
        self.host_hashes: list[int] = []
        self.notes: list[str] = []
        self.located_notes: dict[str, list[int]] = {}
        self.one_way: list[tuple[int, int, str, XmlNode]] = []  # links the file declares from one side
        self.busids_seen: dict[tuple[int, str], int] = {}

    def note(self, node: XmlNode, message: str) -> None:
        """Collect a remark about the file; the same remark on many lines is reported once."""
        self.located_notes.setdefault(message, []).append(node.line or 0)

    def gathered_notes(self) -> list[str]:
        out = []
        for message, lines in self.located_notes.items():
            shown = ",".join(str(n) for n in lines[:6]) + (f" and {len(lines) - 6} more" if len(lines) > 6 else "")
            out.append(f"{self.source}:{shown}: {message}")
        return out

    # -- node and link primitives (ncclTopoCreateNode / ncclTopoConnectNodes)
    def create(self, kind: str, node_id: int, line: int | None) -> int:
        index = len(self.nodes)
        self.nodes.append(_MNode(kind, node_id, line))
        self.kinds[kind].append(index)
        return index

    def get(self, kind: str, node_id: int) -> int | None:
        for index in self.kinds[kind]:
            if self.nodes[index].id == node_id:
                return index
        return None

    def connect(self, a: int, b: int, kind: str, bw: float) -> None:
        links = self.nodes[a].links
        pos = next((i for i, l in enumerate(links) if l[2] == b and l[0] == kind), None)
        if pos is None:
            links.append([kind, 0.0, b])
            pos = len(links) - 1
        # NCCL keeps link bandwidths in float (topo.cc ncclTopoConnectNodes: link->bw += bw).
        links[pos][1] = f32(f32(links[pos][1]) + f32(bw))
        # Keep links sorted by bandwidth, descending; an updated link moves ahead of narrower ones.
        link = links.pop(pos)
        while pos > 0 and links[pos - 1][1] < link[1]:
            pos -= 1
        links.insert(pos, link)

    def system_id(self, cpu: XmlNode) -> int:
        text = cpu.get("host_hash")
        try:
            host = int(text, 16) if text else 0
        except ValueError:
            raise self.read.fail(cpu, f"<cpu> host_hash=\"{text}\" is not hexadecimal", 'host_hash="0x1a2b3c"') from None
        if host not in self.host_hashes:
            self.host_hashes.append(host)
        return self.host_hashes.index(host)

    # -- <cpu>
    def add_cpu(self, xml_cpu: XmlNode) -> None:
        rd = self.read
        numaid = rd.int(xml_cpu, "numaid", required=True)
        sid = self.system_id(xml_cpu)
        cpu = self.create("CPU", (sid << 56) + numaid, xml_cpu.line)
        arch_text = xml_cpu.get("arch")
        if arch_text is not None and arch_text not in CPU_ARCH:
            raise rd.fail(xml_cpu, f"<cpu> arch=\"{arch_text}\" is unknown", ", ".join(CPU_ARCH))
        arch = CPU_ARCH.get(arch_text, _UNDEF)
        vendor = model = _UNDEF
        if arch == CPU_ARCH["x86_64"]:
            vendor_text = xml_cpu.get("vendor")
            vendor = CPU_VENDOR.get(vendor_text, _UNDEF) if vendor_text is not None else _UNDEF
            if vendor_text is not None and vendor == _UNDEF:
                self.note(xml_cpu, f"CPU vendor '{vendor_text}' unknown to NCCL")
            if vendor == 1:
                family = rd.int(xml_cpu, "familyid", default=0)
                model_id = rd.int(xml_cpu, "modelid", default=0)
                model = self._intel_model(family, model_id)
            elif vendor == 3:
                family = rd.int(xml_cpu, "familyid", default=0)
                model_id = rd.int(xml_cpu, "modelid", default=0)
                model = _YONGFENG if (family == 7 and model_id == 0x5B) else _UNDEF
        elif arch_text is None:
            self.note(xml_cpu, "<cpu> has no arch/vendor; NCCL would read them from the live machine "
                               "(inter-CPU links use LOC_BW)")
        self.nodes[cpu].cpu = CpuInfo(numaid, arch, vendor, model, xml_cpu.get("affinity"))
        for child in xml_cpu.children:
            if child.tag == "pci":
                self.add_pci(child, cpu, sid, numaid)
            elif child.tag == "nic":
                nic_id = (sid << 56) + 0  # NCCL_TOPO_LOCAL_NIC_ID(numaid, 0) masked to the local id
                nic = self.get("NIC", nic_id)
                if nic is None:
                    nic = self.create("NIC", nic_id, child.line)
                    self.connect(cpu, nic, "PCI", LOC_BW)
                    self.connect(nic, cpu, "PCI", LOC_BW)
                self.add_nic(child, nic, sid)
            elif child.tag not in KNOWN_TAGS:
                self.note(child, f"<{child.tag}> is not an NCCL topology element; ignored")

    def _intel_model(self, family: int, model_id: int) -> int:
        if family == 6 and model_id >= 0xCF and self.rules.intel_srp_erp:
            return _INTEL_MODEL["ERP"]
        if family == 6 and model_id >= 0x8F and self.rules.intel_srp_erp:
            return _INTEL_MODEL["SRP"]
        if family == 6 and model_id >= 0x55:
            return _INTEL_MODEL["SKL"]
        return _INTEL_MODEL["BDW"]

    # -- <pci>
    def _pci_bw(self, xml_pci: XmlNode) -> float:
        width = self.read.int(xml_pci, "link_width", default=0)
        speed = xml_pci.get("link_speed")
        if width == 0:
            width = 16  # topo.cc: width not known in /sys
        code = pci_gen_code(speed)
        if code is None:
            code = PCI_DEFAULT_CODE
            if speed not in (None, ""):
                self.note(xml_pci, f"link_speed \"{speed}\" unknown to NCCL; taken as Gen3 (8 GT/s) as NCCL does")
        return width * code / 80.0

    def add_pci(self, xml_pci: XmlNode, parent: int, sid: int, numaid: int) -> None:
        rd = self.read
        busid = rd.busid(xml_pci)
        key = (sid, busid)
        if key in self.busids_seen:
            raise rd.fail(xml_pci, f"bus id {busid} appears twice in the same host (first on line {self.busids_seen[key]})",
                          "one <pci> per bus id")
        self.busids_seen[key] = xml_pci.line or 0
        bus = busid_to_int(busid)
        cls = (xml_pci.get("class") or "").lower()
        bw = self._pci_bw(xml_pci)
        xml_gpus = xml_pci.findall("gpu")
        xml_nic = xml_pci.find("nic")
        node = None
        if xml_gpus:
            xml_gpu = xml_gpus[0]
            if not xml_gpu.has("rank"):
                return  # topo.cc: a GPU without rank is not part of this communicator
            node = self._add_gpu(xml_pci, xml_gpu, parent, sid, bus, bw)
            if node is None:
                return
        if xml_nic is not None:
            nic_id = (sid << 56) + (bus & 0x00FFFFFFFFFFFFFF)
            nic = self.get("NIC", nic_id)
            new = nic is None
            if new:
                nic = self.create("NIC", nic_id, xml_pci.line)
            self.add_nic(xml_nic, nic, sid)
            node = nic if new else None
        elif not xml_gpus and self._is_switch_class(cls):
            node = self.create("PCI", (sid << 56) + bus, xml_pci.line)
            self.nodes[node].pci_device = self._device_word(xml_pci)
            for child in xml_pci.children:
                if child.tag == "pci":
                    self.add_pci(child, node, sid, numaid)
                elif child.tag not in KNOWN_TAGS:
                    self.note(child, f"<{child.tag}> is not an NCCL topology element; ignored")
        elif cls.startswith("0x068000") and not xml_gpus:
            return  # an NVSwitch endpoint: NVLinks name it by tclass, NCCL adds no PCI node
        if node is not None and self.nodes[node].kind != "GPU":
            self.connect(node, parent, "PCI", bw)
            self.connect(parent, node, "PCI", bw)

    @staticmethod
    def _is_switch_class(cls: str) -> bool:
        # kvDictPciClass: bridge and CX8 data-direct are PCI; unknown classes fall back to PCI.
        return not (cls.startswith("0x03") or cls.startswith("0x02") or cls.startswith("0x068000")
                    or cls.startswith("0x068001"))

    def _device_word(self, xml_pci: XmlNode) -> int:
        rd = self.read
        word = 0
        for shift, key in ((48, "vendor"), (32, "device"), (16, "subsystem_vendor"), (0, "subsystem_device")):
            value = rd.hexint(xml_pci, key)
            if value is not None:
                word += value << shift
        return word

    def _add_gpu(self, xml_pci, xml_gpu, parent, sid, bus, bw) -> int | None:
        rd = self.read
        rank = rd.int(xml_gpu, "rank", required=True)
        dev = rd.int(xml_gpu, "dev", required=True)
        sm = rd.int(xml_gpu, "sm", required=True)
        gdr = rd.int(xml_gpu, "gdr", default=0)
        if sm <= 0:
            raise rd.fail(xml_gpu, f"<gpu> sm=\"{xml_gpu.get('sm')}\" is not a compute capability", 'sm="90" for 9.0')
        if xml_gpu.has("mlopart"):
            rd.int(xml_gpu, "mlopart")
            self.note(xml_gpu, "<gpu mlopart=...> partitions are not modelled; the GPU is taken whole")
        model: GpuModel | None = None
        device = rd.hexint(xml_pci, "device")
        if device is not None:
            model = gpu_model_for_device(device)
        cuda_p2p = model.cuda_p2p if model else True
        info = GpuInfo(dev=dev, rank=rank, sm=sm, gdr=bool(gdr), busid=xml_pci.get("busid").lower(),
                       model=model.name if model else None, cuda_p2p=cuda_p2p)
        gpu = self.create("GPU", (sid << 56) + bus, xml_pci.line)
        self.nodes[gpu].gpu = info
        if self.rules.gpu_dev_nodes:
            # 2.30: every GPU hangs below a DEV node that carries its PCIe link and NVLinks.
            devnode = self.create("DEV", (sid << 56) + bus, xml_pci.line)
            self.nodes[devnode].pci_device = self._device_word(xml_pci)
            self.nodes[devnode].gpu = info
            self.connect(devnode, parent, "PCI", bw)
            self.connect(parent, devnode, "PCI", bw)
            self.connect(devnode, gpu, "LOC", LOC_BW)
            self.connect(gpu, devnode, "LOC", LOC_BW)
        else:
            self.connect(gpu, parent, "PCI", bw)
            self.connect(parent, gpu, "PCI", bw)
        return gpu

    # -- <nic>/<net>
    def add_nic(self, xml_nic: XmlNode, nic: int, sid: int) -> None:
        rd = self.read
        for xml_net in xml_nic.children:
            if xml_net.tag != "net":
                continue
            if not xml_net.has("dev"):
                continue  # topo.cc: a net without dev is not added
            if self.rules.net_gin_attr and rd.int(xml_net, "net", default=1) == 0:
                self.note(xml_net, '<net net="0"> (a GIN/RMA-only device) is not modelled; ignored')
                continue
            dev = rd.int(xml_net, "dev", required=True)
            speed = rd.int(xml_net, "speed", default=0)
            if speed <= 0:
                speed = 10000  # topo.cc: some NICs report speed -1
            bw = speed / 8000.0
            asic = self._net_asic(xml_net, sid, dev)
            info = NetInfo(dev=dev, name=xml_net.get("name") or f"net{dev}", bw_gbps=bw,
                           latency_us=rd.float(xml_net, "latency", 0.0), port=rd.int(xml_net, "port", default=0),
                           gdr=bool(rd.int(xml_net, "gdr", default=0)), maxconn=rd.int(xml_net, "maxconn", default=64),
                           coll=rd.int(xml_net, "coll", default=0), asic=asic,
                           rail=rd.int(xml_net, "rail", default=-1), plane=rd.int(xml_net, "plane", default=-1))
            net_id = (sid << 56) + dev
            if self.get("NET", net_id) is not None:
                raise rd.fail(xml_net, f"<net dev=\"{dev}\"> appears twice in the same host", "a distinct dev per <net>")
            net = self.create("NET", net_id, xml_net.line)
            self.nodes[net].net = info
            self.connect(nic, net, "NET", bw)
            self.connect(net, nic, "NET", bw)

    def _net_asic(self, xml_net: XmlNode, sid: int, dev: int) -> int:
        """The NIC ASIC id: strtoull(guid, 16) from 2.28 (else the NET id); before, sscanf("0x%lx"),
        which leaves 0 for a guid without "0x" (else the dev)."""
        guid = xml_net.get("guid")
        if guid is None:
            return (sid << 56) + dev if self.rules.guid_strtoull else dev
        text = guid.strip()
        if not self.rules.guid_strtoull:
            if not text.lower().startswith("0x"):
                return 0
            text = text[2:]
        digits = ""
        for ch in text.lower().removeprefix("0x"):
            if ch not in "0123456789abcdef":
                break
            digits += ch
        if not digits:
            raise self.read.fail(xml_net, f"<net> guid=\"{guid}\" is not hexadecimal", 'guid="0x1e95b50003fd7010"')
        return int(digits, 16) & 0xFFFFFFFFFFFFFFFF

    # -- second passes (NVLinks, C2C, PCI links), each over every element with its bus id and host
    def walk(self, node: XmlNode, busid: str | None = None, sid: int = 0):
        """Yield (element, enclosing <pci> bus id, systemId) for every element below `node`."""
        if node.tag == "cpu":
            sid = self.system_id(node)
        if node.tag == "pci" and node.get("busid"):
            busid = node.get("busid").lower()
        yield node, busid, sid
        for child in node.children:
            yield from self.walk(child, busid, sid)

    def _add_nvlink(self, xml_link: XmlNode, busid: str, sid: int, gpu_for: dict) -> None:
        rd = self.read
        gpu = gpu_for.get((sid, busid))
        if gpu is None:
            return  # the GPU was skipped (no rank)
        device = self._device_node(gpu)
        count = rd.int(xml_link, "count", required=True)
        if count < 0:
            raise rd.fail(xml_link, f"<nvlink> count=\"{count}\" is negative", "a link count of 0 or more")
        tclass = (xml_link.get("tclass") or "").lower()
        if not tclass:
            raise rd.fail(xml_link, "<nvlink> has no tclass=", 'tclass="0x068000" (NVSwitch) or the target GPU class')
        bw = f32(f32(count) * f32(self.rules.nvlink_bw(self.nodes[gpu].gpu.sm)))  # int * float
        if tclass.startswith("0x03"):
            target = rd.busid(xml_link, "target")
            remote_gpu = gpu_for.get((sid, target))
            if remote_gpu is None:
                raise rd.fail(xml_link, f"<nvlink> target {target} is not a GPU in this file",
                              "the bus id of a <pci> holding a <gpu>, or tclass=\"0x068000\" for an NVSwitch")
            if remote_gpu == gpu:
                self.note(xml_link, "an NVLink targets its own GPU; NCCL keeps it as a self link "
                                    "(it only raises totalBw)")
            self.connect(device, self._device_node(remote_gpu), "NVL", bw)
            self.one_way.append((device, self._device_node(remote_gpu), "NVL", xml_link))
            return
        if tclass.startswith("0x068001"):
            remote = self._local_cpu(device)
            if remote is None:
                return
        else:
            nvs = self.kinds["NVS"]
            remote = nvs[0] if nvs else self.create("NVS", 0, xml_link.line)
        self.connect(device, remote, "NVL", bw)
        self.connect(remote, device, "NVL", bw)

    def _device_node(self, gpu: int) -> int:
        for kind, _, dst in self.nodes[gpu].links:
            if kind == "LOC" and self.nodes[dst].kind == "DEV":
                return dst
        return gpu

    def _local_cpu(self, start: int) -> int | None:
        """topo.cc findLocalCpu: walk up PCI links to the CPU."""
        seen = {start}
        frontier = [start]
        while frontier:
            node = frontier.pop(0)
            if self.nodes[node].kind == "CPU":
                return node
            for kind, _, dst in self.nodes[node].links:
                if kind == "PCI" and dst not in seen and self.nodes[dst].kind in ("PCI", "CPU"):
                    seen.add(dst)
                    frontier.append(dst)
        return None

    def _add_c2c(self, node: XmlNode, busid: str, sid: int, gpu_for: dict) -> None:
        rd = self.read
        gpu = gpu_for.get((sid, busid))
        if gpu is None:
            return
        count = rd.int(node, "count", required=True)
        bw_mbps = rd.int(node, "bw", required=True)
        device = self._device_node(gpu)
        cpu = self._local_cpu(device)
        if cpu is None:
            return
        bw = bw_mbps * count / 1000.0
        kind = self.rules.c2c_link_kind
        self.connect(device, cpu, kind, bw)
        self.connect(cpu, device, kind, bw)

    def _add_pcilink(self, node: XmlNode, busid: str, sid: int) -> None:
        rd = self.read
        target = rd.busid(node, "target")
        here = self.get("PCI", (sid << 56) + busid_to_int(busid)) if busid else None
        if here is None:
            raise rd.fail(node, f"<pcilink> sits in {busid}, which is not a PCI switch", "a <pcilink> inside a switch <pci>")
        remote = self.get("PCI", (sid << 56) + busid_to_int(target))
        if remote is not None:
            self.connect(here, remote, "LOC", LOC_BW)
            self.one_way.append((here, remote, "LOC", node))

    # -- Broadcom switch flattening (ncclTopoFlattenBcmSwitches)
    @staticmethod
    def _bcm_gen(device: int, level: int) -> int:
        if (device & 0xFFFFFFFFFFFFF000) == 0x1000C0101000A000:
            return 4
        if (device & 0xFFFFFFFFFFFFF000) == (0x1000C03010000000 | level * 0x1000):
            return 5
        return 0

    def flatten_bcm(self) -> None:
        if not self.rules.bcm_gen5:
            self._flatten_bcm_gen4_only()
            return
        restart = True
        while restart:
            restart = False
            for sw in [i for i in self.kinds["PCI"] if self.nodes[i].alive]:
                gen = self._bcm_gen(self.nodes[sw].pci_device, 0)
                if not gen:
                    continue
                subs = [l[2] for l in self.nodes[sw].links if self.nodes[l[2]].kind == "PCI"
                        and self._bcm_gen(self.nodes[l[2]].pci_device, 1) == gen]
                self._fuse(sw, subs)
                self.nodes[sw].pci_device |= 0xFFFF
                restart = True
                break

    def _flatten_bcm_gen4_only(self) -> None:
        """2.18-2.19: only PEX Gen4 switches in base mode, sub-switches with the very same id."""
        restart = True
        while restart:
            restart = False
            for sw in [i for i in self.kinds["PCI"] if self.nodes[i].alive]:
                device = self.nodes[sw].pci_device
                if (device & 0xFFFFFFFFFFFFF000) != 0x1000C0101000A000:
                    continue
                subs = [l[2] for l in self.nodes[sw].links
                        if self.nodes[l[2]].kind == "PCI" and self.nodes[l[2]].pci_device == device]
                self._fuse(sw, subs)
                self.nodes[sw].pci_device = 0x1000C01010000000
                restart = True
                break

    def _fuse(self, sw: int, subs: list[int]) -> None:
        """Move the sub-switches' links up to `sw` and remove the sub-switches."""
        self.nodes[sw].links = [l for l in self.nodes[sw].links if l[2] not in subs]
        for sub in subs:
            for kind, bw, dst in self.nodes[sub].links:
                if dst == sw:
                    continue
                self.nodes[sw].links.append([kind, bw, dst])
                for back in self.nodes[dst].links:
                    if back[2] == sub:
                        back[2] = sw
                        break
            self._remove(sub)

    def _remove(self, index: int) -> None:
        node = self.nodes[index]
        node.alive = False
        self.kinds[node.kind].remove(index)
        for other in self.nodes:
            other.links = [l for l in other.links if l[2] != index]

    # -- CPUs and ordering
    def connect_cpus(self) -> None:
        cpus = self.kinds["CPU"]
        for a in cpus:
            for b in cpus:
                if a == b or (self.nodes[a].id >> 56) != (self.nodes[b].id >> 56):
                    continue
                self.connect(a, b, "SYS", self._inter_cpu_bw(self.nodes[a].cpu))

    def _inter_cpu_bw(self, cpu: CpuInfo) -> float:
        if cpu.arch == CPU_ARCH["ppc64"]:
            return P9_BW
        if cpu.arch == CPU_ARCH["arm64"]:
            return ARM_BW
        if cpu.arch == CPU_ARCH["x86_64"] and cpu.vendor == 1:
            return {4: ERP_QPI_BW, 3: SRP_QPI_BW, 2: SKL_QPI_BW}.get(cpu.model, BDW_QPI_BW)
        if cpu.arch == CPU_ARCH["x86_64"] and cpu.vendor == 2 and self.rules.amd_sys_bw is not None:
            return self.rules.amd_sys_bw
        if cpu.arch == CPU_ARCH["x86_64"] and cpu.vendor == 3:
            return YONGFENG_ZPI_BW if cpu.model == _YONGFENG else ZPI_BW
        return LOC_BW

    def sort(self) -> None:
        """ncclTopoSortSystem: within the PCI tree, each node's uplink goes last."""
        def rec(node: int, up: int | None, seen: set) -> None:
            seen.add(node)
            links = self.nodes[node].links
            if up is not None:
                pos = next(i for i, l in enumerate(links) if l[2] == up)
                links.append(links.pop(pos))
            for kind, _, dst in list(links):
                if kind == "PCI" and dst != up and dst not in seen:
                    rec(dst, node, seen)
        for cpu in list(self.kinds["CPU"]):
            rec(cpu, None, set())

    def check_nccl_limits(self, root: XmlNode) -> None:
        """NCCL reads a topology file into fixed tables (xml.h); say where this file goes past them.
        A fused multi-host NVLink domain legitimately does: NCCL builds it in memory, not from one file."""
        rules = self.rules
        elements = sum(1 for _ in root.iter())
        if elements > rules.xml_max_nodes:
            self.note(root, f"{elements} XML elements: NCCL {rules.version.line} reads at most "
                            f"{rules.xml_max_nodes} from one NCCL_TOPO_FILE (a fused multi-host domain is built "
                            "in memory instead)")
        for node in root.iter():
            if len(node.children) > rules.xml_max_subs:
                self.note(node, f"<{node.tag}> has {len(node.children)} children: NCCL {rules.version.line} "
                                f"reads at most {rules.xml_max_subs} per element from a file")
            if len(node.attrs) > rules.xml_max_attrs:
                self.note(node, f"<{node.tag}> has {len(node.attrs)} attributes: NCCL reads at most "
                                f"{rules.xml_max_attrs} per element")

    def check_node_counts(self, root: XmlNode) -> None:
        """NCCL keeps each kind of node in a table of NCCL_TOPO_MAX_NODES (graph.h) and stops with
        "tried to create too many nodes" past it (topo.cc ncclTopoCreateNode): refused here, before
        any work that grows with the square or the cube of the count."""
        most = self.rules.release.topo_max_nodes
        counts: dict[str, int] = {}
        for node in root.iter():
            if node.tag in ("cpu", "gpu", "nic", "net"):
                counts[node.tag] = counts.get(node.tag, 0) + 1
        for tag, count in counts.items():
            if count > most:
                raise self.read.fail(root, f"{count} <{tag}> elements: NCCL {self.rules.version.line} creates at most "
                                           f"{most} nodes of a kind (NCCL_TOPO_MAX_NODES)",
                                     f"at most {most} <{tag}> elements in one host's topology")

    def check_reverse_links(self) -> None:
        """Every link needs one back of the same kind: NCCL's path search stops with "Failed to find
        reverse path" otherwise (paths.cc ncclTopoSetPaths), so the file is refused here."""
        for a, b, kind, xml_node in self.one_way:
            if not any(l[2] == a and l[0] == kind for l in self.nodes[b].links):
                what = "NVLink" if kind == "NVL" else "<pcilink>"
                raise self.read.fail(
                    xml_node, f"{what} to {xml_node.get('target')} has no {what} back from it "
                              "(NCCL stops with 'Failed to find reverse path')",
                    f"the same {what} listed under both ends")

    def freeze(self, notes: tuple[str, ...]) -> System:
        alive = [i for i, n in enumerate(self.nodes) if n.alive]
        remap = {old: new for new, old in enumerate(alive)}
        nodes = []
        for old in alive:
            n = self.nodes[old]
            links = tuple(Link(k, bw, remap[dst]) for k, bw, dst in n.links)
            nodes.append(Node(n.kind, n.id, links, n.gpu, n.cpu, n.net, n.pci_device, n.line))
        kinds = MappingProxyType({k: tuple(remap[i] for i in v) for k, v in self.kinds.items() if v})
        return System(tuple(nodes), kinds, self.rules, self.source, tuple(self.host_hashes),
                      notes + tuple(self.notes) + tuple(self.gathered_notes()))


def build_system(doc: TopoXml, rules: TopoRules, notes: tuple[str, ...] = ()) -> System:
    """The System NCCL (at `rules.version`) builds from this topology document."""
    root = doc.root
    b = _Builder(rules, doc.source)
    b.check_nccl_limits(root)
    b.check_node_counts(root)
    version = root.get("version")
    if version is not None and version != "1":
        b.note(root, f"<system version=\"{version}\">; NCCL writes version 1")
    for child in root.children:
        if child.tag == "cpu":
            b.add_cpu(child)
        elif child.tag not in KNOWN_TAGS:
            b.note(child, f"<{child.tag}> is not an NCCL topology element; ignored")
    gpu_for = {}
    for index in b.kinds["GPU"]:
        node = b.nodes[index]
        gpu_for[(node.id >> 56, node.gpu.busid)] = index
    # NCCL's order: all NVLinks, then C2C links, then PCI switch peer links.
    for tag, add in (("nvlink", b._add_nvlink), ("c2c", b._add_c2c)):
        for node, busid, sid in b.walk(root):
            if node.tag == tag:
                add(node, busid, sid, gpu_for)
    for node, busid, sid in b.walk(root):
        if node.tag == "pcilink":
            b._add_pcilink(node, busid, sid)
    b.check_reverse_links()
    b.flatten_bcm()
    b.connect_cpus()
    b.sort()
    return b.freeze(notes)


# ---------------------------------------------------------------------------------------------
# Printing (ncclTopoPrint)


def node_label(system: System, index: int, link_target: bool = False) -> str:
    """A node as NCCL prints it: GPU/0-53000 (2.23+), GPU/53000 (2.18-2.21)."""
    node = system.nodes[index]
    style = system.rules.print_style
    if style == 218 or (style in (221, 222) and link_target):
        return f"{node.kind}/{node.id:X}"
    return f"{node.kind}/{node.system_id:x}-{node.local_id:x}"


def _node_line(system: System, index: int) -> str:
    node = system.nodes[index]
    label = node_label(system, index)
    if node.kind == "GPU":
        return f"{label} ({node.gpu.rank})"
    if node.kind == "CPU":
        return f"{label} ({node.cpu.arch}/{node.cpu.vendor}/{node.cpu.model})"
    if node.kind in ("PCI", "DEV"):
        return f"{label} ({node.pci_device:x})"
    return label


def _net_target(system: System, index: int) -> str:
    node = system.nodes[index]
    label = node_label(system, index, link_target=True)
    net = node.net
    if system.rules.print_style >= 226:
        return f"{label} ({net.coll}/{net.asic:x}/{net.port}/{net.bw_gbps:f})"
    return f"{label} ({net.asic:x}/{net.port}/{net.bw_gbps:f})"


def _print_rec(system: System, index: int, prev: int | None, prefix: str, out: list[str]) -> None:
    out.append(prefix + _node_line(system, index))
    pad = " " * len(prefix)
    style = system.rules.print_style
    for link in system.nodes[index].links:
        head = f"{pad}+ {link.kind}[{link.bw_gbps:2.1f}] - "
        if link.kind == "LOC":
            if style >= 222:
                out.append(head + node_label(system, link.dst, link_target=True))
            continue
        if link.kind == "PCI":
            if link.dst != prev:
                _print_rec(system, link.dst, index, head, out)
            continue
        target = system.nodes[link.dst]
        text = _net_target(system, link.dst) if target.kind == "NET" else node_label(system, link.dst, True)
        out.append(head + text)


def format_system(system: System, max_bw: float, total_bw: float) -> list[str]:
    """The lines NCCL_DEBUG_SUBSYS=GRAPH prints for the system (without the log prefix)."""
    out = [f"=== System : maxBw {max_bw:2.1f} totalBw {total_bw:2.1f} ==="]
    for cpu in system.of_kind("CPU"):
        _print_rec(system, cpu, None, "", out)
    out.append("==========================================")
    return out
