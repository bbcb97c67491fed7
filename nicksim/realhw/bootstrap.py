"""The ranks of a real-backend job joined over TCP, through a root that rank 0 runs.

`Bootstrap.join(rank, size, root, timeout_s, job)` connects a rank to the root at `root` (rank 0
listens there; the others retry until it does, as NCCL's bootstrap does). Once every rank has said
hello with its rank, size and job identity, `allgather(item)` gives each rank every rank's item, in
rank order: the hosts, devices and addresses they exchange, a digest of the plan each built. Items
are JSON values. A rank whose job identity is not the root's (two jobs given one NICKSIM_COMM_ID) is
turned away with a line saying so; the root goes on waiting for its own ranks.

Nothing waits forever, and a lost rank is known at once. After the join, every connection carries
a heartbeat both ways (a few a second) and a thread on each rank reads it. A connection that
closes is a rank that ended: known as soon as the socket says so. A connection that carries nothing
for `timeout_s` is a rank that is stopped or hung. The root tells every other rank which rank it
lost and why, so every survivor names the same culprit; from then on `check()` (which the data path
calls while it waits) and every exchange raise BootstrapError with that reason. A rank that ends
normally says goodbye first, so its closing is not taken for a death.
"""
from __future__ import annotations

import json
import queue
import socket
import struct
import threading
import time

from ..errors import NickSimError

__all__ = ["Bootstrap", "BootstrapError"]

_HEADER = struct.Struct("!Q")
_MAX_MESSAGE_NBYTES = 1 << 30
_RETRY_S = 0.05
_HELLO_S = 2.0
_POLL_S = 0.05  # how often a waiting main thread looks whether a rank was lost
_HEARTBEATS_PER_TIMEOUT = 8  # heartbeats a peer sends within one timeout (at most one each 0.5 s)
_CLOSED = "closed its connection (the process ended or was killed)"


class BootstrapError(NickSimError):
    """The ranks could not be joined, or lost one another."""

    kind = "bootstrap"

    def __init__(self, what: str, where: str = "bootstrap", silent: bool = False):
        super().__init__(what, where)
        self.silent = silent  # a peer fell silent (hung) rather than closed its connection (ended)


class _Garbled(Exception):
    """What arrived is not a bootstrap message (a stray client, or a peer speaking another protocol)."""


def _send(sock: socket.socket, value, timeout_s: float) -> None:
    data = json.dumps(value, separators=(",", ":")).encode()
    sock.settimeout(timeout_s)  # a receive may have left a short one behind
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, nbytes: int, deadline: float) -> bytes | None:
    """`nbytes` bytes, or None where the peer closed the connection first."""
    chunks, left = [], nbytes
    while left:
        sock.settimeout(max(0.0, deadline - time.monotonic()) or 1e-3)
        try:
            chunk = sock.recv(min(left, 1 << 20))
        except (ConnectionResetError, BrokenPipeError):
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _recv(sock: socket.socket, deadline: float):
    """The next message; None where the peer closed; socket.timeout past the deadline; _Garbled
    where what arrived is not a bootstrap message."""
    header = _recv_exact(sock, _HEADER.size, deadline)
    if header is None:
        return None
    (nbytes,) = _HEADER.unpack(header)
    if nbytes > _MAX_MESSAGE_NBYTES:
        raise _Garbled(f"a {nbytes}-byte message, more than a bootstrap ever sends")
    data = _recv_exact(sock, nbytes, deadline)
    if data is None:
        return None
    try:
        message = json.loads(data)
    except ValueError:
        raise _Garbled("a message that is not JSON") from None
    if not isinstance(message, dict):
        raise _Garbled("a message that is not a JSON object")
    return message


class Bootstrap:
    """One rank's place in the joined job: `rank` of `size`, its connection to the root (other
    ranks) or to every other rank (the root), and once joined, the threads that keep those
    connections alive and say which rank was lost (`lost`, None while none is)."""

    def __init__(self, rank: int, size: int, timeout_s: float, root_sock: socket.socket | None,
                 peers: dict[int, socket.socket]):
        self.rank, self.size, self.timeout_s = rank, size, timeout_s
        self._root = root_sock
        self._peers = peers
        self._links: dict[int, _Link] = {}
        self._lost: tuple[str, bool] | None = None
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def lost(self) -> str | None:
        """Why this rank must stop (a rank ended, fell silent, or failed): None while nothing is lost."""
        return None if self._lost is None else self._lost[0]

    # --- joining --------------------------------------------------------------------------

    @classmethod
    def join(cls, rank: int, size: int, root: tuple[str, int], timeout_s: float, job: str = "") -> "Bootstrap":
        """Join `size` ranks of job `job` at `root`; rank 0 listens there, every other rank
        connects. An empty `job` is a job that does not know its identity (it joins any root)."""
        if not 0 <= rank < size:
            raise BootstrapError(f"rank {rank} of {size}", "bootstrap")
        deadline = time.monotonic() + timeout_s
        if rank == 0:
            boot = cls._serve(size, root, timeout_s, deadline, job)
        else:
            boot = cls._connect(rank, size, root, timeout_s, deadline, job)
        boot._watch()
        return boot

    @classmethod
    def _serve(cls, size: int, root: tuple[str, int], timeout_s: float, deadline: float,
               job: str) -> "Bootstrap":
        try:
            listener = socket.create_server(root, family=_family(root[0]), reuse_port=False)
        except OSError as err:
            raise BootstrapError(f"rank 0 cannot listen on {_text(root)}: {err.strerror or err}") from None
        peers: dict[int, socket.socket] = {}
        try:
            while len(peers) < size - 1:
                listener.settimeout(max(1e-3, deadline - time.monotonic()))
                try:
                    sock, _ = listener.accept()
                except socket.timeout:
                    missing = sorted(set(range(1, size)) - set(peers))
                    raise BootstrapError(f"ranks {_ranks(missing)} never reached the root at {_text(root)} within "
                                         f"{timeout_s:g} s") from None
                cls._welcome(sock, size, peers, deadline, job, root)
        except BootstrapError as err:
            cls(0, size, timeout_s, None, peers)._fail(err.what)
        finally:
            listener.close()
        boot = cls(0, size, timeout_s, None, peers)
        boot._broadcast({"ready": size})
        return boot

    @staticmethod
    def _welcome(sock: socket.socket, size: int, peers: dict[int, socket.socket], deadline: float, job: str,
                 root: tuple[str, int]) -> None:
        try:  # a rank says hello as soon as it connects; a silent connection is not given the whole join
            hello = _recv(sock, min(deadline, time.monotonic() + _HELLO_S))
        except (socket.timeout, _Garbled, OSError):
            sock.close()
            return  # a connection that says nothing, or nothing we speak, is not one of ours
        if set(hello or ()) != {"rank", "size", "job"}:
            sock.close()
            return
        rank, their_size, their_job = hello["rank"], hello["size"], hello["job"]
        if job and their_job and their_job != job:  # a rank of another job that was given our address
            try:
                _send(sock, {"stranger": f"the root at {_text(root)} belongs to another job ({job}, this rank's is "
                                         f"{their_job}): two jobs were given the same NICKSIM_COMM_ID"}, _HELLO_S)
            except OSError:
                pass
            sock.close()
            return
        problem = None
        if their_size != size:
            problem = f"rank {rank} was started for {their_size} ranks, rank 0 for {size}"
        elif not (isinstance(rank, int) and 0 < rank < size):
            problem = f"a rank {rank} joined a job of {size} ranks"
        elif rank in peers:
            problem = f"two processes joined as rank {rank}"
        if problem:
            try:
                _send(sock, {"abort": problem}, _HELLO_S)
            except OSError:
                pass  # it will learn when the connection closes
            sock.close()
            raise BootstrapError(problem)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peers[rank] = sock

    @classmethod
    def _connect(cls, rank: int, size: int, root: tuple[str, int], timeout_s: float,
                 deadline: float, job: str) -> "Bootstrap":
        last = None
        while True:
            try:
                sock = socket.create_connection(root, timeout=max(1e-3, deadline - time.monotonic()))
                break
            except OSError as err:
                last = err
                if time.monotonic() + _RETRY_S >= deadline:
                    raise BootstrapError(f"rank {rank} could not reach the root at {_text(root)} within "
                                         f"{timeout_s:g} s ({last.strerror or last})") from None
                time.sleep(_RETRY_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        boot = cls(rank, size, timeout_s, sock, {})
        try:
            _send(sock, {"rank": rank, "size": size, "job": job}, timeout_s)
            answer = _recv(sock, deadline)
        except (socket.timeout, _Garbled, OSError):
            answer = None
        if answer is None or "ready" not in answer:
            sock.close()
        if answer is None:
            raise BootstrapError(f"rank {rank} was not joined by the root at {_text(root)} within {timeout_s:g} s "
                                 "(the root ended or stopped, or is not a nicksim rank 0)")
        if "stranger" in answer:
            raise BootstrapError(f"rank {rank} was turned away: {answer['stranger']}")
        if "abort" in answer:
            raise BootstrapError(f"rank {rank} stopped: {answer['abort']}")
        return boot

    # --- exchanging ------------------------------------------------------------------------

    def allgather(self, item) -> list:
        """Every rank's `item`, in rank order, on every rank."""
        if self.rank != 0:
            self._send_to(0, {"item": item})
            return self._next(0, "exchanging with every rank")["items"]
        items = [item]
        for peer in range(1, self.size):
            items.append(self._next(peer, "exchanging with every rank")["item"])
        for peer in range(1, self.size):
            self._send_to(peer, {"items": items})
        return items

    def check(self) -> None:
        """Raise BootstrapError where a rank was lost (what the data path calls while it waits)."""
        if self._lost is not None:
            raise BootstrapError(self._stopped_line(), silent=self._lost[1])

    def wait_lost(self, seconds: float) -> str | None:
        """Wait up to `seconds` for word of a lost rank (after a data-path error, whose culprit the
        bootstrap names for every rank alike); the reason, or None."""
        deadline = time.monotonic() + seconds
        while self._lost is None and time.monotonic() < deadline and self._links:
            time.sleep(_POLL_S)
        return self.lost

    def close(self, farewell: dict | None = None) -> None:
        """Close every connection, first telling the peers `farewell`: {"bye": 1} where this rank
        ended normally, {"abort": why} where it failed (the root passes `why` on to every rank)."""
        self._closing.set()
        for link in list(self._links.values()):
            if farewell is not None and self._lost is None:
                link.send(farewell, self.timeout_s, wait=True)
            link.close()
        for sock in list(self._peers.values()) + ([self._root] if self._root else []):
            sock.close()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=1.0)
        self._peers, self._root, self._links, self._threads = {}, None, {}, []

    def __enter__(self) -> "Bootstrap":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close({"bye": 1})
        elif isinstance(exc, BootstrapError):
            self.close()  # the job's own reason, which every rank already has
        else:
            why = exc.line() if isinstance(exc, NickSimError) else \
                "interrupted" if isinstance(exc, KeyboardInterrupt) else f"failed ({exc_type.__name__})"
            self.close({"abort": why if self.rank else f"rank 0: {why}"})

    # --- staying joined --------------------------------------------------------------------

    def _watch(self) -> None:
        """Start reading every connection and sending heartbeats on it."""
        socks = self._peers if self.rank == 0 else {0: self._root}
        self._links = {peer: _Link(sock) for peer, sock in socks.items()}
        for peer, link in self._links.items():
            self._threads.append(threading.Thread(target=self._read, args=(peer, link), daemon=True,
                                                  name=f"nicksim-bootstrap-read-{peer}"))
        self._threads.append(threading.Thread(target=self._beat, daemon=True, name="nicksim-bootstrap-beat"))
        for thread in self._threads:
            thread.start()

    def _beat(self) -> None:
        every_s = min(0.5, self.timeout_s / _HEARTBEATS_PER_TIMEOUT)
        while not self._closing.wait(every_s):
            for link in list(self._links.values()):
                link.send({"hb": 1}, self.timeout_s, wait=False)

    def _read(self, peer: int, link: _Link) -> None:
        """Everything `peer` sends: heartbeats kept quiet, messages queued for the main thread,
        its end or its silence made the job's reason to stop."""
        while not self._closing.is_set():
            try:
                message = _recv(link.sock, time.monotonic() + self.timeout_s)
            except socket.timeout:
                return self._lose(f"rank {peer} sent nothing for {self.timeout_s:g} s (stopped or hung)", True, peer)
            except _Garbled as err:
                return self._lose(f"rank {peer} sent {err}", False, peer)
            except OSError:
                message = None
            if self._closing.is_set():
                return
            if message is None:
                return None if link.ended else self._lose(f"rank {peer} {_CLOSED}", False, peer)
            if "bye" in message:
                link.ended = True
            elif "abort" in message:  # from the root: the job's reason; from a rank: its own failure
                return self._lose(message["abort"] if self.rank else f"rank {peer}: {message['abort']}", False, peer)
            elif "hb" not in message:
                link.inbox.put(message)

    def _lose(self, what: str, silent: bool, peer: int) -> None:
        """The job lost a rank: on the root, tell every other rank why, then remember it (the first
        reason wins). Remembered only once told: the main thread ends the process as soon as it
        sees the reason, and a rank that saw the root close first would blame the root."""
        with self._lock:
            if self._lost is not None:
                return
            if self.rank == 0:
                for other, link in list(self._links.items()):
                    if other != peer:  # the others are alive and reading: this does not wait long
                        link.send({"abort": what}, self.timeout_s, wait=True)
            self._lost = (what, silent)

    def _stopped_line(self) -> str:
        what = self._lost[0]
        return what if self.rank == 0 else f"rank {self.rank} stopped: {what}"

    def _next(self, peer: int, doing: str) -> dict:
        """The next message from `peer` (the root, or on the root a rank), unless a rank is lost
        first; a peer whose heartbeats go on but whose message does not come is given twice the
        timeout (a rank alive but stuck: its own data-path timeout will say where)."""
        link = self._links[peer]
        deadline = time.monotonic() + 2 * self.timeout_s + 1
        while True:
            try:  # a message that came before word of a lost rank is still this rank's to act on
                return link.inbox.get_nowait()
            except queue.Empty:
                pass
            self.check()
            try:
                return link.inbox.get(timeout=_POLL_S)
            except queue.Empty:
                if time.monotonic() > deadline:
                    what = f"rank {peer} sent no message for {2 * self.timeout_s + 1:g} s while {doing}"
                    self._lose(what, True, -1)
                    self.check()

    def _send_to(self, peer: int, message: dict) -> None:
        self.check()
        if not self._links[peer].send(message, self.timeout_s, wait=True):
            self._lose(f"rank {peer} {_CLOSED}", False, peer)
            self.check()

    # --- the root's side during the join --------------------------------------------------

    def _broadcast(self, message: dict) -> None:
        for peer, sock in self._peers.items():
            try:
                _send(sock, message, self.timeout_s)
            except OSError:
                if "abort" not in message:
                    self._fail(f"rank {peer} {_CLOSED}")

    def _fail(self, what: str, silent: bool = False):
        self._broadcast({"abort": what})
        self.close()
        raise BootstrapError(what, silent=silent)


class _Link:
    """One connection after the join: a socket the reading thread owns, a duplicate that senders
    share under a lock (each with its own timeout), and the messages read but not yet taken."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._out = sock.dup()
        self._lock = threading.Lock()
        self.inbox: queue.Queue = queue.Queue()
        self.ended = False  # the peer said goodbye

    def send(self, message: dict, timeout_s: float, wait: bool) -> bool:
        """Send `message`; False where the connection is gone. Without `wait`, a message that
        would queue behind another sender's is skipped (a heartbeat)."""
        if not self._lock.acquire(blocking=wait):
            return True
        try:
            _send(self._out, message, timeout_s)
            return True
        except OSError:
            return False
        finally:
            self._lock.release()

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the reading thread
        except OSError:
            pass
        self._out.close()
        self.sock.close()


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _text(address: tuple[str, int]) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _ranks(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks[:8]) + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
