"""IB verbs through pyverbs, as NCCL's net_ib uses them: a device's context, protection domain and
completion queues, memory regions over memory the caller owns, and RC queue pairs brought to RTS
against a peer's queue pair numbers, LID and GID.

`ib_ports(hca)` lists the active ports NCCL would use (sysfs, filtered by NCCL_IB_HCA as
net_ib/init.cc filters them); `load_pyverbs()` finds pyverbs — importable, or Debian's
python3-pyverbs, which installs for the system interpreter under /usr/lib/python3/dist-packages
and loads into any interpreter of the same ABI — and `resolve_api` reads what its rdma-core
release offers, where releases differ:

- the enums are `pyverbs.libibverbs_enums` from rdma-core 50 and `pyverbs.enums` before (gone in 61);
- MR(address=) registers memory pyverbs did not allocate from rdma-core 28; earlier releases cannot
  register the connection's slots, so NET stays on sockets;
- SendWR(imm_data=) exists from rdma-core 31; before, a step's length follows its data in a SEND
  instead of riding in the RDMA write's immediate.

`verbs_unavailable(params)` says in one phrase why the verbs transport cannot be used here, or ""
where it can. NCCL says the same in its own words ("NET/IB : No device found.") before falling back
to sockets.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import socket
import sys
import sysconfig
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Mapping

import numpy as np

from ..errors import NickSimError
from ..graph.paths import ib_hca_selects

__all__ = ["VerbsError", "VerbsUnavailable", "VerbsApi", "IbPort", "PeerInfo", "Completion", "Region", "IbContext",
           "QueuePair", "rdma_devices", "ib_ports", "load_pyverbs", "resolve_api", "verbs_unavailable",
           "wc_status_name", "wc_opcode_name", "qp_init_attr", "init_attr", "rts_attr", "write_wr", "send_wr",
           "recv_wr", "DEBIAN_DIST_PACKAGES", "SYSFS_ROOT"]

SYSFS_ROOT = "/sys/class/infiniband"  # where the kernel lists RDMA devices (what ibv_get_device_list reads)
DEBIAN_DIST_PACKAGES = "/usr/lib/python3/dist-packages"
_MODULES = ("device", "pd", "mr", "cq", "qp", "wr", "addr", "pyverbs_error")

# misc/ibvwrap.cc ibvWcStatusStr / ibvWcOpcodeStr (NCCL 2.30.7), by libibverbs' enum values.
_WC_STATUS = ("IBV_WC_SUCCESS", "IBV_WC_LOC_LEN_ERR", "IBV_WC_LOC_QP_OP_ERR", "IBV_WC_LOC_EEC_OP_ERR",
              "IBV_WC_LOC_PROT_ERR", "IBV_WC_WR_FLUSH_ERR", "IBV_WC_MW_BIND_ERR", "IBV_WC_BAD_RESP_ERR",
              "IBV_WC_LOC_ACCESS_ERR", "IBV_WC_REM_INV_REQ_ERR", "IBV_WC_REM_ACCESS_ERR", "IBV_WC_REM_OP_ERR",
              "IBV_WC_RETRY_EXC_ERR", "IBV_WC_RNR_RETRY_EXC_ERR", "IBV_WC_LOC_RDD_VIOL_ERR",
              "IBV_WC_REM_INV_RD_REQ_ERR", "IBV_WC_REM_ABORT_ERR", "IBV_WC_INV_EECN_ERR", "IBV_WC_INV_EEC_STATE_ERR",
              "IBV_WC_FATAL_ERR", "IBV_WC_RESP_TIMEOUT_ERR", "IBV_WC_GENERAL_ERR")
_WC_OPCODE = {0: "IBV_WC_SEND", 1: "IBV_WC_RDMA_WRITE", 2: "IBV_WC_RDMA_READ", 3: "IBV_WC_COMP_SWAP",
              4: "IBV_WC_FETCH_ADD", 5: "IBV_WC_BIND_MW", 128: "IBV_WC_RECV", 129: "IBV_WC_RECV_RDMA_WITH_IMM"}


def wc_status_name(status: int) -> str:
    return _WC_STATUS[status] if 0 <= status < len(_WC_STATUS) else "UNKNOWN_STATUS"


def wc_opcode_name(opcode: int) -> str:
    return _WC_OPCODE.get(opcode, "UNKNOWN_OPCODE")


class VerbsError(NickSimError):
    """A verbs call failed, or a peer's queue pair reported an error."""

    kind = "verbs"


class VerbsUnavailable(NickSimError):
    """The verbs transport cannot be used here (no device, no pyverbs, a pyverbs too old)."""

    kind = "verbs"


# --- devices, from sysfs (what ibv_get_device_list and ibv_query_port read) ------------------

@dataclass(frozen=True)
class IbPort:
    """One active port of an RDMA device: its device and port number, and its link layer
    ("InfiniBand" or "Ethernet", RoCE)."""

    device: str
    port: int
    link_layer: str


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def rdma_devices(sysfs: str | None = None) -> list[str]:
    """The RDMA devices under `sysfs` (SYSFS_ROOT), sorted (mlx5_0, rxe0, ...); none where the
    directory is missing."""
    sysfs = sysfs or SYSFS_ROOT
    try:
        return sorted(os.listdir(sysfs))
    except OSError:
        return []


def ib_ports(hca: str | None = None, sysfs: str | None = None) -> list[IbPort]:
    """The ports NCCL's IB transport would use, in device and port order: active (state "4: ACTIVE"),
    InfiniBand or Ethernet, and kept by NCCL_IB_HCA `hca` (net_ib/init.cc ncclIbInitDevices)."""
    sysfs = sysfs or SYSFS_ROOT
    found = []
    for device in rdma_devices(sysfs):
        ports_dir = os.path.join(sysfs, device, "ports")
        try:
            numbers = sorted(int(p) for p in os.listdir(ports_dir) if p.isdigit())
        except OSError:
            continue
        for port in numbers:
            here = os.path.join(ports_dir, str(port))
            if not _read(os.path.join(here, "state")).endswith("ACTIVE"):
                continue
            layer = _read(os.path.join(here, "link_layer")) or "InfiniBand"
            if layer not in ("InfiniBand", "Ethernet"):
                continue
            if hca and not ib_hca_selects(hca, device, port):
                continue
            found.append(IbPort(device, port, layer))
    return found


def _gid_index(port: IbPort, setting: int, sysfs: str | None = None) -> int:
    """The GID a RoCE port's queue pairs use: NCCL_IB_GID_INDEX when set (>= 0); else, as
    net_ib's ncclIbGetGidIndex prefers, a RoCE v2 GID holding an IPv4 address, then any RoCE v2
    GID, then 0. InfiniBand routes by LID: 0."""
    if setting >= 0:
        return setting
    if port.link_layer != "Ethernet":
        return 0
    here = os.path.join(sysfs or SYSFS_ROOT, port.device, "ports", str(port.port))
    try:
        indices = sorted(int(n) for n in os.listdir(os.path.join(here, "gid_attrs", "types")) if n.isdigit())
    except OSError:
        indices = []
    v2 = []
    for index in indices:
        if _read(os.path.join(here, "gid_attrs", "types", str(index))) != "RoCE v2":
            continue
        gid = _read(os.path.join(here, "gids", str(index)))
        if gid.replace(":", "").strip("0"):  # an unset entry reads as all zeros
            v2.append((index, gid))
    for index, gid in v2:
        if gid.startswith("0000:0000:0000:0000:0000:ffff:"):
            return index
    return v2[0][0] if v2 else 0


# --- pyverbs, and what its release offers ---------------------------------------------------------

@dataclass(frozen=True)
class VerbsApi:
    """pyverbs' modules and the features of its rdma-core release that the transport needs."""

    modules: Mapping[str, Any]
    enums: Any
    imm_data: bool  # SendWR(imm_data=) exists (rdma-core 31+)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.modules[name]
        except KeyError:
            raise AttributeError(name) from None


def _takes(func, name: str) -> bool:
    """Whether a pyverbs (Cython) callable takes keyword `name`: by its docstring's :param
    lines, which every pyverbs release writes, or its signature where Python has one."""
    doc = getattr(func, "__doc__", None) or ""
    if f":param {name}:" in doc:
        return True
    try:
        import inspect
        return name in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False


def resolve_api(package: ModuleType) -> VerbsApi:
    """The VerbsApi of an imported pyverbs package; VerbsUnavailable where its release cannot
    serve (see the module docstring)."""
    modules = {}
    for name in _MODULES:
        try:
            modules[name] = importlib.import_module(f"{package.__name__}.{name}")
        except ImportError as err:
            raise VerbsUnavailable(f"pyverbs has no {name} module ({err})", "pyverbs",
                                   "rdma-core 28 or newer (apt install python3-pyverbs)") from None
    enums = None
    for name in ("libibverbs_enums", "enums"):
        try:
            enums = importlib.import_module(f"{package.__name__}.{name}")
            if hasattr(enums, "IBV_QPT_RC"):
                break
            enums = None
        except ImportError:
            continue
    if enums is None:
        raise VerbsUnavailable("pyverbs has neither libibverbs_enums nor enums", "pyverbs", "rdma-core 28 or newer")
    if not _takes(modules["mr"].MR.__init__, "address"):
        raise VerbsUnavailable("this pyverbs cannot register memory it did not allocate (MR(address=) came in "
                               "rdma-core 28)", "pyverbs", "rdma-core 28 or newer")
    return VerbsApi(modules, enums, _takes(modules["wr"].SendWR.__init__, "imm_data"))


def _debian_pyverbs(dist_packages: str) -> ModuleType | None:
    """Debian's python3-pyverbs, loaded as the package `pyverbs` without putting the rest of
    dist-packages on sys.path, where its extension modules match this interpreter's ABI."""
    where = os.path.join(dist_packages, "pyverbs")
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ""
    if not os.path.isfile(os.path.join(where, f"device{suffix}")):
        return None
    spec = importlib.util.spec_from_file_location("pyverbs", os.path.join(where, "__init__.py"),
                                                  submodule_search_locations=[where])
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules["pyverbs"] = module
    try:
        spec.loader.exec_module(module)
    except ImportError:
        del sys.modules["pyverbs"]
        return None
    return module


def load_pyverbs(dist_packages: str = DEBIAN_DIST_PACKAGES) -> VerbsApi:
    """This interpreter's pyverbs, resolved; VerbsUnavailable saying why not."""
    if "pyverbs" in sys.modules:
        package = sys.modules["pyverbs"]
    elif importlib.util.find_spec("pyverbs") is not None:
        package = importlib.import_module("pyverbs")
    else:
        package = _debian_pyverbs(dist_packages)
    if package is None:
        raise VerbsUnavailable("no pyverbs", "pyverbs", "apt install python3-pyverbs (rdma-core 28 or newer)")
    return resolve_api(package)


def verbs_unavailable(hca: str | None = None, ib_disable: int = 0, sysfs: str | None = None,
                      dist_packages: str = DEBIAN_DIST_PACKAGES) -> str:
    """Why NET cannot go over verbs on this host, in one phrase; "" where it can."""
    if ib_disable == 1:
        return "NCCL_IB_DISABLE=1"
    devices = rdma_devices(sysfs)
    if not devices:
        return f"no RDMA device in {sysfs or SYSFS_ROOT}"
    if not ib_ports(hca, sysfs):
        kept = f" that NCCL_IB_HCA={hca} keeps" if hca else ""
        return f"no active InfiniBand or RoCE port{kept} on {', '.join(devices)}"
    try:
        load_pyverbs(dist_packages)
    except VerbsUnavailable as err:
        return f"RDMA device(s) {', '.join(devices)} but {err.what} ({err.valid})"
    return ""


# --- a device in use ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class PeerInfo:
    """What a queue pair's peer needs to reach it (ncclIbConnectionMetadata's parts): its queue
    pair numbers, LID, link layer, active MTU and GID."""

    qpns: tuple[int, ...]
    lid: int
    ethernet: bool
    mtu: int
    gid: bytes  # 16 bytes


@dataclass(frozen=True)
class Completion:
    """One work completion, as ibv_poll_cq returns it."""

    wr_id: int
    status: int
    opcode: int
    byte_len: int
    imm_data: int
    vendor_err: int
    qp_num: int


@dataclass(frozen=True)
class Region:
    """Registered memory: its address, length and keys; `close` deregisters it."""

    addr: int
    nbytes: int
    lkey: int
    rkey: int
    mr: Any = field(default=None, compare=False, repr=False)

    def close(self) -> None:
        _close_quietly(self.mr)


def _close_quietly(obj) -> None:
    if obj is None:
        return
    try:
        obj.close()
    except Exception:  # pyverbs raises its own errors for a device already gone
        pass


def _gid_bytes(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", "").rjust(32, "0"))


def _gid_text(raw: bytes) -> str:
    hexed = raw.hex()
    return ":".join(hexed[i:i + 4] for i in range(0, 32, 4))


class IbContext:
    """One port of an RDMA device opened by a rank: its context, protection domain, port
    attributes and GID. It registers memory, makes completion queues and RC queue pairs, each
    of which its caller closes before the context's own `close`."""

    def __init__(self, api: VerbsApi, port: IbPort, gid_index: int = -1, sysfs: str | None = None):
        self.api, self.port = api, port
        self.ctx = self.pd = None
        try:
            self.ctx = api.device.Context(name=port.device)
            attr = self.ctx.query_port(port.port)
            self.lid, self.mtu = int(attr.lid), int(attr.active_mtu)
            self.ethernet = int(attr.link_layer) == int(api.enums.IBV_LINK_LAYER_ETHERNET)
            self.gid_index = _gid_index(port, gid_index, sysfs) if self.ethernet else max(gid_index, 0)
            gid = self.ctx.query_gid(port.port, self.gid_index)
            self.gid = _gid_bytes(str(getattr(gid, "gid", gid)))
            self.pd = api.pd.PD(self.ctx)
        except api.pyverbs_error.PyverbsError as err:
            self.close()
            raise VerbsError(f"{port.device} port {port.port}: {err}", "verbs") from None

    @property
    def gid_text(self) -> str:
        return _gid_text(self.gid)

    def register(self, array: np.ndarray, remote_write: bool) -> Region:
        """Register `array`'s memory (which must outlive the region) for local writes and, where
        asked, for the peer's RDMA writes."""
        e = self.api.enums
        access = int(e.IBV_ACCESS_LOCAL_WRITE) | (int(e.IBV_ACCESS_REMOTE_WRITE) if remote_write else 0)
        addr = array.ctypes.data
        try:
            mr = self.api.mr.MR(self.pd, array.nbytes, access, address=addr)
        except self.api.pyverbs_error.PyverbsError as err:
            raise VerbsError(f"{self.port.device}: cannot register {array.nbytes} bytes ({err})", "verbs") from None
        return Region(addr, array.nbytes, int(mr.lkey), int(mr.rkey), mr)

    def completion_queue(self, entries: int):
        try:
            return self.api.cq.CQ(self.ctx, entries)
        except self.api.pyverbs_error.PyverbsError as err:
            raise VerbsError(f"{self.port.device}: cannot make a completion queue ({err})", "verbs") from None

    def queue_pair(self, cq, max_send_wr: int, max_recv_wr: int, max_inline: int) -> "QueuePair":
        """A new RC queue pair on `cq` (sends and receives), in INIT, writable by its peer."""
        api = self.api
        qp = None
        try:
            qp = api.qp.QP(self.pd, qp_init_attr(api, cq, max_send_wr, max_recv_wr, max_inline))
            qp.to_init(init_attr(api, self.port.port))
        except api.pyverbs_error.PyverbsError as err:
            _close_quietly(qp)
            raise VerbsError(f"{self.port.device}: cannot make a queue pair ({err})", "verbs") from None
        return QueuePair(self, qp)

    def poll(self, cq, entries: int = 16) -> list[Completion]:
        try:
            _, wcs = cq.poll(entries)
        except self.api.pyverbs_error.PyverbsError as err:
            raise VerbsError(f"{self.port.device}: cannot poll a completion queue ({err})", "verbs") from None
        return [Completion(int(w.wr_id), int(w.status), int(w.opcode), int(w.byte_len), int(w.imm_data),
                           int(w.vendor_err), int(w.qp_num)) for w in wcs]

    def close(self) -> None:
        """Close the protection domain, then the device."""
        _close_quietly(self.pd)
        _close_quietly(self.ctx)
        self.pd = self.ctx = None


# --- the attributes and work requests, built apart from any device (so any pyverbs can be checked) ---

def qp_init_attr(api: VerbsApi, cq, max_send_wr: int, max_recv_wr: int, max_inline: int):
    """An RC queue pair's creation attributes: both queues on `cq`, one SGE a request, sends
    signalled only where asked (NCCL's CTS and data writes choose)."""
    cap = api.qp.QPCap(max_send_wr=max_send_wr, max_recv_wr=max_recv_wr, max_send_sge=1, max_recv_sge=1,
                       max_inline_data=max_inline)
    return api.qp.QPInitAttr(qp_type=api.enums.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap, sq_sig_all=0)


def init_attr(api: VerbsApi, port_num: int):
    """RESET -> INIT (net_ib/connect.cc ncclIbInitQp): the port, pkey 0, the peer may write."""
    e = api.enums
    attr = api.qp.QPAttr(port_num=port_num)
    attr.pkey_index = 0
    attr.qp_access_flags = int(e.IBV_ACCESS_REMOTE_WRITE) | int(e.IBV_ACCESS_LOCAL_WRITE)
    return attr


def rts_attr(api: VerbsApi, port_num: int, mtu: int, peer: PeerInfo, peer_qpn: int, gid_index: int, timeout: int,
             retry_cnt: int, tc: int, sl: int):
    """INIT -> RTR -> RTS (ncclIbRtrQp / ncclIbRtsQp): the smaller MTU, the peer's GID as a
    global route on RoCE (hop limit 255, traffic class `tc`) or its LID on InfiniBand, min RNR
    timer 12, one outstanding read, NCCL_IB_TIMEOUT and NCCL_IB_RETRY_CNT, RNR retries without end."""
    attr = api.qp.QPAttr(port_num=port_num)
    attr.path_mtu = min(mtu, peer.mtu)
    attr.dest_qp_num = peer_qpn
    attr.rq_psn = 0
    attr.max_dest_rd_atomic = 1
    attr.min_rnr_timer = 12
    route = None
    if peer.ethernet:
        route = api.addr.GlobalRoute(dgid=api.addr.GID(_gid_text(peer.gid)), sgid_index=gid_index, hop_limit=255,
                                     traffic_class=max(tc, 0))
    attr.ah_attr = api.addr.AHAttr(dlid=0 if peer.ethernet else peer.lid, sl=max(sl, 0),
                                   is_global=1 if peer.ethernet else 0, port_num=port_num, gr=route)
    attr.timeout = timeout
    attr.retry_cnt = retry_cnt
    attr.rnr_retry = 7
    attr.sq_psn = 0
    attr.max_rd_atomic = 1
    return attr


def write_wr(api: VerbsApi, wr_id: int, addr: int, nbytes: int, lkey: int, remote_addr: int, rkey: int,
             imm: int | None = None, signaled: bool = True, inline: bool = False):
    """An RDMA write of `nbytes` at `addr` to `remote_addr`; with `imm`, RDMA_WRITE_WITH_IMM
    carrying it in network byte order (NCCL's htobe32)."""
    e = api.enums
    flags = (int(e.IBV_SEND_SIGNALED) if signaled else 0) | (int(e.IBV_SEND_INLINE) if inline else 0)
    kwargs = {}
    opcode = e.IBV_WR_RDMA_WRITE
    if imm is not None:
        opcode = e.IBV_WR_RDMA_WRITE_WITH_IMM
        kwargs["imm_data"] = socket.htonl(imm)
    wr = api.wr.SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[api.wr.SGE(addr, nbytes, lkey)], send_flags=flags,
                       **kwargs)
    wr.set_wr_rdma(rkey, remote_addr)
    return wr


def send_wr(api: VerbsApi, wr_id: int, addr: int, nbytes: int, lkey: int, signaled: bool = True):
    """A SEND of `nbytes` at `addr` into the peer's next posted receive."""
    e = api.enums
    return api.wr.SendWR(wr_id=wr_id, opcode=e.IBV_WR_SEND, num_sge=1, sg=[api.wr.SGE(addr, nbytes, lkey)],
                         send_flags=int(e.IBV_SEND_SIGNALED) if signaled else 0)


def recv_wr(api: VerbsApi, wr_id: int, addr: int, nbytes: int, lkey: int):
    """A receive: what an RDMA write with immediate, or a SEND (its bytes at `addr`), completes."""
    return api.wr.RecvWR(wr_id=wr_id, num_sge=1, sg=[api.wr.SGE(addr, nbytes, lkey)])


class QueuePair:
    """One RC queue pair of an IbContext: brought to RTS against a peer's (`connect`), then
    posting RDMA writes (with their length as immediate data, or a SEND after them where
    pyverbs cannot set one) and receives; `close` destroys it."""

    def __init__(self, context: IbContext, qp):
        self.context, self.qp = context, qp
        self.qpn = int(qp.qp_num)

    def connect(self, peer: PeerInfo, peer_qpn: int, timeout: int, retry_cnt: int, tc: int, sl: int) -> None:
        ctx = self.context
        attr = rts_attr(ctx.api, ctx.port.port, ctx.mtu, peer, peer_qpn, ctx.gid_index, timeout, retry_cnt, tc, sl)
        try:
            self.qp.to_rtr(attr)
            self.qp.to_rts(attr)
        except ctx.api.pyverbs_error.PyverbsError as err:
            raise VerbsError(f"{ctx.port.device}: queue pair {self.qpn} cannot reach RTS ({err})", "verbs") from None

    def write(self, wr_id: int, addr: int, nbytes: int, lkey: int, remote_addr: int, rkey: int,
              imm: int | None = None, signaled: bool = True, inline: bool = False) -> None:
        self._post_send(write_wr(self.context.api, wr_id, addr, nbytes, lkey, remote_addr, rkey, imm, signaled,
                                 inline))

    def send(self, wr_id: int, addr: int, nbytes: int, lkey: int, signaled: bool = True) -> None:
        self._post_send(send_wr(self.context.api, wr_id, addr, nbytes, lkey, signaled))

    def recv(self, wr_id: int, addr: int, nbytes: int, lkey: int) -> None:
        api = self.context.api
        try:
            self.qp.post_recv(recv_wr(api, wr_id, addr, nbytes, lkey))
        except api.pyverbs_error.PyverbsError as err:
            raise VerbsError(f"queue pair {self.qpn}: cannot post a receive ({err})", "verbs") from None

    def close(self) -> None:
        _close_quietly(self.qp)

    def _post_send(self, wr) -> None:
        api = self.context.api
        try:
            self.qp.post_send(wr)
        except api.pyverbs_error.PyverbsError as err:
            raise VerbsError(f"queue pair {self.qpn}: cannot post a send ({err})", "verbs") from None
