"""Which links each of a plan's transfers crosses: NCCL's transports laid over the fabric.

`Router(job, fabric, graph_name)` promises, for the connections a plan's programs use:
- `peer(channel, src, dst)`: inside a node, NCCL's GPU-to-GPU path (P2P over NVLink or PCIe, or
  SHM through the CPU where that is the transport); across nodes, NET: from the sending GPU to the
  NIC the graph gives the channel (through the PXN proxy GPU when NCCL routes it so, through the
  CPU when GPUDirect RDMA is off), over the network's cables, and from the peer's NIC to its GPU;
- `nvls_up(node, local)` / `nvls_down(node, local)`: a GPU's NVLink port to its NVSwitch and back
  (multicast and in-switch reduction traffic);
- `collnet_up(channel, rank)` / `collnet_down(channel, rank)`: a CollNet head's GPU to its NIC and
  into the first switch of the network (where SHARP reduces), and back;
- `cta(rank, channel)`: one virtual link per rank and channel standing for the CTA, through which
  every transfer that CTA drives passes (so a channel moves no faster than its CTA can);
  `ll(rank)`: one per rank that all its LL sends cross; `net_conn(rank, channel, slot)`: one per
  connection a rank sends on across the network (a primitive reaches at most NET_CONN_SLOTS peers
  there: a tree's two children);
- `peer_paths(channel, src, dst)`: for a NET peer, `peer`'s route through every spine between the
  two NICs' leaves (peer's own, through the D-mod-K spine, first: fabric.py cable_routes), over
  which queue pairs and adaptive routing spread a connection (ib.py); `peer`'s route alone
  otherwise; `net_parts(channel, src, dst)` the same as (head, cables of every spine route, tail);
  `crosses_network(src, dst)` whether `peer` would be NET.
Each route also says which NCCL hardware row prices its steps (NVLINK, PCI or NET). Routes are
computed once per connection and kept.
"""
from __future__ import annotations

from ..errors import UsageError
from ..graph.paths import p2p_net
from ..graph.transports import channel_net
from .fabric import Fabric, cable_routes, node_route

__all__ = ["Router", "HW_NVLINK", "HW_PCI", "HW_NET", "NET_CONN_SLOTS"]

HW_NVLINK, HW_PCI, HW_NET = "NVLINK", "PCI", "NET"
_PATTERN_NVLS = 5  # NCCL_TOPO_PATTERN_NVLS
NET_CONN_SLOTS = 2  # network peers one primitive sends to at most (a tree node's two children)


class Router:
    """Routes of one job's connections over its fabric, plus the CTA links (ids after the fabric's
    links and trunks)."""

    def __init__(self, job, fabric: Fabric, graph_name: str, n_channels: int):
        self.job, self.fabric = job, fabric
        self.paths = job.paths
        self.system = job.paths.system
        self.per_node = len(self.system.gpus())
        graphs = job.graphs
        # "p2p": point-to-point connections pick their NICs without a graph (ncclTopoGetNetDev).
        self.p2p = graph_name == "p2p"
        self.graph_name = graph_name if graph_name in graphs else "ring"
        self.graph = graphs[self.graph_name]
        self.n_channels = max(1, n_channels)
        self.cta_base = len(fabric.links) + len(fabric.trunks)
        self._cache: dict[tuple, tuple] = {}
        self._p2p_legs: dict[tuple, tuple | None] = {}
        self._cables_of: dict[tuple, tuple] = {}
        self._legs_on: dict[tuple, tuple[int, ...]] = {}
        nvs = self.system.of_kind("NVS")
        self.nvs = nvs[0] if nvs else None

    @property
    def n_links(self) -> int:
        return self.cta_base + self.job.nranks * ((1 + NET_CONN_SLOTS) * self.n_channels + 1)

    def cta(self, rank: int, channel: int) -> int:
        return self.cta_base + rank * self.n_channels + channel % self.n_channels

    def ll(self, rank: int) -> int:
        """The rank's LL sends as a link (LL's flag polling caps what a rank moves with it)."""
        return self.cta_base + self.job.nranks * self.n_channels + rank

    def net_conn(self, rank: int, channel: int, slot: int = 0) -> int:
        """One of the rank's network connections on `channel` (the `slot`-th peer across the network a
        primitive sends to) as a link: capacity 1 GB/s, so that a step costing t us is t x 1000
        bytes on it, and a connection's steps follow one another (hwparams.py net_step_us)."""
        return self.cta_base + self.job.nranks * (self.n_channels + 1) \
            + (rank * self.n_channels + channel % self.n_channels) * NET_CONN_SLOTS + slot

    def rank_link(self, link: int) -> tuple[int, int]:
        """(rank, how far apart two adjacent ranks' links of its kind are numbered) for one of a
        rank's own links (CTA, LL, network connection); (-1, 0) for a fabric link."""
        if link < self.cta_base:
            return -1, 0
        nranks, channels = self.job.nranks, self.n_channels
        offset = link - self.cta_base
        if offset < nranks * channels:
            return offset // channels, channels
        offset -= nranks * channels
        if offset < nranks:
            return offset, 1
        offset -= nranks
        return offset // (channels * NET_CONN_SLOTS), channels * NET_CONN_SLOTS

    def _gpu(self, rank: int) -> int:
        return self.system.gpu_by_rank(rank % self.per_node)

    def _cached(self, key: tuple, compute):
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def peer(self, channel: int, src: int, dst: int) -> tuple[tuple[int, ...], str]:
        return self._cached(("peer", channel, src, dst), lambda: self._peer(channel, src, dst))

    def _peer(self, channel: int, src: int, dst: int) -> tuple[tuple[int, ...], str]:
        n1, n2 = src // self.per_node, dst // self.per_node
        if src == dst:  # alltoall's own piece: a copy inside the GPU
            return (), HW_NVLINK
        if n1 == n2:
            route = node_route(self.fabric, n1, self._gpu(src), self._gpu(dst))
            kinds = {self.fabric.links[link].kind for link in route}
            return route, HW_NVLINK if kinds <= {"NVL", "LOC"} else HW_PCI
        head, cables, tail = self._net_parts(channel, src, dst)
        return head + cables[0] + tail, HW_NET

    def crosses_network(self, src: int, dst: int) -> bool:
        """Whether a connection from rank `src` to rank `dst` is NET (on another node), without
        building its route."""
        return src // self.per_node != dst // self.per_node

    def peer_paths(self, channel: int, src: int, dst: int) -> tuple[tuple[int, ...], ...]:
        if not self.crosses_network(src, dst):
            return (self.peer(channel, src, dst)[0],)
        head, cables, tail = self.net_parts(channel, src, dst)
        return tuple(head + c + tail for c in cables)

    def net_parts(self, channel: int, src: int, dst: int) -> tuple[tuple[int, ...], tuple, tuple[int, ...]]:
        """`peer_paths` between ranks on different nodes as its three parts: (the sender's GPU to its
        NIC, the cables of every spine route, D-mod-K's first, the receiver's NIC to its GPU). Kept
        per part, not per connection: an alltoall has a connection per pair of ranks."""
        return self._net_parts(channel, src, dst)

    def net_cables(self, channel: int, src: int, dst: int) -> tuple[tuple[int, ...], ...]:
        """The cables alone of `peer_paths` between ranks on different nodes, D-mod-K's first."""
        if self.p2p:
            return self._net_parts(channel, src, dst)[1]
        return self._cables(channel, src, dst)

    def _net_parts(self, channel: int, src: int, dst: int) -> tuple[tuple[int, ...], tuple, tuple[int, ...]]:
        """A NET connection as (sender's GPU to its NIC, the cables of every spine route, the
        receiver's NIC to its GPU)."""
        if self.p2p:
            return self._p2p_net_parts(channel, src, dst)
        return self._net_leg(channel, src, send=True), self._cables(channel, src, dst), \
            self._net_leg(channel, dst, send=False)

    def channel_key(self, channel: int) -> tuple:
        """What the fabric links of a connection on `channel` depend on besides its two ranks: the NIC
        each local rank's channel goes out through, and the one of the graph channel its CollNet head
        talks to the switch on. Channels with one key route every connection over the same fabric
        links (their CTA and connection links differ by construction); point-to-point channels pick
        NICs per peer, so each has its own key."""
        if self.p2p:
            return ("p2p", channel)
        return self._cached(("key", channel), lambda: tuple(
            (self._nic(channel, local), self._nic(self._collnet_channel(channel, local), local))
            for local in range(self.per_node)))

    def _net(self, channel: int, rank: int) -> int:
        net = self._nic(channel, rank % self.per_node)
        if net is None:
            raise UsageError(f"channel {channel} of the {self.graph_name} graph has no NIC for rank {rank}",
                             "model", "a system whose nodes have NICs")
        return net

    def _nic(self, channel: int, local: int) -> int | None:
        """The NIC a local rank's channel goes out through (None without one): the same on every node."""
        if self.graph.pattern == _PATTERN_NVLS:
            return self._cached(("net", channel, local), lambda: self._nvls_net(channel, local))
        return self._cached(("net", channel, local), lambda: channel_net(self.paths, self.graph, channel, local))

    def _p2p_net_parts(self, channel: int, src: int, dst: int) -> tuple[tuple[int, ...], tuple, tuple[int, ...]]:
        """Point-to-point over the network: the sender's NIC as ncclTopoGetNetDev picks it for the peer
        (its own, or the one by the peer's GPU through a PXN relay); the receiver asks with itself as
        the peer (net.cc recvSetup), so it receives on its own NIC."""
        (n1, l1), (n2, l2) = divmod(src, self.per_node), divmod(dst, self.per_node)
        legs = self._p2p_legs.get((channel, l1, l2))
        if legs is None:  # the same on every pair of node copies: an alltoall asks for millions
            legs = self._p2p_legs[(channel, l1, l2)] = self._p2p_node_legs(channel, l1, l2)
            if legs is None:
                raise UsageError(f"rank {src} or rank {dst} has no NIC", "model", "a system whose nodes have NICs")
        send_port, recv_port, head, tail = legs
        return self._on_node(head, n1), self._port_cables((n1, send_port), (n2, recv_port)), self._on_node(tail, n2)

    def _p2p_node_legs(self, channel: int, l1: int, l2: int) -> tuple[int, int, tuple, tuple] | None:
        """For local ranks `l1` sending to `l2` on `channel`: the sender's and the receiver's NIC
        ports and their legs to and from their GPUs, in the first node copy (None where either has
        no NIC)."""
        s = self.system
        peer_dev = s.nodes[s.gpu_by_rank(l2)].gpu.dev
        send_net, proxy = self._p2p_net(l1, peer_dev, channel)
        recv_net, _ = self._p2p_net(l2, peer_dev, channel)
        if send_net is None or recv_net is None:
            return None
        head = self._cached(("p2p_head", l1, send_net, proxy), lambda: self._p2p_head(l1, send_net, proxy))
        tail = self._cached(("p2p_tail", l2, recv_net), lambda: node_route(self.fabric, 0, recv_net, self._gpu(l2)))
        return self._port(send_net), self._port(recv_net), head, tail

    def _p2p_head(self, local: int, send_net: int, proxy: int) -> tuple[int, ...]:
        """A local rank's GPU to the NIC it sends on (through the PXN relay `proxy` where that is not
        itself), in the first node copy."""
        s, gpu = self.system, self._gpu(local)
        hops = [(gpu, send_net)] if proxy == local else [(gpu, s.gpu_by_rank(proxy)), (s.gpu_by_rank(proxy), send_net)]
        return tuple(link for a, b in hops for link in node_route(self.fabric, 0, a, b))

    def _on_node(self, leg: tuple[int, ...], node: int) -> tuple[int, ...]:
        """The first node copy's links `leg` in node copy `node` (one tuple per leg and node: an
        alltoall's routes hold millions of them)."""
        if not node:
            return leg
        got = self._legs_on.get((leg, node))
        if got is None:
            base = node * self.fabric.per_node
            got = self._legs_on[(leg, node)] = tuple(base + link for link in leg)
        return got

    def _p2p_net(self, local: int, peer_dev: int, channel: int) -> tuple:
        """paths.p2p_net, the same for every node copy: looked up once."""
        return self._cached(("p2p_net", local, peer_dev, channel),
                            lambda: p2p_net(self.paths, local, peer_dev, channel))

    def _nvls_net(self, channel: int, rank: int) -> int | None:
        """search.cc getNvlsNetDev: the NICs of the NVLS channels the rank heads, by channel."""
        local = rank % self.per_node
        mine = [inter[0] for intra, inter in zip(self.graph.intra, self.graph.inter)
                if intra[0] % self.per_node == local]
        if not mine:
            return None
        net_id = mine[channel % len(mine)]
        return next((n for n in self.system.nets() if self.system.nodes[n].id == net_id), None)

    def _net_leg(self, channel: int, rank: int, send: bool) -> tuple[int, ...]:
        """GPU to NIC (send) or NIC to GPU (receive), as GDR and PXN decided: the same in every node
        copy but for where its links are numbered, so worked out once per local rank."""
        node, local = divmod(rank, self.per_node)
        leg = self._cached(("leg", channel, local, send), lambda: self._first_node_leg(channel, local, send))
        return self._on_node(leg, node)

    def _first_node_leg(self, channel: int, local: int, send: bool) -> tuple[int, ...]:
        net, gpu = self._net(channel, local), self._gpu(local)
        gdr = (self.paths.gdr_send if send else self.paths.gdr_recv).get((local, net))
        hops: list[tuple[int, int]] = []
        if send and gdr is not None and gdr.proxy_rank != local:
            proxy = self.system.gpu_by_rank(gdr.proxy_rank)
            hops = [(gpu, proxy), (proxy, net)]
        elif gdr is not None and not gdr.enabled:
            cpu = self._cpu_near(gpu)
            hops = [(gpu, cpu), (cpu, net)]
        else:
            hops = [(gpu, net)]
        if not send:
            hops = [(b, a) for a, b in reversed(hops)]
        return tuple(link for a, b in hops for link in node_route(self.fabric, 0, a, b))

    def _cpu_near(self, gpu: int) -> int:
        def hops(cpu: int) -> int:
            path = self.paths.path(gpu, cpu)
            return path.hops if path else 99
        return min(self.system.of_kind("CPU"), key=hops)

    def _port(self, net: int) -> int:
        return self.system.nets().index(net)

    def _cables(self, channel: int, src: int, dst: int) -> tuple[tuple[int, ...], ...]:
        n1, n2 = src // self.per_node, dst // self.per_node
        return self._port_cables((n1, self._port(self._net(channel, src))), (n2, self._port(self._net(channel, dst))))

    def _port_cables(self, src: tuple[int, int], dst: tuple[int, int]) -> tuple[tuple[int, ...], ...]:
        """cable_routes between two NIC ports, looked up once per pair of ports: the channels and
        GPUs that share a NIC share its routes."""
        got = self._cables_of.get((src, dst))
        if got is None:
            got = self._cables_of[(src, dst)] = cable_routes(self.fabric, src, dst)
        return got

    def nvls_up(self, node: int, local: int) -> tuple[int, ...]:
        return self._nvs(node, local, up=True)

    def nvls_down(self, node: int, local: int) -> tuple[int, ...]:
        return self._nvs(node, local, up=False)

    def _nvs(self, node: int, local: int, up: bool) -> tuple[int, ...]:
        if self.nvs is None:
            raise UsageError("NVLS traffic on a node without an NVSwitch", "model", "NVSwitch systems")
        return self._cached(("nvs", node, local, up), lambda: self._nvs_route(node, local, up))

    def _nvs_route(self, node: int, local: int, up: bool) -> tuple[int, ...]:
        gpu = self.system.gpu_by_rank(local)
        return node_route(self.fabric, node, *((gpu, self.nvs) if up else (self.nvs, gpu)))

    def nvs_links(self) -> frozenset[int]:
        """Every GPU's route to and from its node's NVSwitch, in every node copy (none without one)."""
        if self.nvs is None:
            return frozenset()
        return frozenset(link for node in range(self.fabric.nodes) for local in range(self.per_node)
                         for up in (True, False) for link in self._nvs(node, local, up))

    def collnet_up(self, channel: int, rank: int) -> tuple[int, ...]:
        return self._collnet(channel, rank, up=True)

    def collnet_down(self, channel: int, rank: int) -> tuple[int, ...]:
        return self._collnet(channel, rank, up=False)

    def _collnet(self, channel: int, rank: int, up: bool) -> tuple[int, ...]:
        return self._cached(("collnet", channel, rank, up), lambda: self._collnet_route(channel, rank, up))

    def _collnet_channel(self, channel: int, local: int) -> int:
        headed = [c for c, intra in enumerate(self.graph.intra) if intra[0] % self.per_node == local]
        return headed[channel % len(headed)] if headed and self.graph.pattern != _PATTERN_NVLS else channel

    def _collnet_route(self, channel: int, rank: int, up: bool) -> tuple[int, ...]:
        # A head talks to the switch on the graph channel it heads (connect.cc connectCollNet passes
        # the head's index as the graph channel), i.e. through its own NIC; NVLS heads likewise.
        graph_channel = self._collnet_channel(channel, rank % self.per_node)
        nic = ("nic", rank // self.per_node, self._port(self._net(graph_channel, rank)))
        graph = self.fabric.cluster.graph
        first_switch = next(iter(graph.neighbors(nic)), None) if nic in graph else None
        leg = self._net_leg(graph_channel, rank, send=up)
        if first_switch is None:
            return leg
        if up:
            return leg + (self.fabric.cables[(nic, first_switch)],)
        return (self.fabric.cables[(first_switch, nic)],) + leg
