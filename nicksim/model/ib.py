"""NCCL's InfiniBand transport settings as the DES applies them (src/transport/net_ib.cc).

`ib_transport(job)` promises an IbTransport read from the job's NCCL_IB_* settings and its fabric:
- `path_weights(n_paths, first_msg, n_msgs)`: the share of a connection's bytes that each of the
  `n_paths` spine routes between two leaves carries (cluster.py fabric_routes, the D-mod-K route
  first) for a slice standing for `n_msgs` network messages from the connection's `first_msg`-th:
  * adaptive routing (NCCL_IB_ADAPTIVE_ROUTING; by default on for an InfiniBand link layer and
    off for RoCE, as ncclIbInit sets each device's `ar`): the switches spray every flow's packets
    over all the spine routes, evenly here;
  * otherwise on RoCE, the switches hash each queue pair's UDP source port (ECMP), so queue pair q
    of a connection (NCCL_IB_QPS_PER_CONNECTION of them) takes route q mod n_paths;
    NCCL_IB_SPLIT_DATA_ON_QPS=1 splits every message evenly over all the queue pairs
    (ncclIbMultiSend: nqps = base.nqps), 0 sends each message whole on the next queue pair in turn
    (nqps = base.nDataQps, one per NIC; qpIndex moves on by one per message), so a connection's
    messages in flight together are on different routes (engine.py counts a slice over those);
  * otherwise on InfiniBand every queue pair of a connection takes the one route the subnet
    manager programmed for the destination's LID (switches forward on the DLID alone, and NCCL
    gives a connection one DLID), so more queue pairs change no route;
- `retry_exceeded_us`: how long after its first packet stopped being acknowledged a queue pair
  gives up with IBV_WC_RETRY_EXC_ERR (status 12): (NCCL_IB_RETRY_CNT + 1) attempts of the local
  ACK timeout 4.096 us x 2^NCCL_IB_TIMEOUT (ncclIbRtsQp sets qpAttr.timeout and retry_cnt); None
  when NCCL_IB_TIMEOUT is 0, which the IB spec makes an infinite wait.
None of this applies where NCCL's IB transport does not carry the network (sockets, a plugin such
as aws-ofi-nccl on EFA): there every connection keeps its one route and never errors out.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["IbTransport", "ib_transport", "ERROR_LINK_KINDS"]

# IB spec, local ACK timeout: 4.096 us x 2^timeout; a HCA may wait up to about four times longer,
# and the retry of the last attempt is not timed exactly either: (retries + 1) x this is an
# approximation of when a QP reports IBV_WC_RETRY_EXC_ERR.
_ACK_TIMEOUT_UNIT_US = 4.096
_TIMEOUT_MAX, _RETRY_MAX = 31, 7  # the QP attributes are 5 and 3 bits wide
# Links whose loss leaves a queue pair unacknowledged (the network's cables, the NIC's own port);
# a dead PCIe or NVLink link inside a node is another kind of failure.
ERROR_LINK_KINDS = ("CABLE", "NET")


@dataclass(frozen=True)
class IbTransport:
    """The IB transport knobs of one job (see the module docstring). `verbs`: NCCL's own IB transport
    carries the network (IB or RoCE); `ethernet`: its link layer is Ethernet (RoCE)."""

    verbs: bool = False
    ethernet: bool = False
    qps: int = 1
    split_data: bool = False
    adaptive: bool = False
    timeout: int = 20
    retry_cnt: int = 7

    @property
    def multipath(self) -> bool:
        """Whether a connection's bytes may leave its D-mod-K route at all."""
        return self.verbs and (self.adaptive or (self.ethernet and self.qps > 1))

    @property
    def round_robin(self) -> bool:
        """Whether successive messages of a connection take different routes (the weights depend
        on the message)."""
        return self.multipath and not self.adaptive and not self.split_data

    @property
    def spreads_evenly(self) -> bool:
        """Whether every connection spreads its bytes evenly over all the spine routes (adaptive
        routing), so that which spine its D-mod-K route takes does not matter."""
        return self.multipath and self.adaptive

    def n_used(self, n_paths: int) -> int:
        """How many of the `n_paths` routes (the first ones) a connection's bytes can ever take."""
        if not self.multipath:
            return 1
        return n_paths if self.adaptive else min(self.qps, n_paths)

    def path_weights(self, n_paths: int, first_msg: int = 0, n_msgs: int = 1) -> tuple[float, ...]:
        """The share of the bytes of `n_msgs` messages, from the connection's `first_msg`-th on,
        that each of `n_paths` routes carries (they sum to 1)."""
        if n_paths < 2 or not self.multipath:
            return (1.0,) + (0.0,) * max(0, n_paths - 1)
        if self.adaptive:
            return (1.0 / n_paths,) * n_paths
        if self.split_data:  # every message in qps pieces, piece q on route q mod n_paths
            per_qp, total = [1] * self.qps, self.qps
        else:  # message i whole on QP i mod qps: count the messages each QP gets
            n_msgs = max(1, n_msgs)
            full, extra = divmod(n_msgs, self.qps)
            per_qp = [full + (1 if (q - first_msg) % self.qps < extra else 0) for q in range(self.qps)]
            total = n_msgs
        weights = [0.0] * n_paths
        for q, count in enumerate(per_qp):
            weights[q % n_paths] += count / total
        return tuple(weights)

    @property
    def qp_timeout_us(self) -> float:
        return _ACK_TIMEOUT_UNIT_US * 2 ** self.timeout

    @property
    def retry_exceeded_us(self) -> float | None:
        if not self.verbs or self.timeout <= 0:
            return None
        return (self.retry_cnt + 1) * self.qp_timeout_us


def ib_transport(job) -> IbTransport:
    """The job's IbTransport: its NCCL_IB_* settings (NCCL's defaults where unset), on its fabric."""
    fabric = job.cluster.spec.fabric
    kind = fabric.name if fabric is not None else "ib"
    verbs = job.paths.net_plugin == "IB"  # net_ib.cc: InfiniBand or RoCE
    params = job.params
    adaptive = int(params.get("NCCL_IB_ADAPTIVE_ROUTING"))
    return IbTransport(
        verbs=verbs,
        ethernet=kind != "ib",
        qps=max(1, int(params.get("NCCL_IB_QPS_PER_CONNECTION"))),
        split_data=int(params.get("NCCL_IB_SPLIT_DATA_ON_QPS")) != 0,
        # -2: on for an InfiniBand link layer, off for RoCE (ncclIbInit); any other value forces it.
        adaptive=verbs and (kind == "ib" if adaptive == -2 else adaptive != 0),
        timeout=min(max(0, int(params.get("NCCL_IB_TIMEOUT"))), _TIMEOUT_MAX),
        retry_cnt=min(max(0, int(params.get("NCCL_IB_RETRY_CNT"))), _RETRY_MAX),
    )
