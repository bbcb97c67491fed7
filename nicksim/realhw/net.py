"""One direction of a connection between ranks on different hosts, over TCP sockets, as NCCL's
NET/Socket transport moves it.

`socket_config(params, ifname)` is how many helper threads and sockets a connection uses
(NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD, with net_socket.cc's automatic choice);
`find_interfaces(setting, root_host)` the interfaces NCCL_SOCKET_IFNAME names, or the ones NCCL
would pick without it. A rank listens on its interface (`NetListener`); a sender connects a
control socket and the data sockets to the receiver's listener (`NetLink.connect`), the receiver
takes them off its listener (`NetListener.accept_links`).

Each side keeps the connection's NCCL_STEPS slots in its own host memory (a ShmRing both of
whose ends are in the process) and a proxy thread that moves steps between them and the
sockets, so a `NetLink` offers the executor the same calls a ShmRing does. The sender's proxy
takes each posted step, sends its length on the control socket (and the bytes too when there are
no data sockets, or when they fit NCCL_SOCKET_INLINE), and cuts the bytes into tasks of at least
NCCL_SOCKET_MIN_TASKSIZE over the data sockets in turn, each socket served by its helper thread;
the receiver's proxy does the same in reverse into a free slot, so both ends cut every step
alike. Up to NCCL_STEPS steps are on the wire at once, and each side finishes them in order (the
sender frees the slot, the receiver posts it). A closed or silent peer surfaces as NetError
naming the connection.
"""
from __future__ import annotations

import collections
import fcntl
import itertools
import os
import queue
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import NickSimError, UsageError
from ..params import Params
from .shm import NCCL_STEPS, ShmRing

__all__ = ["NetError", "SocketConfig", "socket_config", "find_interfaces", "match_interfaces", "NetListener",
           "ProxiedEnd", "NetLink", "NetPeers", "link_hello", "fifo_name"]

# net_socket.cc (NCCL 2.29.7): MAX_SOCKETS, MAX_THREADS, NCCL_SOCKET_MIN_TASKSIZE's default.
MAX_SOCKETS = 64
MAX_THREADS = 16
MIN_TASK_NBYTES = 1 << 16
INLINE_NBYTES = 128  # NCCL_SOCKET_INLINE's default: a step this small travels with its length
# net_socket.cc's automatic choice by the NIC's PCI vendor: AWS (ENA) 2 threads x 8 sockets,
# GCP (gVNIC) 4 x 1; anything else no helper thread and the control socket carries the data.
_AUTO_BY_VENDOR = {"0x1d0f": (2, 8), "0x1ae0": (4, 1)}
_SIZE = struct.Struct("<i")  # SOCKET_CTRL_SIZE: a step's length, an int, on the control socket
_HELLO = struct.Struct("!64sIIIII")  # job tag, channel, src, dst, conn, socket index
_SIOCGIFADDR = 0x8915
_IOV_MAX = 1024  # the most buffers one sendmsg takes (Linux UIO_MAXIOV)


class NetError(NickSimError):
    """A socket connection between two ranks broke or its peer fell silent."""

    kind = "net"


@dataclass(frozen=True)
class SocketConfig:
    """Helper threads per connection and sockets per thread (0 threads: the control socket alone)."""

    nthreads: int
    nsocks_per_thread: int

    @property
    def nsocks(self) -> int:
        return self.nthreads * self.nsocks_per_thread


def _nic_vendor(ifname: str) -> str | None:
    try:
        with open(f"/sys/class/net/{ifname}/device/vendor") as f:
            return f.read(6)
    except OSError:
        return None


def socket_config(params: Params, ifname: str | None) -> SocketConfig:
    """NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD, -2 meaning net_socket.cc's automatic
    choice for the interface's NIC; at most MAX_THREADS threads and MAX_SOCKETS sockets."""
    nthreads = int(params.get("NCCL_SOCKET_NTHREADS"))
    per_thread = int(params.get("NCCL_NSOCKS_PERTHREAD"))
    if nthreads == -2 or per_thread == -2:
        auto_threads, auto_socks = _AUTO_BY_VENDOR.get(_nic_vendor(ifname) if ifname else None, (0, 1))
        nthreads = auto_threads if nthreads == -2 else nthreads
        per_thread = auto_socks if per_thread == -2 else per_thread
    if nthreads < 0 or per_thread < 0:
        raise UsageError(f"NCCL_SOCKET_NTHREADS={nthreads}, NCCL_NSOCKS_PERTHREAD={per_thread}", "environment",
                         "whole numbers from 0 (or -2 for NCCL's automatic choice)")
    nthreads = min(nthreads, MAX_THREADS)
    if nthreads and nthreads * per_thread > MAX_SOCKETS:
        per_thread = MAX_SOCKETS // nthreads
    return SocketConfig(nthreads, per_thread if nthreads else 0)


# --- interfaces ---------------------------------------------------------------------------

def _ipv4_of(ifname: str) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            raw = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", ifname.encode()[:15]))
        except OSError:
            return None  # no IPv4 address, or the interface is gone
    return socket.inet_ntoa(raw[20:24])


def _interfaces() -> list[tuple[str, str]]:
    """(name, IPv4 address) of every interface that has one, in the kernel's order."""
    found = []
    for _, name in socket.if_nameindex():
        addr = _ipv4_of(name)
        if addr:
            found.append((name, addr))
    return found


def match_interfaces(setting: str, names: list[str]) -> list[str]:
    """The names NCCL_SOCKET_IFNAME's grammar selects: comma-separated prefixes, '=' first for
    exact names, '^' first to take every interface but those (utils.cc matchIfList)."""
    text = setting
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    wanted = [w.strip() for w in text.split(",") if w.strip()]

    def matches(name: str) -> bool:
        return any(name == w if exact else name.startswith(w) for w in wanted)

    return [n for n in names if matches(n) != exclude]


def _same_subnet(addr: str, other: str) -> bool:
    # NCCL matches the interface's own netmask; a /24 is what a lab's flat network and these
    # tests use, so it stands in for reading the mask.
    return addr.rsplit(".", 1)[0] == other.rsplit(".", 1)[0]


def find_interfaces(setting: str | None, root_host: str | None) -> list[tuple[str, str]]:
    """The interfaces a rank's sockets use, as socket.cc ncclFindInterfaces picks them: those
    NCCL_SOCKET_IFNAME names; else ib*, else one on the root's subnet, else any but docker, lo
    and virbr, else docker, lo, virbr. Raises UsageError when a named setting matches none."""
    found = _interfaces()
    names = [n for n, _ in found]
    addr_of = dict(found)
    if setting and len(setting) > 1:
        chosen = match_interfaces(setting, names)
        if not chosen:
            raise UsageError(f"NCCL_SOCKET_IFNAME={setting} matches no interface with an IPv4 address",
                             "environment", f"one of {', '.join(names) or '(none)'}")
        return [(n, addr_of[n]) for n in chosen]
    for attempt in ("ib", "subnet", "^docker,lo,virbr", "docker", "lo", "virbr"):
        if attempt == "subnet":
            chosen = [n for n in names if root_host and _is_ipv4(root_host) and _same_subnet(addr_of[n], root_host)]
        else:
            chosen = match_interfaces(attempt, names)
        if chosen:
            return [(n, addr_of[n]) for n in chosen]
    raise UsageError("no network interface has an IPv4 address", "environment", "an interface that is up")


def _is_ipv4(text: str) -> bool:
    try:
        socket.inet_aton(text)
        return text.count(".") == 3
    except OSError:
        return False


# --- connections --------------------------------------------------------------------------

def link_hello(tag: str, key: tuple, index: int) -> bytes:
    """What a sender's socket says first: the job, the connection and which of its sockets it is."""
    return _HELLO.pack(tag.encode()[:64], *key, index)


def _recv_into(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionResetError("closed")
        got += n


def _sendmsg_all(sock: socket.socket, buffers: list) -> None:
    """Send every buffer in order, in as few calls as the socket takes them."""
    buffers = [b for b in buffers if len(b)]
    while buffers:
        sent = sock.sendmsg(buffers[:_IOV_MAX])
        while buffers and sent >= len(buffers[0]):
            sent -= len(buffers.pop(0))
        if sent:
            buffers[0] = memoryview(buffers[0])[sent:]


def _tasks(nbytes: int, nsocks: int) -> list[tuple[int, int]]:
    """(offset, length) of each task a step of `nbytes` is cut into over `nsocks` data sockets."""
    size = max(MIN_TASK_NBYTES, -(-nbytes // nsocks))
    return [(off, min(size, nbytes - off)) for off in range(0, nbytes, size)]


class _Transfer:
    """One step on the wire: its length and the tasks of it still moving (0: done)."""

    __slots__ = ("nbytes", "left", "error")

    def __init__(self, nbytes: int, left: int):
        self.nbytes, self.left, self.error = nbytes, left, None


class _Helpers:
    """NCCL_SOCKET_NTHREADS threads, each owning NCCL_NSOCKS_PERTHREAD of the data sockets and
    running the tasks given to its sockets in order. `start(view)` cuts a step into tasks, hands
    them out in turn and returns its _Transfer at once; `on_done` is called as each task ends."""

    def __init__(self, socks: list[socket.socket], config: SocketConfig, sending: bool, label: str, on_done):
        self._socks, self._sending, self._on_done = socks, sending, on_done
        self._per_thread = max(1, config.nsocks_per_thread)
        self._queues = [queue.Queue() for _ in range(config.nthreads)]
        self._lock = threading.Lock()
        self._next = itertools.cycle(range(len(socks)))  # NCCL's comm->nextSock, kept across steps
        self._threads = [threading.Thread(target=self._serve, args=(q,), daemon=True, name=f"{label} helper {i}")
                         for i, q in enumerate(self._queues)]
        for t in self._threads:
            t.start()

    def _serve(self, tasks: queue.Queue) -> None:
        while True:
            item = tasks.get()
            if item is None:
                return
            sock, view, transfer = item
            error = None
            try:
                if self._sending:
                    sock.sendall(view)
                else:
                    _recv_into(sock, view)
            except OSError as err:
                error = err
            with self._lock:
                transfer.left -= 1
                transfer.error = transfer.error or error
            self._on_done()

    def start(self, view: memoryview) -> _Transfer:
        pieces = _tasks(len(view), len(self._socks))
        transfer = _Transfer(len(view), len(pieces))
        for off, n in pieces:
            s = next(self._next)
            self._queues[s // self._per_thread].put((self._socks[s], view[off:off + n], transfer))
        return transfer

    def stop(self) -> None:
        for q in self._queues:
            q.put(None)


class ProxiedEnd:
    """One connection's end whose bytes a proxy thread moves: the executor's FIFO (`_ring`, its own
    side of a ShmRing whose other side, `_proxy_ring`, the proxy holds in the same process).
    Offers the calls the executor makes on a ShmRing; the first proxy failure (`_error`) is raised
    by the next of them. Subclasses move the steps (`_poke` wakes their proxy)."""

    def __init__(self, name: str, step_nbytes: int, protocol: str, label: str, side: str, timeout_s: float):
        # A step crosses the network as its data and length: the slots hold the data a step of the
        # protocol carries (LL's and LL128's flagged lines are the shared-memory buffers' layout).
        self.label, self.side, self.protocol = label, side, protocol
        self.data_nbytes = self.step_nbytes = ShmRing.layout(protocol).step_data_nbytes(step_nbytes)
        mine = ShmRing.create(name, self.data_nbytes, label)
        try:
            proxy = ShmRing.attach(name, self.data_nbytes, label, timeout_s)
        finally:
            mine.unlink()
        if side == "send":
            mine, proxy = proxy, mine  # the executor posts; the proxy takes the steps
        self._ring, self._proxy_ring = mine, proxy
        self._timeout_s = timeout_s
        self._error: BaseException | None = None
        self._gone: BaseException | None = None  # the peer ended: an error once the executor needs it
        self._stopping = False
        self._watcher: threading.Event | None = None
        self._abandoned = False

    def watch(self, event: threading.Event) -> None:
        """Set `event` whenever the proxy hands the executor a step or a slot, or fails: what an
        executor that waits only on proxied ends sleeps on instead of spinning."""
        self._watcher = event

    def _progressed(self) -> None:
        watcher = self._watcher
        if watcher is not None:
            watcher.set()

    def _poke(self) -> None:
        """Wake the proxy: the executor posted or released a step."""

    def _check(self) -> None:
        if self._error is not None:
            raise self._error

    def _check_recv(self) -> None:
        """A peer that ended after sending all it had is an error only once nothing is left to take."""
        self._check()
        if self._gone is not None and not self._ring.can_recv():
            raise self._gone

    def _check_send(self) -> None:
        self._check()
        if self._gone is not None:
            raise self._gone

    def can_send(self) -> bool:
        self._check_send()
        return self._ring.can_send()

    def can_recv(self) -> bool:
        self._check_recv()
        return self._ring.can_recv()

    def free_steps(self) -> int:
        self._check_send()
        return self._ring.free_steps()

    def ready_steps(self) -> int:
        self._check_recv()
        return self._ring.ready_steps()

    def reserve(self, nbytes: int, steps: int = 1) -> np.ndarray:
        return self._ring.reserve(nbytes, steps)

    def post(self, nbytes: int, steps: int = 1) -> None:
        self._ring.post(nbytes, steps)
        self._poke()

    def send(self, data: np.ndarray, timeout_s: float, steps: int = 1) -> None:
        self._check_send()
        self._ring.send(data, timeout_s, steps)
        self._poke()

    def recv(self, timeout_s: float, steps: int = 1, nbytes: int | None = None) -> np.ndarray:
        self._check_recv()
        return self._ring.recv(timeout_s, steps)

    def abandon(self) -> None:
        """The rank failed: `close` stops at once, without waiting for the peer to take what
        was posted (a peer that stopped reading would hold it for the whole timeout)."""
        self._abandoned = True

    def _drain(self) -> None:
        """Before closing a sending end: wait (up to the timeout) until the proxy has moved every
        step the executor posted, so an end that finished first never cuts its last steps off."""
        if self.side != "send" or self._abandoned:
            return
        deadline = time.monotonic() + self._timeout_s
        while self._error is None and self._gone is None and self._ring.credits() < NCCL_STEPS \
                and time.monotonic() < deadline:
            self._poke()
            time.sleep(1e-4)

    def release(self, steps: int = 1) -> None:
        self._ring.release(steps)
        self._poke()

    def unlink(self) -> None:
        pass  # the FIFO's name went when it was made

    def finish(self) -> None:
        """Complete the connection once this rank has made and accepted all of its own (a
        transport whose set-up needs the peer's answer waits for it here)."""

    def _close_rings(self) -> None:
        self._ring.close()
        self._proxy_ring.close()


class NetLink(ProxiedEnd):
    """One connection's end over TCP sockets to the peer rank (see the module docstring)."""

    def __init__(self, name: str, step_nbytes: int, protocol: str, label: str, side: str,
                 socks: list[socket.socket], config: SocketConfig, timeout_s: float):
        super().__init__(name, step_nbytes, protocol, label, side, timeout_s)
        self._ctrl, self._data = socks[0], socks[1:]
        # The proxy sleeps in select() on this pair and the control socket; the executor and the
        # helper threads write a byte to wake it.
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        for s in socks:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(None)
        self._ended = False  # the receiver read the end of the sender's stream
        self._helpers = _Helpers(self._data, config, side == "send", label, self._poke) if self._data else None
        self._thread = threading.Thread(target=self._proxy_main, daemon=True, name=f"{label} proxy")
        self._thread.start()

    @classmethod
    def connect(cls, name: str, step_nbytes: int, protocol: str, label: str, address: tuple[str, int], tag: str,
                key: tuple, config: SocketConfig, timeout_s: float) -> "NetLink":
        """The sending end: connect the control socket and the data sockets to the receiver."""
        socks = []
        try:
            for index in range(1 + config.nsocks):
                sock = socket.create_connection(address, timeout=timeout_s)
                socks.append(sock)
                sock.sendall(link_hello(tag, key, index))
        except OSError as err:
            for s in socks:
                s.close()
            raise NetError(f"{label}: cannot connect to {address[0]}:{address[1]} ({err.strerror or err})",
                           "net") from None
        return cls(name, step_nbytes, protocol, label, "send", socks, config, timeout_s)

    # --- the proxy thread --------------------------------------------------------------------

    def _proxy_main(self) -> None:
        inflight: collections.deque[_Transfer] = collections.deque()
        try:
            while not self._stopping:
                moved = self._retire(inflight)
                if moved:
                    self._progressed()
                if self._ended and not inflight:
                    # what came is the executor's to read; the end is its error once it waits for more
                    self._gone = NetError(f"{self.label}: the peer's socket closed its end", "net")
                    return
                moved = (self._forward_next(inflight) if self.side == "send" else self._receive_next(inflight)) \
                    or moved
                if not moved:
                    self._sleep(want_ctrl=self.side == "recv" and not self._ended
                                and self._proxy_ring.credits() > len(inflight))
        except (OSError, ValueError) as err:
            if not self._stopping:
                what = "closed its end" if isinstance(err, ConnectionError) else f"failed ({err})"
                self._error = NetError(f"{self.label}: the peer's socket {what}", "net")
        finally:
            self._progressed()  # an executor asleep on this end hears of the failure

    def _poke(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass  # already awake (the pair is full) or closing

    def _sleep(self, want_ctrl: bool) -> None:
        """Until the executor or a helper pokes, or (receiving) the next step's length arrives."""
        watched = [self._wake_r, self._ctrl] if want_ctrl else [self._wake_r]
        select.select(watched, [], [], 0.05)
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    def _retire(self, inflight) -> bool:
        """Finish the steps at the head of the line whose tasks all ended, in order: the sender
        gives their slots back, the receiver posts them to the executor."""
        moved = False
        while inflight and inflight[0].left == 0:
            transfer = inflight.popleft()
            if transfer.error is not None:
                raise transfer.error
            if self.side == "send":
                self._proxy_ring.release()
            else:
                self._proxy_ring.post(transfer.nbytes)
            moved = True
        return moved

    def _forward_next(self, inflight) -> bool:
        """Put the posted steps not yet on the wire there: each one's length on the control
        socket, its bytes on the data sockets, or after the length where the control socket
        carries them (every such step posted so far in one sendmsg: one push for many steps)."""
        if len(inflight) >= NCCL_STEPS:
            return False
        data = self._proxy_ring.posted_ahead(len(inflight))
        if data is None:
            return False
        if not self._helpers:
            batch = []
            while data is not None and len(inflight) < NCCL_STEPS:
                batch += [_SIZE.pack(len(data)), memoryview(data)]
                inflight.append(_Transfer(len(data), 0))
                data = self._proxy_ring.posted_ahead(len(inflight))
            _sendmsg_all(self._ctrl, batch)
            return True
        view = memoryview(data)
        inline = len(view) <= INLINE_NBYTES
        self._ctrl.sendall(_SIZE.pack(len(view)) + (bytes(view) if inline else b""))
        inflight.append(_Transfer(len(view), 0) if inline else self._helpers.start(view))
        return True

    def _receive_next(self, inflight) -> bool:
        """Take the next step's length off the control socket once a slot is free for it, and
        its bytes into that slot (from the data sockets: several steps may be on the way)."""
        if self._ended or self._proxy_ring.credits() <= len(inflight):
            return False
        if self._helpers and not select.select([self._ctrl], [], [], 0)[0]:
            return False
        head = bytearray(_SIZE.size)
        got = self._ctrl.recv_into(head)
        if got == 0:  # the sender closed between steps: it finished, or it died with nothing half sent
            self._ended = True
            return True
        _recv_into(self._ctrl, memoryview(head)[got:])
        (nbytes,) = _SIZE.unpack(head)
        if not 0 <= nbytes <= self.step_nbytes:
            raise ValueError(f"a step of {nbytes} bytes in slots of {self.step_nbytes} (the ranks run different plans)")
        slot = memoryview(self._proxy_ring.slot_ahead(len(inflight), nbytes))
        if self._helpers and nbytes > INLINE_NBYTES:
            inflight.append(self._helpers.start(slot))
        else:
            if nbytes:
                _recv_into(self._ctrl, slot)
            inflight.append(_Transfer(nbytes, 0))
        return True

    def close(self) -> None:
        """Let the proxy put on the wire what the executor posted, stop it and its helpers, close
        the sockets and the FIFO (once: a second call does nothing)."""
        if self._stopping:
            return
        self._drain()
        self._stopping = True
        self._poke()
        for s in [self._ctrl, *self._data]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        self._thread.join(timeout=5)
        if self._helpers:
            self._helpers.stop()
        self._close_rings()
        self._wake_r.close()
        self._wake_w.close()


class NetListener:
    """A rank's listening socket on its interface; `address` is what the other ranks connect to."""

    def __init__(self, host: str, timeout_s: float):
        self._sock = socket.create_server((host, 0), backlog=1024)
        self.address = (host, self._sock.getsockname()[1])
        self._timeout_s = timeout_s

    def accept_links(self, tag: str, keys: set, nsocks: int, deadline: float) -> dict[tuple, list[socket.socket]]:
        """The 1 + nsocks sockets of every connection in `keys`, in socket order, as their senders
        connect; connections from other jobs or strays are dropped."""
        want = {key: [None] * (1 + nsocks) for key in keys}
        try:
            self._accept_into(want, tag, nsocks, deadline)
        except BaseException:
            for socks in want.values():
                for sock in socks:
                    if sock is not None:
                        sock.close()
            raise
        return want

    def _accept_into(self, want: dict, tag: str, nsocks: int, deadline: float) -> None:
        missing = sum(s is None for socks in want.values() for s in socks)
        while missing:
            left = deadline - time.monotonic()
            if left <= 0:
                waiting = sorted(k for k, socks in want.items() if any(s is None for s in socks))
                raise NetError(f"{len(waiting)} connection(s) from other hosts did not arrive within "
                               f"{self._timeout_s:g} s (first: channel {waiting[0][0]}, rank {waiting[0][1]} -> "
                               f"rank {waiting[0][2]})", "net")
            self._sock.settimeout(left)
            try:
                sock, _ = self._sock.accept()
            except socket.timeout:
                continue
            sock.settimeout(max(0.1, min(left, 5.0)))
            try:
                head = bytearray(_HELLO.size)
                _recv_into(sock, memoryview(head))
            except OSError:
                sock.close()
                continue
            job, *key, index = _HELLO.unpack(head)
            key = tuple(key)
            if job.rstrip(b"\0").decode(errors="replace") != tag[:64] or key not in want \
                    or index > nsocks or want[key][index] is not None:
                sock.close()
                continue
            want[key][index] = sock
            missing -= 1

    def close(self) -> None:
        self._sock.close()


def fifo_name(tag: str, key: tuple, side: str) -> str:
    """The name a NetLink's FIFO has under /dev/shm for the instant between making and mapping it."""
    return f"nicksim-{tag}-c{key[0]}-{key[1]}to{key[2]}-{key[3]}-{side}{os.getpid()}"


@dataclass(frozen=True)
class NetPeers:
    """What a rank needs to reach ranks on other hosts: each rank's node and listening address,
    its own listener, the sockets per connection, and — where NET goes over IB verbs — the
    rank's verbs transport (net_ib.IbNet), which makes the links instead of sockets."""

    nodes: tuple[int, ...]
    addresses: tuple[tuple[str, int], ...]
    listener: NetListener
    config: SocketConfig
    ib: Any = None

    def connect_link(self, name: str, nbytes: int, protocol: str, label: str, tag: str, key: tuple,
                     timeout_s: float):
        """The sending end of connection `key` to rank key[2] on another host."""
        address = tuple(self.addresses[key[2]])
        if self.ib is not None:
            return self.ib.connect(name, nbytes, protocol, label, address, tag, key, timeout_s)
        return NetLink.connect(name, nbytes, protocol, label, address, tag, key, self.config, timeout_s)

    def accept_links(self, tag: str, keys: set, timeout_s: float) -> dict[tuple, list[socket.socket]]:
        """The sockets of every connection in `keys` that ranks on other hosts send on."""
        nsocks = 0 if self.ib is not None else self.config.nsocks
        return self.listener.accept_links(tag, keys, nsocks, time.monotonic() + timeout_s)

    def receiving_link(self, name: str, nbytes: int, protocol: str, label: str, socks: list[socket.socket],
                       timeout_s: float):
        """The receiving end of a connection whose sockets `accept_links` took."""
        if self.ib is not None:
            return self.ib.accept(name, nbytes, protocol, label, socks[0], timeout_s)
        return NetLink(name, nbytes, protocol, label, "recv", socks, self.config, timeout_s)
