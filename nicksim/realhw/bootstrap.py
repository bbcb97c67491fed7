"""The ranks of a real-backend job joined over TCP, through a root that rank 0 runs.

`Bootstrap.join(rank, size, root, timeout_s)` connects a rank to the root at `root` (rank 0 listens
there; the others retry until it does, as NCCL's bootstrap does). Once every rank has said hello
with its rank and size, `allgather(item)` gives each rank every rank's item, in rank order: the
hosts, devices and addresses they exchange, a digest of the plan each built. Items are JSON values.

Nothing waits forever. A root that cannot be reached, a rank that never arrives, a peer that dies
or falls silent longer than `timeout_s`: each raises BootstrapError naming the rank and what it was
doing; the root tells the ranks still connected which rank failed before it gives up, so they fail
with the same reason instead of waiting out their own timeout.
"""
from __future__ import annotations

import json
import socket
import struct
import time

from ..errors import NickSimError

__all__ = ["Bootstrap", "BootstrapError"]

_HEADER = struct.Struct("!Q")
_MAX_MESSAGE_NBYTES = 1 << 30
_RETRY_S = 0.05
_HELLO_S = 2.0


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
    ranks) or to every other rank (the root)."""

    def __init__(self, rank: int, size: int, timeout_s: float, root_sock: socket.socket | None,
                 peers: dict[int, socket.socket]):
        self.rank, self.size, self.timeout_s = rank, size, timeout_s
        self._root = root_sock
        self._peers = peers

    # --- joining --------------------------------------------------------------------------

    @classmethod
    def join(cls, rank: int, size: int, root: tuple[str, int], timeout_s: float) -> "Bootstrap":
        """Join `size` ranks at `root`; rank 0 listens there, every other rank connects."""
        if not 0 <= rank < size:
            raise BootstrapError(f"rank {rank} of {size}", "bootstrap")
        deadline = time.monotonic() + timeout_s
        if rank == 0:
            return cls._serve(size, root, timeout_s, deadline)
        return cls._connect(rank, size, root, timeout_s, deadline)

    @classmethod
    def _serve(cls, size: int, root: tuple[str, int], timeout_s: float, deadline: float) -> "Bootstrap":
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
                cls._welcome(sock, size, peers, deadline)
        except BootstrapError as err:
            cls(0, size, timeout_s, None, peers)._fail(err.what)
        finally:
            listener.close()
        boot = cls(0, size, timeout_s, None, peers)
        boot._broadcast({"ready": size})
        return boot

    @staticmethod
    def _welcome(sock: socket.socket, size: int, peers: dict[int, socket.socket], deadline: float) -> None:
        try:  # a rank says hello as soon as it connects; a silent connection is not given the whole join
            hello = _recv(sock, min(deadline, time.monotonic() + _HELLO_S))
        except (socket.timeout, _Garbled):
            sock.close()
            return  # a connection that says nothing, or nothing we speak, is not one of ours
        if set(hello or ()) != {"rank", "size"}:
            sock.close()
            return
        rank, their_size = hello["rank"], hello["size"]
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
                 deadline: float) -> "Bootstrap":
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
        _send(sock, {"rank": rank, "size": size}, timeout_s)
        boot._from_root("waiting for every rank to join")
        return boot

    # --- exchanging ------------------------------------------------------------------------

    def allgather(self, item) -> list:
        """Every rank's `item`, in rank order, on every rank."""
        if self.rank != 0:
            self._send_root({"item": item})
            return self._from_root("exchanging with every rank")["items"]
        items = [item]
        deadline = time.monotonic() + self.timeout_s
        for peer in range(1, self.size):
            message = self._from_peer(peer, deadline)
            items.append(message["item"])
        self._broadcast({"items": items})
        return items

    def close(self) -> None:
        for sock in list(self._peers.values()) + ([self._root] if self._root else []):
            sock.close()
        self._peers, self._root = {}, None

    def __enter__(self) -> "Bootstrap":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- the root's side ------------------------------------------------------------------

    def _from_peer(self, peer: int, deadline: float) -> dict:
        try:
            message = _recv(self._peers[peer], deadline)
        except socket.timeout:
            self._fail(f"rank {peer} sent nothing for {self.timeout_s:g} s", silent=True)
        except _Garbled as err:
            self._fail(f"rank {peer} sent {err}")
        if message is None:
            self._fail(f"rank {peer} closed its connection (the process ended or was killed)")
        if "abort" in message:
            self._fail(f"rank {peer}: {message['abort']}")
        return message

    def _broadcast(self, message: dict) -> None:
        for peer, sock in self._peers.items():
            try:
                _send(sock, message, self.timeout_s)
            except OSError:
                if "abort" not in message:
                    self._fail(f"rank {peer} closed its connection (the process ended or was killed)")

    def _fail(self, what: str, silent: bool = False):
        self._broadcast({"abort": what})
        self.close()
        raise BootstrapError(what, silent=silent)

    # --- the other ranks' side --------------------------------------------------------------

    def _send_root(self, message: dict) -> None:
        try:
            _send(self._root, message, self.timeout_s)
        except OSError:
            self.close()
            raise BootstrapError(f"rank {self.rank} lost the root (rank 0 ended or was killed)") from None

    def _from_root(self, doing: str) -> dict:
        try:
            message = _recv(self._root, time.monotonic() + self.timeout_s)
        except _Garbled as err:
            self.close()
            raise BootstrapError(f"rank {self.rank} got {err} from the root while {doing}") from None
        except socket.timeout:
            self.close()
            raise BootstrapError(f"rank {self.rank} heard nothing from the root for {self.timeout_s:g} s "
                                 f"while {doing}", silent=True) from None
        if message is None:
            self.close()
            raise BootstrapError(f"rank {self.rank} lost the root (rank 0 ended or was killed) while {doing}")
        if "abort" in message:
            self.close()
            raise BootstrapError(f"rank {self.rank} stopped: {message['abort']}")
        return message


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _text(address: tuple[str, int]) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _ranks(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks[:8]) + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
