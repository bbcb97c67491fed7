"""Completing partial vendor topology files, and shaping a node to the cluster options.

Cloud vendors publish NCCL_TOPO_FILEs that describe only what NCCL cannot detect — PCIe
switches, NUMA, NIC placement — and leave GPUs, NVLinks or NIC details for the live machine
to fill in. `fill_topology` does that filling from a GpuModel and the cluster options, on
the XML itself (so `--dump-xml` writes the completed machine, as NCCL_TOPO_DUMP_FILE would),
and reports every assumption it made as a note. It never changes what the file states.

Rules, in order:
1. `<pci class="0x03....">` endpoints without a `<gpu>` get one (dev/rank in bus order).
2. A file with no GPU at all gets one GPU per leaf PCIe switch (a switch whose children are
   all endpoints), on the next free bus after the switch's endpoints; with no switch, the
   first class-less endpoints under the CPUs become GPUs (up to --gpus-per-node or the
   model's usual count).
   PCIe switches without link_speed then get the GPU's PCIe link, as the live machine would report.
3. Class-less leaf endpoints left over become NICs, and `<pci class="0x02....">` endpoints
   without `<nic>` get one (`--nic-gbps`, else the fabric's usual speed). On a fabric whose
   plugin fuses NICs (EFA: aws-ofi-nccl), the endpoints are first grouped the way the plugin
   groups them (`ofi_nic_groups`); each group becomes one NCCL device on its first NIC, and
   the other NICs of the group are left out, as NCCL trims PCI branches no device names.
4. If no GPU has an `<nvlink>`, NVLinks are added as the model is wired (NVSwitch, bridge
   pairs, DGX-1 cube-mesh).
5. `--gpus-per-node` keeps the first G GPUs; `--nics-per-node` keeps the first K NICs or adds
   NICs next to the GPUs; `--nic-gbps` sets every NIC's speed; `--fabric tcp` turns GDR off.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import TopologyError, UsageError
from .hardware import CUBE_MESH_8, Fabric, GpuModel, gpu_model_for_device
from .xml import TopoXml, XmlNode

__all__ = ["FillOptions", "FilledTopology", "fill_topology", "ofi_nic_groups", "parse_busid", "format_busid"]

NVSWITCH_CLASS = "0x068000"
# An NVLink to an NVSwitch whose bus id is not known: NCCL 2.30.7 src/graph/xml.cc (ncclTopoGetXmlFromGpu)
# writes this sentinel as the target where NVML gives no bus id for the remote end, and reads it back as
# an NVSwitch (so since 2.7.6); topo.cc (ncclTopoAddNvLinks) parses the target of GPU peers only.
_NVSWITCH_TARGET = "fffffff:ffff:ff"


@dataclass(frozen=True)
class FillOptions:
    """What the user said about the node: GPU model, counts, NIC speed and fabric."""

    gpu: GpuModel | None = None
    gpus_per_node: int | None = None
    nics_per_node: int | None = None
    nic_gbps: float | None = None
    fabric: Fabric | None = None
    sharp: bool = False


@dataclass(frozen=True)
class FilledTopology:
    """The completed document, the GPU model it was completed with, and what was assumed."""

    doc: TopoXml
    model: GpuModel | None
    notes: tuple[str, ...]


def parse_busid(text: str) -> tuple[int, int, int, int] | None:
    """'0000:4f:00.0' -> (domain, bus, device, function); None if it is not a bus id."""
    try:
        head, fn = text.strip().rsplit(".", 1)
        parts = head.split(":")
        if len(parts) == 2:
            parts = ["0"] + parts
        domain, bus, dev = (int(p, 16) for p in parts)
        return domain, bus, dev, int(fn, 16)
    except (ValueError, AttributeError):
        return None


def format_busid(domain: int, bus: int, dev: int = 0, fn: int = 0) -> str:
    return f"{domain:04x}:{bus:02x}:{dev:02x}.{fn:x}"


def _is_gpu_pci(node: XmlNode) -> bool:
    return node.tag == "pci" and (node.get("class") or "").lower().startswith("0x03")


def _is_nic_pci(node: XmlNode) -> bool:
    return node.tag == "pci" and (node.get("class") or "").lower().startswith("0x02")


def _is_leaf_endpoint(node: XmlNode) -> bool:
    return node.tag == "pci" and not any(c.tag == "pci" for c in node.children)


def _is_classless_endpoint(node: XmlNode) -> bool:
    return node.tag == "pci" and node.get("class") is None and not node.children


def _map(node: XmlNode, fn) -> XmlNode:
    """Rebuild the tree bottom-up through fn(node_with_mapped_children)."""
    children = tuple(_map(c, fn) for c in node.children)
    return fn(node.with_children(children) if children != node.children else node)


def _hosts(root: XmlNode) -> list[list[XmlNode]]:
    """CPU elements grouped by host_hash, in document order (NCCL's systemId order)."""
    order: list[str] = []
    groups: dict[str, list[XmlNode]] = {}
    for cpu in root.findall("cpu"):
        key = cpu.get("host_hash") or "0"
        if key not in groups:
            order.append(key)
            groups[key] = []
        groups[key].append(cpu)
    return [groups[k] for k in order]


def _gpu_elements(root: XmlNode) -> list[tuple[XmlNode, XmlNode]]:
    return [(p, g) for p in root.iter() if p.tag == "pci" for g in p.findall("gpu")]


def _infer_model(root: XmlNode, given: GpuModel | None) -> GpuModel | None:
    if given is not None:
        return given
    for node in root.iter():
        if _is_gpu_pci(node) and node.get("device"):
            try:
                model = gpu_model_for_device(int(node.get("device"), 16))
            except ValueError:
                model = None
            if model:
                return model
    return None


def _gpu_pci(model: GpuModel, busid: str) -> XmlNode:
    return XmlNode("pci", (
        ("busid", busid), ("class", model.pci_class), ("vendor", "0x10de"),
        ("device", f"0x{model.pci_devices[0]:04x}"), ("subsystem_vendor", "0x10de"),
        ("subsystem_device", "0x0000"), ("link_speed", model.pcie_speed),
        ("link_width", str(model.pcie_width)),
    ))


def _gpu_child(model: GpuModel) -> XmlNode:
    children = ()
    if model.c2c_count:
        children = (XmlNode("c2c", (("bw", str(model.c2c_bw_mbps)), ("count", str(model.c2c_count)))),)
    # dev/rank are numbered afterwards, in bus order.
    return XmlNode("gpu", (("dev", "-1"), ("sm", str(model.sm)), ("rank", "-1"), ("gdr", "1")), children)


def _next_free_bus(switch: XmlNode, used: set[tuple[int, int]]) -> str | None:
    ids = [parse_busid(c.get("busid") or "") for c in switch.children if c.tag == "pci"]
    ids = [i for i in ids if i]
    base = parse_busid(switch.get("busid") or "")
    if not ids and not base:
        return None
    domain = (ids or [base])[0][0]
    bus = max((i[1] for i in ids), default=base[1]) + 1
    while (domain, bus) in used and bus < 0xFF:
        bus += 1
    used.add((domain, bus))
    return format_busid(domain, bus)


def _used_buses(root: XmlNode) -> set[tuple[int, int]]:
    used = set()
    for node in root.iter():
        if node.tag == "pci":
            bid = parse_busid(node.get("busid") or "")
            if bid:
                used.add((bid[0], bid[1]))
    return used


class _Filler:
    """Applies the rules of the module docstring to one document, collecting notes."""

    def __init__(self, doc: TopoXml, opts: FillOptions):
        self.doc = doc
        self.opts = opts
        self.notes: list[str] = []
        self.root = doc.root
        self.model = _infer_model(self.root, opts.gpu)
        self.inferred = opts.gpu is None and self.model is not None
        self.rails: dict[int, int] = {}  # NET dev -> NICs fused into it (rule 3)

    # Rule 1
    def add_missing_gpu_elements(self) -> None:
        bare = [n for n in self.root.iter() if _is_gpu_pci(n) and not n.findall("gpu")]
        if not bare:
            return
        if self.model is None:
            self.notes.append(f"{len(bare)} GPU PCI endpoint(s) have no <gpu> element and are ignored, "
                              "as NCCL ignores them without a live GPU; pass --gpu MODEL to complete them")
            return
        model = self.model

        def fn(node):
            if _is_gpu_pci(node) and not node.findall("gpu"):
                return node.with_children(node.children + (_gpu_child(model),))
            return node
        self.root = _map(self.root, fn)
        how = " (model inferred from the PCI device id)" if self.inferred else ""
        self.notes.append(f"completed {len(bare)} GPU endpoint(s) as {model.marketing} (sm {model.sm}){how}")

    # Rule 2
    def place_gpus(self) -> None:
        if _gpu_elements(self.root) or any(_is_gpu_pci(n) for n in self.root.iter()):
            return
        if self.model is None:
            self.notes.append("the file has no GPU; pass --gpu MODEL to place GPUs in it")
            return
        model = self.model
        leaf_switches = [n for n in self.root.iter()
                         if n.tag == "pci" and n.children
                         and all(_is_leaf_endpoint(c) for c in n.children if c.tag == "pci")
                         and any(c.tag == "pci" for c in n.children)
                         and not _is_gpu_pci(n) and not _is_nic_pci(n)]
        used = _used_buses(self.root)
        if leaf_switches:
            wanted = self.opts.gpus_per_node or len(leaf_switches)
            chosen = {id(s) for s in leaf_switches[:wanted]}
            placed = []

            def fn(node, _original):
                busid = _next_free_bus(node, used)
                gpu = _gpu_pci(model, busid).with_children((_gpu_child(model),))
                placed.append(busid)
                return node.with_children(node.children + (gpu,))
            self.root = _map_marked(self.root, chosen, fn)
            self.notes.append(f"placed {len(placed)} {model.marketing} GPU(s), one per leaf PCIe switch, "
                              f"at {', '.join(placed)} (bus ids assumed)")
            return
        slots = [n for n in self.root.iter() if _is_classless_endpoint(n)]
        wanted = min(len(slots), self.opts.gpus_per_node or model.default_count)
        chosen = {id(s) for s in slots[:wanted]}

        def fn(node, _original):
            pci = _gpu_pci(model, node.get("busid") or "")
            return pci.with_children((_gpu_child(model),))
        self.root = _map_marked(self.root, chosen, fn)
        self.notes.append(f"made {wanted} class-less root-port endpoint(s) {model.marketing} GPU(s), in file order")

    def fill_switch_links(self) -> None:
        """Switches the file gives no link speed/width get the GPU model's PCIe link, as sysfs would."""
        if self.model is None or not _gpu_elements(self.root):
            return
        model = self.model
        count = {"n": 0}

        def fn(node):
            if node.tag == "pci" and any(c.tag == "pci" for c in node.children) and node.get("link_speed") is None:
                count["n"] += 1
                node = node.with_attr("link_speed", model.pcie_speed)
                if node.get("link_width") is None:
                    node = node.with_attr("link_width", str(model.pcie_width))
            return node
        self.root = _map(self.root, fn)
        if count["n"]:
            self.notes.append(f"gave {count['n']} PCIe switch(es) without link_speed the GPU's link "
                              f"({model.pcie_speed} x{model.pcie_width}; assumed)")

    # Rule 3
    def complete_nics(self) -> None:
        fab = self.opts.fabric
        gbps = self.opts.nic_gbps or (fab.default_gbps if fab else 100)
        existing = [n for n in self.root.iter() if n.tag == "net"]
        next_dev = 1 + max((_int_or(n.get("dev"), -1) for n in existing), default=-1)
        nic_class = fab.pci_class if fab else "0x020000"
        has_gpus = bool(_gpu_elements(self.root))
        bare = [n for n in self.root.iter() if n.tag == "pci" and n.find("nic") is None
                and (_is_nic_pci(n) or (_is_classless_endpoint(n) and has_gpus))]
        if not bare:
            return
        groups = self._nic_groups(bare, fab, gbps)
        devices = {id(group[0]): (next_dev + i, len(group)) for i, group in enumerate(groups)}
        dropped = {id(n) for group in groups for n in group[1:]}

        if dropped:
            self.root = _drop_marked(self.root, dropped, prune=True)  # leaders are leaves: kept as they are
            self.rails = {dev: rails for dev, rails in devices.values()}

        def fn(node, original):
            dev, rails = devices[id(original)]
            net = _net_element(fab, dev, gbps, rails)
            node = node if node.get("class") else node.with_attr("class", nic_class)
            return node.with_children(node.children + (XmlNode("nic", (), (net,)),))
        self.root = _map_marked(self.root, set(devices), fn)
        if not (fab and fab.max_rails > 1):
            self.notes.append(f"completed {len(bare)} NIC(s) at {gbps:g} Gbit/s"
                              + ("" if self.opts.nic_gbps else " (assumed; set --nic-gbps)"))

    def _nic_groups(self, bare: list[XmlNode], fab: Fabric | None, gbps: float) -> list[list[XmlNode]]:
        """One list per NCCL device, its first NIC first: the plugin's NIC groups where the fabric
        fuses NICs and the plugin would accept them, else one device per NIC."""
        single = [[n] for n in bare]
        if fab is None or fab.max_rails <= 1:
            return single
        speed = "" if self.opts.nic_gbps else " (assumed; set --nic-gbps)"
        gpus = [p for p in self.root.iter() if p.tag == "pci" and (p.findall("gpu") or _is_nvidia_gpu_pci(p))]
        if not gpus:
            self.notes.append(f"completed {len(bare)} {fab.name.upper()} NIC(s) at {gbps:g} Gbit/s{speed}, "
                              f"one NCCL device each: with no GPU in the file the plugin has nothing to group them by")
            return single
        groups, lonely = ofi_nic_groups(self.root, bare, gpus)
        sizes = sorted({len(g) for g in groups})
        refusal = None
        if lonely:
            refusal = (f"{len(lonely)} NIC(s) share no PCIe subtree with a GPU's nearest NICs "
                       f"(\"Unable to attach NIC to accelerator\")")
        elif len(sizes) > 1:
            refusal = f"its NIC groups differ in size ({'/'.join(map(str, sizes))}: \"Wrong number of NICs for device\")"
        elif sizes[0] > fab.max_rails:
            refusal = f"its NIC groups hold {sizes[0]} NICs, more than MAX_NUM_RAILS ({fab.max_rails})"
        if refusal:
            self.notes.append(f"aws-ofi-nccl 1.9.2's RDMA protocol would refuse this machine: {refusal}; "
                              f"completed {len(bare)} NIC(s) at {gbps:g} Gbit/s{speed}, one NCCL device each, "
                              "as its SENDRECV protocol presents them")
            return single
        rails = sizes[0]
        latency = (f", latency {fab.net_latency_us:g} us (the plugin's value on p4d/p4de/p5; assumed)"
                   if fab.net_latency_us else "")
        if rails == 1:
            self.notes.append(f"completed {len(bare)} {fab.name.upper()} NIC(s) at {gbps:g} Gbit/s{speed}{latency}, "
                              "one NCCL device each (aws-ofi-nccl 1.9.2 NIC groups: no GPU here has more "
                              "than one nearest NIC)")
            return groups
        self.notes.append(
            f"presented {len(bare)} {fab.name.upper()} NICs as aws-ofi-nccl 1.9.2's RDMA protocol does: "
            f"{len(groups)} NCCL devices of {rails} NICs, one per GPU-nearest group, each at "
            f"{rails} x {gbps:g} Gbit/s{speed}{latency}, on its first NIC's PCI path "
            f"({', '.join(g[0].get('busid') for g in groups)}); the other {len(bare) - len(groups)} NIC endpoints "
            "are left out, as NCCL trims what no device names (assumed: RDMA protocol, the plugin's "
            "default on p5.48xlarge)")
        return groups

    # Rule 4
    def add_nvlinks(self) -> None:
        gpus = _gpu_elements(self.root)
        if not gpus or self.model is None or self.model.nvlinks == 0:
            return
        if any(g.findall("nvlink") for _, g in gpus):
            return
        model = self.model
        if self.inferred and model.nvlink_wiring != "nvswitch":
            # Bridges on PCIe boards are optional: only add them when the user names the model.
            self.notes.append(f"{model.marketing} NVLink bridges not added (pass --gpu {model.name} to add them)")
            return
        per_host = _gpu_busids_by_host(self.root)
        links: dict[str, tuple[XmlNode, ...]] = {}
        for busids in per_host:
            links.update(_nvlink_plan(model, busids))

        def fn(node):
            if node.tag == "pci" and node.get("busid") in links and node.findall("gpu"):
                kids = tuple(g.with_children(g.children + links[node.get("busid")]) if g.tag == "gpu" else g
                             for g in node.children)
                return node.with_children(kids)
            return node
        self.root = _map(self.root, fn)
        self.notes.append(f"added {model.marketing} NVLinks ({model.nvlinks} per GPU, {model.nvlink_wiring})")

    def number_gpus(self) -> None:
        """Give completed GPUs (dev=-1) the next free dev (per host) and rank, in bus order."""
        gpus = _gpu_elements(self.root)
        if not any(g.get("dev") == "-1" for _, g in gpus):
            return
        host_of = _host_index_of_pci(self.root)
        taken_ranks = {_int_or(g.get("rank"), -1) for _, g in gpus}
        taken_devs = {(host_of.get(id(p), 0), _int_or(g.get("dev"), -1)) for p, g in gpus}
        fresh = [p for p, g in gpus if g.get("dev") == "-1"]
        fresh.sort(key=lambda p: (host_of.get(id(p), 0), parse_busid(p.get("busid") or "") or (0, 0, 0, 0)))
        renumber: dict[int, tuple[int, int]] = {}
        rank = dev = 0
        for pci in fresh:
            host = host_of.get(id(pci), 0)
            while rank in taken_ranks:
                rank += 1
            dev = 0
            while (host, dev) in taken_devs:
                dev += 1
            renumber[id(pci)] = (dev, rank)
            taken_ranks.add(rank)
            taken_devs.add((host, dev))

        def fn(node, original):
            dev, rank = renumber[id(original)]
            kids = tuple(g.with_attr("dev", str(dev)).with_attr("rank", str(rank))
                         if g.tag == "gpu" and g.get("dev") == "-1" else g for g in node.children)
            return node.with_children(kids)
        self.root = _map_marked(self.root, set(renumber), fn)

    # Rule 5
    def apply_counts(self) -> None:
        opts = self.opts
        if opts.gpus_per_node is not None:
            self._keep_gpus(opts.gpus_per_node)
        if opts.nics_per_node is not None:
            self._shape_nics(opts.nics_per_node)
        if opts.nic_gbps is not None:
            mbps = int(round(opts.nic_gbps * 1000))
            # A fused device reports the sum of its NICs (nccl_ofi_rdma.c get_properties: speed * num_rails).
            self.root = _map(self.root, lambda n: n.with_attr(
                "speed", str(mbps * self.rails.get(_int_or(n.get("dev"), -1), 1))) if n.tag == "net" else n)
        if opts.fabric is not None and not opts.fabric.gdr:
            self.root = _map(self.root, lambda n: n.with_attr("gdr", "0") if n.tag == "net" else n)
        if opts.sharp:  # a CollNet (SHARP) plugin reports each device it serves: topo.cc sets net "coll" to 1
            self.root = _map(self.root, lambda n: n.with_attr("coll", "1") if n.tag == "net" else n)

    def _keep_gpus(self, count: int) -> None:
        gpus = sorted(_gpu_elements(self.root), key=lambda pg: _int_or(pg[1].get("rank"), 0))
        if count < 1 or count > len(gpus):
            raise UsageError(f"{count} GPUs per node asked, the system has {len(gpus)}", "--gpus-per-node",
                             f"1..{len(gpus)}")
        if count == len(gpus):
            return
        drop = {id(p) for p, _ in gpus[count:]}
        gone = {(p.get("busid") or "").lower() for p, _ in gpus[count:]}
        self.root = _drop_marked(self.root, drop)
        # NVLinks to GPUs that are no longer there go too (NVSwitch links stay).
        self.root = _map(self.root, lambda n: n.with_children(tuple(
            c for c in n.children
            if not (c.tag == "nvlink" and (c.get("tclass") or "").startswith("0x03")
                    and (c.get("target") or "").lower() in gone))) if n.tag == "gpu" else n)
        self.notes.append(f"kept the first {count} of {len(gpus)} GPUs (by rank)")

    def _shape_nics(self, count: int) -> None:
        nets = [n for n in self.root.iter() if n.tag == "net"]
        if count < 0:
            raise UsageError(f"{count} NICs per node", "--nics-per-node", "0 or more")
        if count < len(nets):
            keep = {id(n) for n in sorted(nets, key=lambda n: _int_or(n.get("dev"), 0))[:count]}
            self.root = _drop_nets_except(self.root, keep)
            self.notes.append(f"kept the first {count} of {len(nets)} NICs (by dev)")
        elif count > len(nets):
            self._add_nics(count - len(nets), len(nets))

    def _add_nics(self, extra: int, start_dev: int) -> None:
        fab = self.opts.fabric
        gbps = self.opts.nic_gbps or (fab.default_gbps if fab else 100)
        parents = [p for p in self.root.iter() if p.tag == "pci" and any(_is_gpu_pci(c) for c in p.children)]
        if not parents:
            parents = list(self.root.findall("cpu"))
        if not parents:
            raise TopologyError("no CPU to attach NICs to", self.doc.source)
        used = _used_buses(self.root)
        plan: dict[int, list[XmlNode]] = {}
        for i in range(extra):
            parent = parents[i % len(parents)]
            busid = _next_free_bus(parent, used) if parent.tag == "pci" else None
            if busid is None:
                domain = 0
                bus = 0xA0
                while (domain, bus) in used:
                    bus += 1
                used.add((domain, bus))
                busid = format_busid(domain, bus)
            net = _net_element(fab, start_dev + i, gbps)
            pci = XmlNode("pci", (("busid", busid), ("class", fab.pci_class if fab else "0x020000"),
                                  ("vendor", "0x15b3"), ("device", "0x1021"), ("subsystem_vendor", "0x15b3"),
                                  ("subsystem_device", "0x0000"), ("link_speed", "32.0 GT/s PCIe"),
                                  ("link_width", "16")), (XmlNode("nic", (), (net,)),))
            plan.setdefault(id(parent), []).append(pci)

        def fn(node, original):
            return node.with_children(node.children + tuple(plan[id(original)]))
        self.root = _map_marked(self.root, set(plan), fn)
        self.notes.append(f"added {extra} NIC(s) at {gbps:g} Gbit/s next to the GPUs")

    def refuse_a_gpu_model_the_file_contradicts(self) -> None:
        """--gpu completes GPUs a file lacks; on a file whose GPUs are there as another model it
        would be ignored, and the answer would be for GPUs the user did not ask for."""
        if self.opts.gpu is None:
            return
        for node in self.root.iter():
            if _is_gpu_pci(node) and node.findall("gpu") and node.get("device"):
                try:
                    there = gpu_model_for_device(int(node.get("device"), 16))
                except ValueError:
                    there = None
                if there is not None and there.name != self.opts.gpu.name:
                    raise UsageError(f"the system's GPUs are {there.marketing}, not {self.opts.gpu.marketing}",
                                     "--gpu", "no --gpu, or a topology file whose GPUs it completes")

    def run(self) -> FilledTopology:
        self.refuse_a_gpu_model_the_file_contradicts()
        self.add_missing_gpu_elements()
        self.place_gpus()
        self.number_gpus()
        self.fill_switch_links()
        self.complete_nics()
        self.add_nvlinks()
        self.apply_counts()
        doc = TopoXml(root=self.root, comments=self.doc.comments, source=self.doc.source)
        return FilledTopology(doc=doc, model=self.model, notes=tuple(self.notes))


def _int_or(text: str | None, default: int) -> int:
    try:
        return int(text, 0) if text is not None else default
    except ValueError:
        return default


def _net_element(fab: Fabric | None, dev: int, gbps: float, rails: int = 1) -> XmlNode:
    """A <net> as ncclTopoGetSystem writes it from the plugin's properties (topo.cc: speed, port,
    latency "%f", guid "0x%lx", maxconn, gdr); a fused device reports rails x the NIC speed."""
    prefix, suffix = (fab.nic_prefix, fab.nic_suffix) if fab else ("mlx5_", "")
    gdr = "1" if (fab is None or fab.gdr) else "0"
    latency = fab.net_latency_us if fab else 0.0
    guid = dev if (fab and fab.guid_is_dev) else 0x1000 + dev
    maxconn = fab.net_maxconn if fab else 131072
    return XmlNode("net", (
        ("name", f"{prefix}{dev}{suffix}"), ("dev", str(dev)), ("speed", str(int(round(gbps * 1000)) * rails)),
        ("port", "1"), ("latency", f"{latency:f}"), ("guid", f"0x{guid:x}"),
        ("maxconn", str(maxconn)), ("gdr", gdr),
    ))


def _is_nvidia_gpu_pci(node: XmlNode) -> bool:
    """hwloc's view of an accelerator (nccl_ofi_topo.c is_accelerator_dev: class 0x03, vendor 0x10de)."""
    return _is_gpu_pci(node) and (node.get("vendor") or "0x10de").lower() == "0x10de"


def ofi_nic_groups(root: XmlNode, nics: list[XmlNode],
                    gpus: list[XmlNode]) -> tuple[list[list[XmlNode]], list[XmlNode]]:
    """aws-ofi-nccl v1.9.2-aws nccl_ofi_topo_group (src/nccl_ofi_topo.c), on the file's PCI tree:

    - every node with a NIC below it is marked (mark_topo_nodes_with_ofi_info_subtree);
    - each GPU adds one group to its nearest marked ancestor (propoagate_accel_count);
    - each NIC, in PCI device order, is prepended to the list of its nearest ancestor with groups
      (lift_up_ofi_infos), so a list runs from the highest bus id down;
    - a list of n NICs for g groups is cut into min(g, n) runs, the first n % g of them one longer
      (create_groups_from_info_list); a group's first NIC is its leader, whose properties and
      sysfs path the NCCL device reports;
    - devices follow the leaders in PCI device order (nccl_ofi_topo_next_info_list).

    hwloc lists PCI devices in bus order; each host's tree ends at its own machine root.
    Returns the groups in device order and the NICs no group could take (the plugin then fails)."""
    parent: dict[int, object] = {}
    host_of: dict[int, int] = {}

    def link(node: XmlNode, host: int) -> None:
        for child in node.children:
            parent[id(child)] = id(node)
            host_of[id(child)] = host
            link(child, host)
    for host, cpus in enumerate(_hosts(root)):
        for cpu in cpus:
            parent[id(cpu)] = ("machine", host)
            host_of[id(cpu)] = host
            link(cpu, host)

    def chain(node: XmlNode):
        key: object = id(node)
        while True:
            yield key
            if key not in parent:
                return
            key = parent[key]

    def order(node: XmlNode):
        return host_of.get(id(node), 0), parse_busid(node.get("busid") or "") or (0, 0, 0, 0)

    nics = sorted(nics, key=order)
    marked = {key for nic in nics for key in chain(nic)}
    wanted: dict[object, int] = {}
    for gpu in gpus:
        near = next((key for key in chain(gpu) if key in marked), None)
        if near is not None:
            wanted[near] = wanted.get(near, 0) + 1
    lists: dict[object, list[XmlNode]] = {}
    lonely = []
    for nic in nics:
        home = next((key for key in chain(nic) if wanted.get(key, 0) > 0), None)
        if home is None:
            lonely.append(nic)
        else:
            lists.setdefault(home, []).insert(0, nic)
    groups = []
    for home, members in lists.items():
        count = min(wanted[home], len(members))
        large = len(members) % count
        size = len(members) // count + 1
        start = 0
        for index in range(count):
            if index == large:
                size -= 1
            groups.append(members[start:start + size])
            start += size
    rank = {id(n): i for i, n in enumerate(nics)}
    groups.sort(key=lambda g: rank[id(g[0])])
    return groups, lonely


def _map_marked(root: XmlNode, marked: set[int], fn) -> XmlNode:
    """Rebuild the tree; nodes whose original id() is in `marked` become fn(mapped, original)."""
    def rec(node: XmlNode) -> XmlNode:
        children = tuple(rec(c) for c in node.children)
        mapped = node.with_children(children) if children != node.children else node
        return fn(mapped, node) if id(node) in marked else mapped
    return rec(root)


def _drop_marked(root: XmlNode, marked: set[int], prune: bool = False) -> XmlNode:
    """The tree without the marked nodes; with `prune`, PCI switches left empty by that go too
    (xml.cc ncclTopoTrimXml drops PCI branches holding nothing NCCL keeps)."""
    def rec(node: XmlNode) -> XmlNode | None:
        kids = tuple(k for k in (rec(c) for c in node.children if id(c) not in marked) if k is not None)
        if prune and node.tag == "pci" and node.children and not kids:
            return None
        return node.with_children(kids) if kids != node.children else node
    return rec(root)


def _drop_nets_except(root: XmlNode, keep: set[int]) -> XmlNode:
    def rec(node: XmlNode) -> XmlNode | None:
        if node.tag == "net" and id(node) not in keep:
            return None
        kids = tuple(k for k in (rec(c) for c in node.children) if k is not None)
        if node.tag == "nic" and not kids:
            return None
        if node.tag == "pci" and node.children and not kids and any(c.tag == "nic" for c in node.children):
            return None  # a NIC endpoint whose ports were all dropped
        return node.with_children(kids) if kids != node.children else node
    return rec(root)


def _host_index_of_pci(root: XmlNode) -> dict[int, int]:
    index: dict[int, int] = {}
    for host, cpus in enumerate(_hosts(root)):
        for cpu in cpus:
            for node in cpu.iter():
                index[id(node)] = host
    return index


def _gpu_busids_by_host(root: XmlNode) -> list[list[str]]:
    result = []
    for cpus in _hosts(root):
        pcis = [n for cpu in cpus for n in cpu.iter() if n.tag == "pci" and n.findall("gpu")]
        pcis.sort(key=lambda p: _int_or(p.find("gpu").get("dev"), 0))
        result.append([p.get("busid") for p in pcis])
    return result


def _nvlink_plan(model: GpuModel, busids: list[str]) -> dict[str, tuple[XmlNode, ...]]:
    """NVLink elements per GPU bus id for one host, by the model's wiring."""
    plan: dict[str, tuple[XmlNode, ...]] = {}
    if model.nvlink_wiring == "nvswitch":
        link = XmlNode("nvlink", (("target", _NVSWITCH_TARGET), ("count", str(model.nvlinks)),
                                  ("tclass", NVSWITCH_CLASS)))
        return {b: (link,) for b in busids}
    if model.nvlink_wiring == "pairs":
        for i in range(0, len(busids) - 1, 2):
            a, b = busids[i], busids[i + 1]
            plan[a] = (_gpu_link(b, model.nvlinks, model),)
            plan[b] = (_gpu_link(a, model.nvlinks, model),)
        return plan
    if model.nvlink_wiring == "cube-mesh" and len(busids) == 8:
        for (i, j), count in CUBE_MESH_8.items():
            plan[busids[i]] = plan.get(busids[i], ()) + (_gpu_link(busids[j], count, model),)
            plan[busids[j]] = plan.get(busids[j], ()) + (_gpu_link(busids[i], count, model),)
        return plan
    return plan


def _gpu_link(target: str, count: int, model: GpuModel) -> XmlNode:
    return XmlNode("nvlink", (("target", target), ("count", str(count)), ("tclass", model.pci_class)))


def fill_topology(doc: TopoXml, opts: FillOptions = FillOptions()) -> FilledTopology:
    """Complete a partial topology document and shape it to the cluster options."""
    return _Filler(doc, opts).run()
