"""A stand-in for pyverbs and an RDMA fabric, in one process, for the verbs transport's tests.

`Fabric(...).package(release)` builds a package with pyverbs' modules (device, pd, mr, cq, qp, wr,
addr, pyverbs_error and the enums) whose classes take the arguments pyverbs' do in that rdma-core
release: 27 cannot register memory it did not allocate, 30 has no SendWR(imm_data=), 44 is
Debian 12's, 64 has only libibverbs_enums. Enum values are libibverbs' own.

The fabric behaves as RC queue pairs do: a queue pair posts only in RTS; each one's send queue is
worked in order by a thread of its own, so completions arrive later than the post; an RDMA write
needs the local range inside a region of its lkey and the remote range inside a region of the
rkey that allows remote writes (else IBV_WC_LOC_PROT_ERR / IBV_WC_REM_ACCESS_ERR); an RDMA write
with immediate or a SEND consumes the peer's next posted receive, waiting for one as RNR retries
without end do; unsignalled requests complete silently unless they fail; after a failure the
queue pair is in error and the rest of its requests flush (IBV_WC_WR_FLUSH_ERR). `break_device`
makes every later request of a device's queue pairs fail with IBV_WC_RETRY_EXC_ERR, as when its
link goes down. Bytes move with ctypes.memmove between the registered addresses, under a lock
that deregistration also takes, so a region is never written after it is gone.
"""
from __future__ import annotations

import collections
import ctypes
import itertools
import sys
import threading
import types

# libibverbs' enum values (verbs.h), as pyverbs exports them.
ENUMS = dict(
    IBV_QPT_RC=2, IBV_QPT_UD=4, IBV_QPS_RESET=0, IBV_QPS_INIT=1, IBV_QPS_RTR=2, IBV_QPS_RTS=3, IBV_QPS_ERR=6,
    IBV_ACCESS_LOCAL_WRITE=1, IBV_ACCESS_REMOTE_WRITE=2, IBV_ACCESS_REMOTE_READ=4,
    IBV_WR_RDMA_WRITE=0, IBV_WR_RDMA_WRITE_WITH_IMM=1, IBV_WR_SEND=2,
    IBV_SEND_SIGNALED=2, IBV_SEND_INLINE=8,
    IBV_WC_SUCCESS=0, IBV_WC_LOC_LEN_ERR=1, IBV_WC_LOC_PROT_ERR=4, IBV_WC_WR_FLUSH_ERR=5, IBV_WC_REM_ACCESS_ERR=10,
    IBV_WC_RETRY_EXC_ERR=12,
    IBV_WC_SEND=0, IBV_WC_RDMA_WRITE=1, IBV_WC_RECV=128, IBV_WC_RECV_RDMA_WITH_IMM=129,
    IBV_LINK_LAYER_INFINIBAND=1, IBV_LINK_LAYER_ETHERNET=2, IBV_PORT_ACTIVE=4,
    IBV_MTU_1024=3, IBV_MTU_2048=4, IBV_MTU_4096=5,
)
E = types.SimpleNamespace(**ENUMS)


class Device:
    """One device of the fabric: its link layer, LID, active MTU and GID table."""

    def __init__(self, name: str, ethernet: bool, lid: int, mtu: int = E.IBV_MTU_4096, gids=()):
        self.name, self.ethernet, self.lid, self.mtu = name, ethernet, lid, mtu
        self.gids = list(gids) or ["fe80:0000:0000:0000:0000:0000:0000:%04x" % lid]
        self.broken = False


class Fabric:
    """The devices, memory regions and queue pairs the stand-in pyverbs serves."""

    def __init__(self, devices: list[Device]):
        self.devices = {d.name: d for d in devices}
        self.lock = threading.RLock()  # registrations and every byte moved
        self.regions: dict[int, "object"] = {}  # key -> MR (lkey == rkey here)
        self.qps: dict[int, "object"] = {}
        self.keys = itertools.count(0x1000)
        self.qpns = itertools.count(0x100)
        # requests posted by kind: write, write_imm, send, and of them the *_inline and *_empty (no bytes)
        self.posted: collections.Counter = collections.Counter()
        # RDMA writes with immediate by connection end (its CQ) and queue pair
        self.notices: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
        self.bytes_written = 0
        self.open_objects: set = set()

    def break_device(self, name: str) -> None:
        self.devices[name].broken = True

    def package(self, release: int = 44) -> types.ModuleType:
        return _build_package(self, release)


def _build_package(fabric: Fabric, release: int) -> types.ModuleType:
    name = f"fakeverbs_{id(fabric):x}_{release}"
    pkg = types.ModuleType(name)
    pkg.__path__ = []
    sys.modules[name] = pkg

    def module(short: str) -> types.ModuleType:
        mod = types.ModuleType(f"{name}.{short}")
        sys.modules[mod.__name__] = mod
        setattr(pkg, short, mod)
        return mod

    err = module("pyverbs_error")

    class PyverbsError(Exception):
        pass

    class PyverbsRDMAError(PyverbsError):
        pass

    class PyverbsUserError(PyverbsError):
        pass

    err.PyverbsError, err.PyverbsRDMAError, err.PyverbsUserError = PyverbsError, PyverbsRDMAError, PyverbsUserError
    enums = module("libibverbs_enums" if release >= 61 else "enums")
    for key, value in ENUMS.items():
        setattr(enums, key, value)

    def track(obj):
        fabric.open_objects.add(obj)

    def untrack(obj):
        fabric.open_objects.discard(obj)

    # --- device ---
    device = module("device")

    class PortAttr:
        def __init__(self, dev: Device):
            self.lid, self.active_mtu, self.state = dev.lid, dev.mtu, E.IBV_PORT_ACTIVE
            self.link_layer = E.IBV_LINK_LAYER_ETHERNET if dev.ethernet else E.IBV_LINK_LAYER_INFINIBAND

    class GID:
        def __init__(self, val=None):
            self._val = val or "0000:0000:0000:0000:0000:0000:0000:0000"
            if len(self._val.split(":")) != 8:
                raise PyverbsUserError(f"bad GID {val}")

        @property
        def gid(self):
            return self._val

        def __str__(self):
            return self._val

    class Context:
        def __init__(self, **kwargs):
            dev = fabric.devices.get(kwargs.get("name"))
            if dev is None:
                raise PyverbsRDMAError("Failed to get devices list" if not fabric.devices else
                                       f"Device {kwargs.get('name')} not found")
            self.device = dev
            track(self)

        def query_port(self, port_num):
            if port_num != 1:
                raise PyverbsRDMAError(f"Failed to query port {port_num}")
            return PortAttr(self.device)

        def query_gid(self, port_num, index):
            if index >= len(self.device.gids):
                raise PyverbsRDMAError(f"Failed to query gid {index} of port {port_num}")
            return GID(self.device.gids[index])

        def close(self):
            untrack(self)

    device.Context, device.PortAttr = Context, PortAttr

    # --- addr ---
    addr = module("addr")

    class GlobalRoute:
        def __init__(self, dgid=None, flow_label=0, sgid_index=0, hop_limit=1, traffic_class=0):
            self.dgid, self.sgid_index, self.hop_limit, self.traffic_class = dgid, sgid_index, hop_limit, traffic_class

    class AHAttr:
        def __init__(self, dlid=0, sl=0, src_path_bits=0, static_rate=0, is_global=0, port_num=1, gr=None):
            if is_global and gr is None:
                raise PyverbsUserError("is_global needs a GlobalRoute")
            self.dlid, self.sl, self.is_global, self.port_num, self.gr = dlid, sl, is_global, port_num, gr

    addr.GID, addr.GlobalRoute, addr.AHAttr = GID, GlobalRoute, AHAttr

    # --- pd, mr ---
    pd_mod = module("pd")

    class PD:
        def __init__(self, creator):
            self.ctx = creator
            track(self)

        def close(self):
            untrack(self)

    pd_mod.PD = PD
    mr_mod = module("mr")

    class MR:
        def __init__(self, creator, length=0, access=0, address=None, implicit=False, **kwargs):
            self.pd, self.length, self.access = creator, length, access
            if address is None:
                self._own = ctypes.create_string_buffer(length)
                address = ctypes.addressof(self._own)
            self.buf = address
            with fabric.lock:
                self.lkey = self.rkey = next(fabric.keys)
                fabric.regions[self.lkey] = self
            track(self)

        def close(self):
            with fabric.lock:  # no byte moves into it once this returns
                fabric.regions.pop(self.lkey, None)
            untrack(self)

    doc = ("\n        Allocate a user-level buffer of length <length> and register a Memory Region.\n"
           "        :param creator: A PD\n        :param length: Length (in bytes) of MR's buffer.\n"
           "        :param access: Access flags, see ibv_access_flags enum\n")
    if release >= 28:
        doc += "        :param address: Memory address to register (Optional).\n"
    else:  # before rdma-core 28 an MR always allocated its own buffer
        base_mr_init = MR.__init__

        def allocating_init(self, pd, length, access):
            base_mr_init(self, pd, length, access)

        MR.__init__ = allocating_init
    MR.__init__.__doc__ = doc
    mr_mod.MR = MR

    # --- cq ---
    cq_mod = module("cq")

    class WC:
        def __init__(self, wr_id=0, status=0, opcode=0, vendor_err=0, byte_len=0, qp_num=0, src_qp=0, imm_data=0,
                     wc_flags=0, pkey_index=0, slid=0, sl=0, dlid_path_bits=0):
            self.wr_id, self.status, self.opcode, self.vendor_err = wr_id, status, opcode, vendor_err
            self.byte_len, self.qp_num, self.imm_data = byte_len, qp_num, imm_data

    class CQ:
        def __init__(self, context, cqe, cq_context=None, channel=None, comp_vector=0):
            self.cqe = cqe
            self._wcs: collections.deque = collections.deque()
            self._lock = threading.Lock()
            track(self)

        def push(self, wc: WC):
            with self._lock:
                if len(self._wcs) >= self.cqe:
                    raise AssertionError(f"CQ overrun: more than {self.cqe} completions waiting")
                self._wcs.append(wc)

        def poll(self, num_entries=1):
            with self._lock:
                out = [self._wcs.popleft() for _ in range(min(num_entries, len(self._wcs)))]
            return len(out), out

        def close(self):
            untrack(self)

    cq_mod.CQ, cq_mod.WC = CQ, WC

    # --- wr ---
    wr_mod = module("wr")

    class SGE:
        def __init__(self, addr, length, lkey):
            self.addr, self.length, self.lkey = addr, length, lkey

    def _sges(num_sge, sg):
        if num_sge < 1 or sg is None:
            raise PyverbsUserError("A WR needs at least one SGE")
        return list(sg)[:num_sge]

    class SendWR:
        def __init__(self, wr_id=0, opcode=E.IBV_WR_SEND, num_sge=0, imm_data=0, sg=None,
                     send_flags=E.IBV_SEND_SIGNALED, next_wr=None):
            self.wr_id, self.opcode, self.imm_data, self.send_flags = wr_id, opcode, imm_data, send_flags
            self.sg = _sges(num_sge, sg)
            self.remote_addr = self.rkey = None

        def set_wr_rdma(self, rkey, addr):
            self.rkey, self.remote_addr = rkey, addr

    if release < 31:
        base_init = SendWR.__init__

        def old_init(self, wr_id=0, opcode=E.IBV_WR_SEND, num_sge=0, sg=None, send_flags=E.IBV_SEND_SIGNALED,
                     next_wr=None):
            base_init(self, wr_id, opcode, num_sge, 0, sg, send_flags, next_wr)

        old_init.__doc__ = "\n        :param wr_id: A user-defined WR ID\n        :param opcode: The WR's opcode\n"
        SendWR.__init__ = old_init
    else:
        SendWR.__init__.__doc__ = ("\n        :param wr_id: A user-defined WR ID\n"
                                   "        :param imm_data: Immediate data\n")

    class RecvWR:
        def __init__(self, wr_id=0, num_sge=0, sg=None, next_wr=None):
            self.wr_id, self.sg = wr_id, _sges(num_sge, sg)

    wr_mod.SGE, wr_mod.SendWR, wr_mod.RecvWR = SGE, SendWR, RecvWR

    # --- qp ---
    qp_mod = module("qp")

    class QPCap:
        def __init__(self, max_send_wr=1, max_recv_wr=10, max_send_sge=1, max_recv_sge=1, max_inline_data=0):
            self.max_send_wr, self.max_recv_wr, self.max_inline_data = max_send_wr, max_recv_wr, max_inline_data

    class QPInitAttr:
        def __init__(self, qp_type=E.IBV_QPT_UD, qp_context=None, scq=None, rcq=None, srq=None, cap=None,
                     sq_sig_all=1):
            self.qp_type, self.scq, self.rcq, self.cap, self.sq_sig_all = qp_type, scq, rcq, cap, sq_sig_all

    class QPAttr:
        def __init__(self, qp_state=E.IBV_QPS_INIT, cur_qp_state=E.IBV_QPS_RESET, port_num=1,
                     path_mtu=E.IBV_MTU_1024):
            self.qp_state, self.port_num, self.path_mtu = qp_state, port_num, path_mtu
            self.qp_access_flags = self.dest_qp_num = self.timeout = self.retry_cnt = None
            self.ah_attr = None

    class QP:
        def __init__(self, creator, init_attr, qp_attr=None):
            if init_attr.qp_type != E.IBV_QPT_RC or init_attr.scq is None or init_attr.rcq is None:
                raise PyverbsRDMAError("the stand-in makes RC queue pairs with both CQs")
            self.pd, self.init = creator, init_attr
            self.dev: Device = creator.ctx.device
            self.qp_num = next(fabric.qpns)
            self.qp_state = E.IBV_QPS_RESET
            self.attr = None
            self._sq: collections.deque = collections.deque()
            self._rq: collections.deque = collections.deque()
            self._cond = threading.Condition()
            self._closed = False
            with fabric.lock:
                fabric.qps[self.qp_num] = self
            self._worker = threading.Thread(target=self._work, daemon=True, name=f"fake QP {self.qp_num}")
            self._worker.start()
            track(self)

        # state transitions, with the attributes each needs
        def to_init(self, attr):
            if self.qp_state != E.IBV_QPS_RESET or attr.qp_access_flags is None:
                raise PyverbsRDMAError("Failed to modify QP state to init")
            self.access = attr.qp_access_flags
            self.qp_state = E.IBV_QPS_INIT

        def to_rtr(self, attr):
            if self.qp_state != E.IBV_QPS_INIT or attr.dest_qp_num is None or attr.ah_attr is None:
                raise PyverbsRDMAError("Failed to modify QP state to RTR")
            ah = attr.ah_attr
            if self.dev.ethernet and not (ah.is_global and ah.gr is not None and ah.gr.dgid is not None):
                raise PyverbsRDMAError("RoCE needs a global route")
            if not self.dev.ethernet and ah.dlid == 0:
                raise PyverbsRDMAError("InfiniBand needs the peer's LID")
            self.attr = attr
            self.qp_state = E.IBV_QPS_RTR

        def to_rts(self, attr):
            if self.qp_state != E.IBV_QPS_RTR or attr.timeout is None or attr.retry_cnt is None:
                raise PyverbsRDMAError("Failed to modify QP state to RTS")
            self.qp_state = E.IBV_QPS_RTS

        def post_recv(self, wr):
            if self.qp_state not in (E.IBV_QPS_INIT, E.IBV_QPS_RTR, E.IBV_QPS_RTS):
                raise PyverbsRDMAError("Failed to post recv")
            with self._cond:
                if len(self._rq) >= self.init.cap.max_recv_wr:
                    raise PyverbsRDMAError("Failed to post recv: the receive queue is full")
                self._rq.append(wr)
                self._cond.notify_all()

        def post_send(self, wr):
            if self.qp_state != E.IBV_QPS_RTS:
                raise PyverbsRDMAError("Failed to post send")
            if wr.send_flags & E.IBV_SEND_INLINE:
                total = sum(s.length for s in wr.sg)
                if total > self.init.cap.max_inline_data:
                    raise PyverbsRDMAError("inline data beyond max_inline_data")
                wr.inline = b"".join(ctypes.string_at(s.addr, s.length) for s in wr.sg)
            with self._cond:
                if len(self._sq) >= self.init.cap.max_send_wr:
                    raise PyverbsRDMAError("Failed to post send: the send queue is full")
                self._sq.append(wr)
                self._cond.notify_all()
            name = {E.IBV_WR_RDMA_WRITE: "write", E.IBV_WR_RDMA_WRITE_WITH_IMM: "write_imm",
                    E.IBV_WR_SEND: "send"}[wr.opcode]
            fabric.posted[name] += 1
            if wr.send_flags & E.IBV_SEND_INLINE:
                fabric.posted[name + "_inline"] += 1
            elif not sum(sg.length for sg in wr.sg):
                fabric.posted[name + "_empty"] += 1
            if name == "write_imm":
                fabric.notices[id(self.init.scq)][self.qp_num] += 1

        def take_recv(self, timeout_s: float = 10.0):
            """The next posted receive; RNR: wait for one (rnr_retry 7 retries without end)."""
            with self._cond:
                if not self._cond.wait_for(lambda: self._rq or self._closed, timeout_s) or self._closed:
                    return None
                return self._rq.popleft()

        def close(self):
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            with fabric.lock:
                fabric.qps.pop(self.qp_num, None)
            untrack(self)

        # the send queue, worked in order
        def _work(self):
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._sq or self._closed)
                    if self._closed:
                        return
                    wr = self._sq.popleft()
                status, opcode = self._execute(wr)
                if status != E.IBV_WC_SUCCESS:
                    self.qp_state = E.IBV_QPS_ERR
                if status != E.IBV_WC_SUCCESS or wr.send_flags & E.IBV_SEND_SIGNALED:
                    self.init.scq.push(WC(wr_id=wr.wr_id, status=status, opcode=opcode,
                                          vendor_err=129 if status == E.IBV_WC_RETRY_EXC_ERR else 0,
                                          byte_len=sum(s.length for s in wr.sg), qp_num=self.qp_num))

        def _local_bytes(self, wr) -> bytes | None:
            if getattr(wr, "inline", None) is not None:
                return wr.inline
            out = b""
            for s in wr.sg:
                mr = fabric.regions.get(s.lkey)
                if mr is None or mr.pd is not self.pd or not (mr.buf <= s.addr and s.addr + s.length <= mr.buf +
                                                               mr.length):
                    return None
                out += ctypes.string_at(s.addr, s.length)
            return out

        def _execute(self, wr):
            opcode = E.IBV_WC_SEND if wr.opcode == E.IBV_WR_SEND else E.IBV_WC_RDMA_WRITE
            if self.qp_state == E.IBV_QPS_ERR:
                return E.IBV_WC_WR_FLUSH_ERR, opcode
            peer = fabric.qps.get(self.attr.dest_qp_num)
            if self.dev.broken or peer is None or peer.dev.broken:
                return E.IBV_WC_RETRY_EXC_ERR, opcode
            with fabric.lock:
                data = self._local_bytes(wr)
                if data is None:
                    return E.IBV_WC_LOC_PROT_ERR, opcode
                if wr.opcode in (E.IBV_WR_RDMA_WRITE, E.IBV_WR_RDMA_WRITE_WITH_IMM) and data:
                    mr = fabric.regions.get(wr.rkey)
                    if (mr is None or mr.pd.ctx.device is not peer.dev or not mr.access & E.IBV_ACCESS_REMOTE_WRITE
                            or not (mr.buf <= wr.remote_addr and wr.remote_addr + len(data) <= mr.buf + mr.length)):
                        return E.IBV_WC_REM_ACCESS_ERR, opcode
                    ctypes.memmove(wr.remote_addr, data, len(data))
                    fabric.bytes_written += len(data)
            if wr.opcode == E.IBV_WR_RDMA_WRITE:
                return E.IBV_WC_SUCCESS, opcode
            recv = peer.take_recv()
            if recv is None:
                return E.IBV_WC_RETRY_EXC_ERR, opcode
            if wr.opcode == E.IBV_WR_SEND:
                target = recv.sg[0]
                with fabric.lock:
                    mr = fabric.regions.get(target.lkey)
                    if mr is None or len(data) > target.length:
                        return E.IBV_WC_REM_ACCESS_ERR, opcode
                    ctypes.memmove(target.addr, data, len(data))
                peer.init.rcq.push(WC(wr_id=recv.wr_id, opcode=E.IBV_WC_RECV, byte_len=len(data),
                                      qp_num=peer.qp_num))
            else:
                peer.init.rcq.push(WC(wr_id=recv.wr_id, opcode=E.IBV_WC_RECV_RDMA_WITH_IMM, byte_len=len(data),
                                      imm_data=wr.imm_data, qp_num=peer.qp_num))
            return E.IBV_WC_SUCCESS, opcode

    qp_mod.QPCap, qp_mod.QPInitAttr, qp_mod.QPAttr, qp_mod.QP = QPCap, QPInitAttr, QPAttr, QP
    return pkg
