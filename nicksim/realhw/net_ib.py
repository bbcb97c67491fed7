"""One direction of a connection between ranks on different hosts, over IB verbs, as NCCL's NET/IB
transport moves it (net_ib/p2p.cc, connect.cc, NCCL 2.30.7).

`ib_net(params, local_rank)` opens the rank's device (its port: local rank mod the ports
NCCL_IB_HCA keeps) with the connection knobs NCCL reads. A connection starts as a TCP socket
through the receiver's NetListener, as NET/Socket's does: over it the two ends swap their queue
pairs' numbers, LID, GID and MTU and the address and key of the sender's CTS FIFO
(ncclIbConnectionMetadata), bring NCCL_IB_QPS_PER_CONNECTION RC queue pairs to RTS and say they
are ready; the socket then only tells whether the peer's process is still there.

Each end keeps the connection's NCCL_STEPS slots in its own host memory, registered with the
device (a ShmRing both of whose ends are in the process, as NetLink's), and a proxy thread:

- the receiver's proxy, for each free slot, posts a receive on each queue pair the request uses
  and RDMA-writes a 64-byte CTS entry (ncclIbSendFifo: the slot's address and size, its rkey,
  nreqs 1, the request's index + 1 last) into the sender's FIFO (ncclIbPostFifo);
- the sender's proxy, once a step is posted and its CTS entry shows the request's index, RDMA-writes
  the step from its slot straight into the receiver's slot (ncclIbMultiSend): split over every
  queue pair in 128-byte-aligned parts with NCCL_IB_SPLIT_DATA_ON_QPS=1, else whole on the next
  queue pair in turn; the last write of each carries the step's length as immediate data (with
  adaptive routing, above NCCL_IB_AR_THRESHOLD, the data goes as a plain write and a zero-byte
  write with immediate follows);
- the receiver's completions (one per queue pair used) post the step to the executor, the sender's
  give the slot back, each in request order.

A completion with an error status ends the connection with NCCL's WARN line ("NET/IB: Got
completion from peer ... with status=IBV_WC_RETRY_EXC_ERR(12) ..."); a peer whose process ended
is named from its socket. Where pyverbs cannot set immediate data (rdma-core < 31) the length
follows the data in a 4-byte SEND.
"""
from __future__ import annotations

import collections
import contextlib
import select
import socket
import struct
import threading
from dataclasses import dataclass

import numpy as np

from ..params import Params
from .net import NetError, ProxiedEnd, link_hello
from .shm import NCCL_STEPS
from .verbs import (IbContext, IbPort, PeerInfo, QueuePair, VerbsError, VerbsUnavailable, ib_ports, load_pyverbs,
                    wc_opcode_name, wc_status_name)

__all__ = ["IbSettings", "IbNet", "IbLink", "ib_net", "CTS_ENTRY", "FIFO_SLOTS", "MAX_RECVS", "WRITE_ALIGN_NBYTES"]

# net_ib/common.h and p2p.cc (NCCL 2.30.7): NCCL_NET_MAX_REQUESTS 32 FIFO slots of
# NCCL_NET_IB_MAX_RECVS 8 entries, each an ncclIbSendFifo with NCCL_NET_MAX_DEVS_PER_NIC 8 rkeys (64
# bytes); a request split over queue pairs in IB_WRITE_CHUNK_ALIGNMENT 128-byte parts.
FIFO_SLOTS = 32
MAX_RECVS = 8
WRITE_ALIGN_NBYTES = 128
CTS_ENTRY = np.dtype([("addr", "<u8"), ("size", "<u8"), ("rkeys", "<u4", (8,)), ("nreqs", "<u4"), ("tag", "<u4"),
                      ("idx", "<u8")])
MAX_QPS = 16
# magic, queue pairs, their numbers, LID, RoCE, MTU, GID, the CTS FIFO's address and rkey
_META = struct.Struct(f"<4sI{MAX_QPS}IHBB16sQI")
_MAGIC = b"NIB1"
_CTS_WR = 1 << 63  # wr_id bit of the receiver's CTS writes, so their completions are told from the data's
_SPIN_S = (0.0, 2e-5, 2e-4, 1e-3)


@dataclass(frozen=True)
class IbSettings:
    """The IB transport's knobs one connection follows (net_ib/connect.cc, init.cc, p2p.cc)."""

    qps: int = 1  # NCCL_IB_QPS_PER_CONNECTION
    split: bool = False  # NCCL_IB_SPLIT_DATA_ON_QPS
    adaptive: int = -2  # NCCL_IB_ADAPTIVE_ROUTING: -2 on for InfiniBand, off for RoCE
    ar_threshold: int = 8192  # NCCL_IB_AR_THRESHOLD
    timeout: int = 20  # NCCL_IB_TIMEOUT
    retry_cnt: int = 7  # NCCL_IB_RETRY_CNT
    tc: int = -1  # NCCL_IB_TC
    sl: int = -1  # NCCL_IB_SL
    gid_index: int = -1  # NCCL_IB_GID_INDEX

    @classmethod
    def from_params(cls, params: Params) -> "IbSettings":
        def get(name: str) -> int:
            return int(params.get(name))
        return cls(max(1, min(MAX_QPS, get("NCCL_IB_QPS_PER_CONNECTION"))), get("NCCL_IB_SPLIT_DATA_ON_QPS") == 1,
                   get("NCCL_IB_ADAPTIVE_ROUTING"), get("NCCL_IB_AR_THRESHOLD"), get("NCCL_IB_TIMEOUT"),
                   get("NCCL_IB_RETRY_CNT"), get("NCCL_IB_TC"), get("NCCL_IB_SL"), get("NCCL_IB_GID_INDEX"))


@dataclass
class IbNet:
    """A rank's verbs transport: its opened port and the knobs; it makes the links."""

    context: IbContext
    settings: IbSettings

    @property
    def name(self) -> str:
        kind = "RoCE" if self.context.ethernet else "IB"
        return f"{self.context.port.device}:{self.context.port.port}/{kind}"

    def connect(self, name: str, nbytes: int, protocol: str, label: str, address: tuple[str, int], tag: str,
                key: tuple, timeout_s: float) -> "IbLink":
        """The sending end: a socket to the receiver's listener, then the queue pairs."""
        try:
            sock = socket.create_connection(address, timeout=timeout_s)
            sock.sendall(link_hello(tag, key, 0))
        except OSError as err:
            raise NetError(f"{label}: cannot connect to {address[0]}:{address[1]} ({err.strerror or err})",
                           "net") from None
        return IbLink(name, nbytes, protocol, label, "send", sock, self, timeout_s)

    def accept(self, name: str, nbytes: int, protocol: str, label: str, sock: socket.socket,
               timeout_s: float) -> "IbLink":
        """The receiving end, on the socket the listener took."""
        return IbLink(name, nbytes, protocol, label, "recv", sock, self, timeout_s)

    def close(self) -> None:
        self.context.close()


def ib_net(params: Params, local_rank: int, api=None, sysfs: str | None = None) -> IbNet:
    """The rank's verbs transport: port `local_rank` mod the active ports NCCL_IB_HCA keeps, opened
    through pyverbs (`api`, else load_pyverbs()); VerbsUnavailable where there is none."""
    ports: list[IbPort] = ib_ports(params.get("NCCL_IB_HCA"), sysfs)
    if not ports:
        raise VerbsUnavailable("no active InfiniBand or RoCE port", "NET/IB", "an RDMA device, or NCCL_IB_DISABLE=1")
    api = api if api is not None else load_pyverbs()
    settings = IbSettings.from_params(params)
    return IbNet(IbContext(api, ports[local_rank % len(ports)], settings.gid_index, sysfs), settings)


@dataclass
class _Request:
    """One step on the wire: its index, the completions still to come, its length."""

    rid: int
    events: int
    nbytes: int = 0


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        got = sock.recv(n - len(out))
        if not got:
            raise ConnectionResetError("closed")
        out += got
    return bytes(out)


class IbLink(ProxiedEnd):
    """One connection's end over RC queue pairs to the peer rank (see the module docstring)."""

    def __init__(self, name: str, step_nbytes: int, protocol: str, label: str, side: str, sock: socket.socket,
                 ib: IbNet, timeout_s: float):
        super().__init__(name, step_nbytes, protocol, label, side, timeout_s)
        self._sock, self._ib = sock, ib
        self._peer = "%s<%d>" % sock.getpeername()[:2]
        ctx = self._ctx = ib.context
        self._wake = threading.Event()
        self._thread = None
        self._owned: list = []  # verbs objects, closed in reverse order before the slots are unmapped
        self._qps: list[QueuePair] = []
        try:
            self._cq = self._own(ctx.completion_queue(4 * NCCL_STEPS * MAX_QPS + 16))
            for _ in range(ib.settings.qps):
                self._qps.append(self._own(ctx.queue_pair(self._cq, 4 * NCCL_STEPS + 4, 2 * NCCL_STEPS + 4,
                                                          CTS_ENTRY.itemsize)))
            self._slots = self._own(ctx.register(self._proxy_ring.slot_memory(), remote_write=side == "recv"))
            self._fifo = np.zeros(FIFO_SLOTS * MAX_RECVS, CTS_ENTRY)  # send: the CTS FIFO; recv: its shadow
            self._fifo_mr = self._own(ctx.register(self._fifo.view(np.uint8), remote_write=side == "send"))
            self._sizes = np.zeros(FIFO_SLOTS, ">u4")  # a step's length where it travels in a SEND
            self._sizes_mr = self._own(ctx.register(self._sizes.view(np.uint8), remote_write=False))
            self._use_imm = ctx.api.imm_data
            s = ib.settings
            self._adaptive = s.adaptive == 1 or (s.adaptive == -2 and not ctx.ethernet)
            with self._setup_errors(timeout_s):
                self._connect(timeout_s)
        except BaseException:
            self._teardown()
            raise

    # --- connection set-up -------------------------------------------------------------------

    def _metadata(self) -> bytes:
        ctx = self._ctx
        qpns = [qp.qpn for qp in self._qps] + [0] * (MAX_QPS - len(self._qps))
        return _META.pack(_MAGIC, len(self._qps), *qpns, ctx.lid, int(ctx.ethernet), ctx.mtu, ctx.gid,
                          self._fifo_mr.addr, self._fifo_mr.rkey)

    def _connect(self, timeout_s: float) -> None:
        """The first half of the set-up, which never waits on the peer's own progress: the sender
        says its metadata; the receiver, whose listener took the sender's socket, reads it, answers
        with its own, brings its queue pairs to RTS and says it is ready (ncclIbConnect /
        ncclIbAccept). `finish` is the rest."""
        self._sock.settimeout(timeout_s)
        if self.side == "send":
            self._sock.sendall(self._metadata())
        else:
            self._take_peer(_recv_exact(self._sock, _META.size))
            self._sock.sendall(self._metadata())
            self._rts()
            self._sock.sendall(b"R")

    def finish(self) -> None:
        """The rest of the set-up, once this rank has made and accepted all its connections: the
        sender reads the receiver's metadata, brings its queue pairs up and says it is ready; both
        wait for the other's "ready"; then the proxy starts."""
        with self._setup_errors(self._timeout_s):
            if self.side == "send":
                self._take_peer(_recv_exact(self._sock, _META.size))
                self._rts()
                self._sock.sendall(b"R")
            if _recv_exact(self._sock, 1) != b"R":
                raise NetError(f"{self.label}: the peer did not bring its queue pairs up", "net")
        self._sock.settimeout(None)
        self._thread = threading.Thread(target=self._proxy_main, daemon=True, name=f"{self.label} proxy")
        self._thread.start()

    def _take_peer(self, theirs: bytes) -> None:
        magic, nqps, *rest = _META.unpack(theirs)
        qpns, (lid, ethernet, mtu, gid, fifo_addr, fifo_rkey) = rest[:MAX_QPS], rest[MAX_QPS:]
        if magic != _MAGIC:
            raise NetError(f"{self.label}: the peer's IB connection data is not nicksim's", "net")
        if nqps != len(self._qps):
            raise NetError(f"{self.label}: the peer uses {nqps} queue pairs per connection and this rank "
                           f"{len(self._qps)} (NCCL_IB_QPS_PER_CONNECTION differs)", "net")
        if bool(ethernet) != self._ctx.ethernet:
            raise NetError(f"{self.label}: one end is RoCE and the other InfiniBand", "net")
        self._peer_info = PeerInfo(tuple(qpns[:nqps]), lid, bool(ethernet), mtu, gid)
        self._remote_fifo = (fifo_addr, fifo_rkey)

    def _rts(self) -> None:
        s = self._ib.settings
        for qp, qpn in zip(self._qps, self._peer_info.qpns):
            qp.connect(self._peer_info, qpn, s.timeout, s.retry_cnt, s.tc, s.sl)

    @contextlib.contextmanager
    def _setup_errors(self, timeout_s: float):
        """A set-up failure as one NetError naming the connection (verbs, a silent or closed peer)."""
        try:
            yield
        except socket.timeout:
            raise NetError(f"{self.label}: the peer at {self._peer} did not answer the IB connection within "
                           f"{timeout_s:g} s", "net") from None
        except VerbsError as err:
            raise NetError(f"{self.label}: {err.what}", "net") from None
        except OSError as err:
            raise NetError(f"{self.label}: the peer's socket closed during the IB connection ({err})", "net") \
                from None

    # --- the proxy thread ----------------------------------------------------------------------

    def _poke(self) -> None:
        self._wake.set()

    def _proxy_main(self) -> None:
        inflight: collections.deque[_Request] = collections.deque()
        by_id: dict[int, _Request] = {}
        self._next_id = 0
        idle = 0
        try:
            while not self._stopping:
                moved = self._reap(by_id)
                if self._retire(inflight, by_id):
                    self._progressed()
                    moved = True
                if self._gone is not None:
                    return
                moved = (self._send_next(inflight, by_id) if self.side == "send" else
                         self._post_cts(inflight, by_id)) or moved
                if moved:
                    idle = 0
                    continue
                idle += 1
                if idle % 64 == 0 and self._peer_closed():
                    # what already arrived is still delivered; the executor hears of it when it waits
                    self._reap(by_id)
                    self._retire(inflight, by_id)
                    self._gone = NetError(f"{self.label}: the peer at {self._peer} closed its end (its process "
                                          "ended)", "net")
                    return
                self._wake.wait(_SPIN_S[min(idle // 256, len(_SPIN_S) - 1)])
                self._wake.clear()
        except (VerbsError, NetError) as err:
            if not self._stopping:
                self._error = err if isinstance(err, NetError) else NetError(f"{self.label}: {err.what}", "net")
        except OSError as err:
            if not self._stopping:
                self._error = NetError(f"{self.label}: the peer's socket failed ({err})", "net")
        finally:
            self._progressed()  # an executor asleep on this end hears of the end or the failure

    def _peer_closed(self) -> bool:
        """Whether the peer's end is gone: its socket says nothing until it closes."""
        readable, _, _ = select.select([self._sock], [], [], 0)
        return bool(readable) and not self._sock.recv(1)

    def _completion_error(self, wc) -> NetError:
        ctx = self._ctx
        gids = f" localGid {ctx.gid_text}" if ctx.ethernet else ""
        return NetError(f"{self.label}: NET/IB: Got completion from peer {self._peer} with "
                        f"status={wc_status_name(wc.status)}({wc.status}) opcode={wc_opcode_name(wc.opcode)}"
                        f"({wc.opcode}) vendor_err={wc.vendor_err}{gids} hca {ctx.port.device}", "net")

    def _reap(self, by_id: dict[int, _Request]) -> bool:
        """Take the completions the queue has: each of a request's ends one of its events."""
        wcs = self._ctx.poll(self._cq, 2 * NCCL_STEPS)
        e = self._ctx.api.enums
        for wc in wcs:
            if wc.status != 0 and self.side == "recv" and (wc.wr_id & _CTS_WR or self._gone is not None):
                # A slot offered to a sender whose queue pairs are gone (it may simply have finished
                # and closed before its socket said so): the steps that came are still delivered,
                # and the error is the executor's only once it waits for more.
                self._gone = self._gone or self._completion_error(wc)
                continue
            if wc.status != 0:
                raise self._completion_error(wc)
            if wc.wr_id & _CTS_WR:
                continue  # the CTS entry reached the sender's FIFO
            req = by_id.get(wc.wr_id)
            if req is None:
                raise NetError(f"{self.label}: a completion for request {wc.wr_id}, which is not on the wire", "net")
            if self.side == "recv":
                if wc.opcode == int(e.IBV_WC_RECV_RDMA_WITH_IMM):
                    req.nbytes = socket.ntohl(wc.imm_data)
                else:  # the length came in a SEND after the data
                    req.nbytes = int(self._sizes[req.rid % FIFO_SLOTS])
                if req.nbytes > self.step_nbytes:
                    raise NetError(f"{self.label}: a step of {req.nbytes} bytes in slots of {self.step_nbytes} (the "
                                   "ranks run different plans)", "net")
            req.events -= 1
        return bool(wcs)

    def _retire(self, inflight, by_id) -> bool:
        """Finish, in order, the requests all of whose completions came: the sender gives the slot
        back, the receiver posts the step."""
        moved = False
        while inflight and inflight[0].events == 0:
            req = inflight.popleft()
            del by_id[req.rid]
            if self.side == "send":
                self._proxy_ring.release()
            else:
                self._proxy_ring.post(req.nbytes)
            moved = True
        return moved

    def _qps_of(self, rid: int) -> list[QueuePair]:
        """The queue pairs request `rid` travels on (ncclIbCommBaseGetQpForRequest): all of them,
        split, or one, the next in turn."""
        n = len(self._qps) if self._ib.settings.split else 1
        return [self._qps[(rid * n + i) % len(self._qps)] for i in range(n)]

    def _post_cts(self, inflight, by_id) -> bool:
        """Offer the sender the next free slot (ncclIbIrecv + ncclIbPostFifo)."""
        if len(inflight) >= NCCL_STEPS or self._proxy_ring.credits() <= len(inflight):
            return False
        rid = self._next_id
        qps = self._qps_of(rid)
        size_addr = self._sizes_mr.addr + (rid % FIFO_SLOTS) * 4
        for qp in qps:
            qp.recv(rid, size_addr, 4, self._sizes_mr.lkey)
        slot = self._proxy_ring.slot_ahead(len(inflight), self.step_nbytes)
        index = (rid % FIFO_SLOTS) * MAX_RECVS
        entry = self._fifo[index]
        entry["addr"], entry["size"], entry["nreqs"], entry["tag"] = slot.ctypes.data, self.step_nbytes, 1, 0
        entry["rkeys"][:] = 0
        entry["rkeys"][0] = self._slots.rkey
        entry["idx"] = rid + 1
        fifo_addr, fifo_rkey = self._remote_fifo
        qps[0].write(_CTS_WR | rid, self._fifo_mr.addr + index * CTS_ENTRY.itemsize, CTS_ENTRY.itemsize,
                     self._fifo_mr.lkey, fifo_addr + index * CTS_ENTRY.itemsize, fifo_rkey, signaled=True,
                     inline=True)
        req = _Request(rid, len(qps))
        inflight.append(req)
        by_id[rid] = req
        self._next_id += 1
        return True

    def _send_next(self, inflight, by_id) -> bool:
        """Write the next posted step into the receiver's slot once its CTS entry is there."""
        if len(inflight) >= NCCL_STEPS:
            return False
        data = self._proxy_ring.posted_ahead(len(inflight))
        if data is None:
            return False
        rid = self._next_id
        entry = self._fifo[(rid % FIFO_SLOTS) * MAX_RECVS]
        if int(entry["idx"]) != rid + 1:
            return False  # the receiver has not offered its slot yet
        nbytes = data.size
        remote, rkey = int(entry["addr"]), int(entry["rkeys"][0])
        if nbytes > int(entry["size"]) or remote == 0 or rkey == 0:
            raise NetError(f"{self.label}: NET/IB : req 0/1 tag 0 peer {self._peer} posted incorrect receive info: "
                           f"size {int(entry['size'])} addr {remote:x} rkeys[0]={rkey:x}", "net")
        qps = self._qps_of(rid)
        part = -(-(-(-nbytes // len(qps))) // WRITE_ALIGN_NBYTES) * WRITE_ALIGN_NBYTES
        addr, lkey, offset = data.ctypes.data, self._slots.lkey, 0
        late_imm = self._adaptive and nbytes > self._ib.settings.ar_threshold
        for qp in qps:
            n = min(part, nbytes - offset)
            if not self._use_imm:
                self._sizes[rid % FIFO_SLOTS] = nbytes
                qp.write(rid, addr + offset, n, lkey, remote + offset, rkey, signaled=False)
                qp.send(rid, self._sizes_mr.addr + (rid % FIFO_SLOTS) * 4, 4, self._sizes_mr.lkey)
            elif late_imm:
                qp.write(rid, addr + offset, n, lkey, remote + offset, rkey, signaled=False)
                qp.write(rid, addr + offset, 0, lkey, remote + offset, rkey, imm=nbytes)
            else:
                qp.write(rid, addr + offset, n, lkey, remote + offset, rkey, imm=nbytes)
            offset += n
        req = _Request(rid, len(qps), nbytes)
        inflight.append(req)
        by_id[rid] = req
        self._next_id += 1
        return True

    # --- closing -------------------------------------------------------------------------------

    def _own(self, obj):
        self._owned.append(obj)
        return obj

    def _teardown(self) -> None:
        # queue pairs first, then the registrations, then the queue, and only then the slots' mapping
        for obj in reversed(self._owned):
            try:
                obj.close()
            except Exception:  # pyverbs raises its own errors for a device already gone
                pass
        self._owned.clear()
        try:
            self._sock.close()
        except OSError:
            pass
        self._close_rings()

    def close(self) -> None:
        """Let the proxy move what the executor posted, stop it, close the socket and the FIFO
        (once: a second call does nothing)."""
        if self._stopping:
            return
        if self._thread is not None:
            self._drain()
        self._stopping = True
        self._poke()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._teardown()
