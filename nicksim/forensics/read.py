"""Reading the files people have after a hang: logs, RAS output and Flight Recorder dumps.

`read_evidence(paths)` streams each file a line at a time (a line is cut at 8 KiB and the rest of
it skipped, bytes that are not UTF-8 replaced, so binary garbage and 200 MB logs read in bounded
memory) and keeps what bears on a diagnosis, whatever launcher prefix a line carries ("[rank3]:",
Open MPI's "[1,3]<stderr>:", a pid in brackets): PyTorch's watchdog timeouts (rank, process
group, SeqNum, OpType, NumelIn, NumelOut, Timeout) and its "last enqueued / last completed NCCL
work" lines, NCCL's WARN lines and the INFO lines of init and errors, the NCCL_* settings a log
shows, nccl-tests' verdict on the data ("Out of bounds values", #wrong), NCCL's RAS status (text
or JSON: operation counts per group of ranks, missing and dead ranks) and PyTorch's Flight
Recorder dumps (its pickle, read as plain data only, or the JSON form). Files may come
from all ranks or some, in any order; a file of several excerpts in markdown code blocks is read
as separate incidents, and the ranks' watchdog state is taken from the first that has any.
"""
from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Iterable, Iterator

from ..errors import UsageError
from ..files import open_input
from ..formats.logs import VERSION_LINE, parse_call, parse_line
from ..formats.report import DEVICE_LINE
from .evidence import Event, Evidence
from .flight_recorder import rank_in_name, read_flight_recorder

__all__ = ["read_evidence"]

_MAX_LINE = 8192
_KEEP_PER_KIND = 64  # evidence lines kept of each kind; the counts go on

# PyTorch's WorkNCCL, with NumelIn/NumelOut from 2.1 (1.x and 2.0 print none).
# Before 1.10 the SeqNum is not printed either ("WorkNCCL(OpType=BROADCAST, Timeout(ms)=1800000)").
_WATCHDOG = re.compile(r"WorkNCCL\((?:SeqNum=(\d+), )?OpType=(\w+)(?:, NumelIn=(-?\d+), NumelOut=(-?\d+))?, "
                       r"Timeout\(ms\)=(\d+)\)(?: ran for (\d+) milliseconds)?")
# The watchdog's progress line, as successive PyTorch releases word it: "... detected by watchdog at
# work: N, last enqueued NCCL work: E, last completed NCCL work: C" (2.2-2.3), "failure detected by
# watchdog at work sequence id: N PG status: last enqueued work: E, last completed work: C" (2.4+),
# and the desync report's "PG status: last enqueued work: E, last started work: S (OP), last
# completed work: C".
_WORK = re.compile(r"(?:at work|at NCCL work|at work sequence id):? (-?\d+),?(?: PG status:)? "
                   r"last enqueued?(?: NCCL)?(?: work)?: (-?\d+),(?: last started(?: NCCL)?(?: work)?: (-?\d+)[^,]*,)? "
                   r"last completed(?: NCCL)?(?: work)?: (-?\d+)")
# What the other ranks of a group print when one of them timed out (ProcessGroupNCCL's
# getNCCLWatchdogTimeoutErrorMsg, 2.3+): their own last enqueued and completed work.
_DUMP_SIGNAL = re.compile(r"Received a dump signal due to a collective timeout from\s+(?:this local rank|rank\s+(\d+))"
                          r".*?Last enqueued \w+ work: (-?\d+), last completed \w+ work: (-?\d+)")
_PG_RANK = re.compile(r"\[PG (.*?) ?Rank (\d+)\]")
_RANK_TAG = re.compile(r"\[Rank (\d+)\]|\[rank(\d+)\]:|\[\d+,(\d+)\]<std(?:out|err)>:")
_COMM = re.compile(r"comm (0x[0-9a-fA-F]+) rank (\d+) nranks (\d+)")
# param.cc ends an integer's line with a period ("... set by environment to 8388608."), not part of it
_SETTING = re.compile(r"\b(NCCL_[A-Z0-9_]+)(?: set by environment to |=)([^\s,;'\"()]+?)\.?(?=[\s,;'\"()]|$)")
_SET_BY_ENV = " set by environment to "
# NCCL's RAS status (ncclras, 2.24+: docs/userguide troubleshooting/ras.rst)
_RAS_GROUP = re.compile(r"^\s*(\d+) ranks? ha(?:ve|s) launched up to operation (\d+)")
_RAS_MEMBER = re.compile(r"^\s*Rank (\d+) -- GPU (\d+) managed by process (\d+) on node (\S+)")
_RAS_MISSING = re.compile(r"The missing ranks?: ([\d, ]+)")
# TORCH_DISTRIBUTED_DEBUG=DETAIL's check before each collective (ProcessGroupWrapper): "Detected
# mismatch between collectives on ranks. Rank 0 is running collective: CollectiveFingerPrint(...),
# but Rank 1 is running collective: CollectiveFingerPrint(...)".
# (2.2+ words it "is running inconsistent collective")
_FINGERPRINT = re.compile(r"Rank (\d+) is running (?:inconsistent )?collective: CollectiveFingerPrint\("
                          r"(?:SequenceNumber=(\d+), )?OpType=(\w+)")
# PyTorch's desync report (TORCH_NCCL_DESYNC_DEBUG=1; TraceUtils.h retrieveDesyncReport): "[47] joined but
# didn't finish collective #41207", "[0, 1, ...] finished collective #41207, but didn't join collective #41208",
# "ranks [47] are the lagging ranks that caused this timeout. They never joined any collectives".
_DESYNC_JOINED = re.compile(r"\[([\d, ]+)\] joined but didn't finish collective #(\d+)")
_DESYNC_FINISHED = re.compile(r"\[([\d, ]+)\] finished collective #(\d+), but didn't join collective #(\d+)")
_DESYNC_NEVER = re.compile(r"ranks \[([\d, ]+)\] are the lagging ranks that caused this timeout")
# The bootstrap's interface: "Bootstrap : Using eth0:10.0.0.1<0>" ("[0]eth0" before 2.8), or NET/IB's
# "; OOB ibp75s0:..."
_BOOTSTRAP_IFACE = re.compile(r"(?:Bootstrap ?: Using (?:\[\d+\])?|; OOB )([^\s:\[\]]+):([0-9a-fA-F.:%\w]*?)<")
# nccl-tests' device list: "#  Rank  0 Group  0 Pid  1234 on host device  0 [0x01] NVIDIA A100"
_OUT_OF_BOUNDS = re.compile(r"Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)")
# What a line says went wrong, most specific first; a line is of the first kind it matches. Each kind
# has the plain words one of its patterns needs (checked first: most lines have none) and whether it
# counts only on a warning (or an error's "-> N" trace).
_KINDS = (
    # NCCL refusing a call: its argument checks (enqueue.cc: "invalid root 0 (root should be in the 0..0
    # range)", invalid type or op), a communicator used after ncclCommDestroy, two ranks on one GPU
    ("usage", False, ("Duplicate GPU", "nvalidUsage", "nvalid usage", "nvalidArgument", "invalid root",
                      "invalid type", "invalid redop", "already been destroyed"),
     re.compile(r"Duplicate GPU detected|ncclInvalidUsage|invalid usage|ncclInvalidArgument|invalid root -?\d+|"
                r"invalid (?:type|redop) -?\d+|has already been destroyed", re.I)),
    # socket.cc: a connection's first message carries its type; another type means the peer runs
    # another transport over it (one node on IB, the other on sockets)
    ("transport", False, ("wrong type",), re.compile(r"wrong type \d+ != \d+")),
    # the framework's allocator ran out of GPU memory: that rank's process stops, and its peers wait for it
    ("died", False, ("OutOfMemoryError", "Tried to allocate"),
     re.compile(r"OutOfMemoryError|CUDA out of memory\. Tried to allocate")),
    ("resource", False, ("emory", "EMORY", "space left", "open files", "fallocate", "shm", "Bus error", "MEMLOCK",
                         "ibv_reg"),
     re.compile(r"out of memory|cudaErrorMemoryAllocation|No space left on device|Cannot allocate memory|"
                r"Too many open files|shared memory segment|posix_fallocate|/dev/shm|insufficient shared memory|"
                r"\bBus error\b|RLIMIT_MEMLOCK|ibv_reg_mr\w* failed", re.I)),
    # no peer-to-peer path over PCIe: CUDA refusing peer access between GPUs, or a NIC's RDMA into GPU
    # memory failing with a local protection error (IB completion error 4: ACS redirecting GPUDirect
    # RDMA, or an IOMMU dropping it)
    ("p2p", False, ("peer access", "PeerAccess", "P2P is not", "error 4", "status=4"),
     re.compile(r"peer access is not supported|cudaErrorPeerAccessUnsupported|P2P is not supported between|"
                r"completion (?:from peer \S+ )?with (?:error|status=?) ?4\b", re.I)),
    ("fabric", False, ("status=12", "error 12", "etry", "RETRY", "ibv_poll_cq", "ibv_modify_qp", "atastrophic",
                       "IBV_EVENT", "NET/IB", "NVLink", "Xid", "DOWN"),
     re.compile(r"status=12|error 12\b|retry exceeded|RETRY_EXC|transport retry counter|ibv_poll_cq|local catastrophic|"
                r"ibv_modify_qp failed|IBV_EVENT_\w*(?:ERR|FATAL)|NET/IB.*(?:error|Error)|NVLink.*(?:error|down)|"
                r"Xid.{0,20}\b(?:74|79)\b|"
                r"port.*DOWN", re.I)),
    # what a rank sees when its peer's process is gone (or, more rarely, the network dropped it)
    ("peer_lost", False, ("remote process", "losed by", "eset by peer", "RemoteError", "Broken pipe"),
     re.compile(r"remote process exited|Connection closed by (?:remote )?peer|Connection reset by peer|ncclRemoteError|"
                r"Broken pipe", re.I)),
    # a process that dies: a signal, the OOM killer, or a CUDA error that leaves its context unusable
    # (an illegal memory access or a failed launch is sticky: the process must exit)
    ("died", False, ("Segmentation", "SIG", "Signal 9", "xitcode", "Killed", "core dumped", "Fatal Python",
                     "illegal memory access", "unspecified launch failure"),
     re.compile(r"Segmentation fault|SIGSEGV|SIGKILL|SIGBUS|Signal 9\b|exitcode\s*:\s*-9\b|\bKilled\b|core dumped|"
                r"Fatal Python error|CUDA error: an illegal memory access|unspecified launch failure")),
    # NCCL found no interface to use (NCCL_SOCKET_IFNAME matching none, or none with an address)
    ("interface", False, ("AF_INET", "socket interface", "listening interface", "Address family"),
     re.compile(r"neither AF_INET|no socket interface found|No usable listening interface|"
                r"Socket creation failed : Address family not supported", re.I)),
    # the host name resolved to loopback, so the others are told to connect to 127.0.0.1 (Gloo says so; NCCL too)
    ("loopback", False, ("loopback", "127.0.0.1"), re.compile(r"loopback address as fallback|remote=\[127\.0\.0\.1\]")),
    # a rank waited for the one that creates the communicator to publish its id (c10d's store timed out)
    ("uid_wait", False, ("ncclUniqueId",),
     re.compile(r"retrieving ncclUniqueId from \[(\d+)\].*(?:Timeout|timed out)")),
    ("config", True, ("ompatible", "NVLS", "MIG", "ismatch", "NCCL version"),
     re.compile(r"not compatible|NVLS.*(?:not supported|fail)|\bMIG\b|version mismatch|different NCCL version", re.I)),
    # NCCL's kernels need more shared memory than the GPU offers: a release that predates the GPU
    ("unsupported", False, ("maxSharedMem", "kernel image"),
     re.compile(r"exceeds device/fn maxSharedMem|no kernel image is available")),
    ("bootstrap", True, ("ootstrap", "OOTSTRAP", "onnect", "efused", "imed out", "route to host", "socket interface",
                         "PollConnect", "listening interface"),
     re.compile(r"bootstrap|Call to connect|Connection timed out|Connection refused|No route to host|"
                r"no socket interface found|No usable listening interface|socketStartConnect|socketPollConnect|"
                r"Connect to .* failed", re.I)),
)
_RETRYING = re.compile(r"-> \d+|retrying", re.I)
# The interfaces NCCL lists: "NET/Socket : Using [0]eth0:10.0.0.1<0> [1]docker0:...", "Bootstrap : Using eth0:..."
_SOCKET_IFACES = re.compile(r"NET/Socket ?: Using ((?:\[\d+\]\S+ ?)+)")
_IFACE_ITEM = re.compile(r"\[\d+\]([^:\s]+):([0-9a-fA-F.:%\w]*?)<")
# Which network each process runs (net.cc: "Using network IB", "Using network Socket", a plugin's name)
_NETWORK = re.compile(r"Using network (\S+)|NET/(IB|Socket) ?: Using \[")


_BLOCK = 1 << 20
# COLL lines kept unparsed (one per head as written: a process's, unless a launcher stamps each line)
_RAW_CALLS_KEPT = 8192
# Lines worth a closer look: one of these words, or a word one of _KINDS needs (so no kind can name a
# word this gate never lets through). The rest of a 200 MB NCCL_DEBUG=INFO log is never decoded.
_WORDS = (
    b"WorkNCCL", b"Watchdog", b"PG status", b"NCCL work", b"Received a dump signal", b"WARN", b"Init COMPLETE",
    b"Init START", b"NCCL version", b"NCCL_", b"Error", b"ERROR", b"NCCL error", b"Connection", b"Call to connect",
    b"Connect to", b"Out of bounds", b"CollectiveFingerPrint", b"mismatch between", b"```", b"Bootstrap",
    b"NET/Socket", b"Using network", b"OOB ", b"Rank ", b"Avg bus bandwidth", b"Cuda failure", b"launched up to",
    b"managed by process", b"missing rank", b"considered dead", b"collective #", b"lagging ranks")


def _any_of(words: list[bytes]) -> bytes:
    """A pattern for any of `words`, as a trie (alternatives grouped by their next byte): the regex
    engine then tries one branch per byte at each position, not every word, which is what makes
    a gate of a hundred words affordable on every line."""
    if b"" in words:
        rest = [w for w in words if w]
        return b"(?:" + _any_of(rest) + b")?" if rest else b""
    by_first: dict[bytes, list[bytes]] = {}
    for word in words:
        by_first.setdefault(word[:1], []).append(word[1:])
    branches = [re.escape(first) + _any_of(tails) for first, tails in sorted(by_first.items())]
    return branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"


_INTERESTING = re.compile(_any_of(list(dict.fromkeys(
    _WORDS + tuple(word.encode() for _, _, words, _ in _KINDS for word in words)))))
# The INFO lines NCCL prints by the thousand while setting up (channels, rings, trees, connections):
# none of them bears on a diagnosis, and telling them apart first spares the longer pattern.
_ROUTINE = re.compile(rb"NCCL INFO (?:Channel \d+(?:/\d+)? : \d|Connected all|Trees |Ring \d|threadThresholds|"
                      rb"\d+ coll channels|P2P Chunksize|NVLS comm)")
# CUDA's p2pBandwidthLatencyTest: a matrix of GPU-to-GPU latencies in us, after this header
_P2P_LATENCY = b"P2P=Enabled Latency"


def _lines(stream, on_block) -> Iterator[tuple[int, str | None]]:
    """The stream's lines in blocks of whole lines, each cut at _MAX_LINE bytes (the rest of a
    longer line is dropped, also one that spans blocks): `on_block(buf, base)` yields the (line
    number, text) it keeps of each block, numbered from base + 1. Memory stays bounded whatever the
    file. The last item is (the number of lines, None)."""
    base, carry, cut = 0, b"", False
    while True:
        block = stream.read(_BLOCK)
        if not block:
            if carry:
                yield from on_block(carry + b"\n", base)
                base += 1
            yield base, None
            return
        last = block.rfind(b"\n")
        if last < 0:
            if not cut:
                carry += block
                if len(carry) > _MAX_LINE:
                    carry, cut = carry[:_MAX_LINE], True
            continue
        rest = block.find(b"\n") if cut else 0  # a cut line's remainder is dropped
        buf = carry + (b"\n" if cut else b"") + block[rest + 1 if cut else 0:last + 1]
        yield from on_block(buf, base)
        base += buf.count(b"\n")
        carry, cut = block[last + 1:], False
        if len(carry) > _MAX_LINE:
            carry, cut = carry[:_MAX_LINE], True


def _pg(text) -> str | None:
    """A process group as "ID (description)", whichever way PyTorch wrote it ("0 (default_pg)",
    "ID 5 PG GUID 37(TENSOR_MODEL_PARALLEL_GROUP)", a Flight Recorder's ["0", "default_pg"]). The ID
    is the group's name, the same on every member (PyTorch 2.4+ prints it as the GUID; the "PG ID"
    before it counts the groups one process made, so two groups can share it)."""
    if text is None:
        return None
    text = " ".join(str(t) for t in text) if isinstance(text, (list, tuple)) else str(text)
    guid = re.search(r"GUID\s*(\S+?)\s*(?:\(|$)", text)
    number = guid or re.search(r"\d+", text)
    if number is None:
        return text
    ident = number.group(1) if guid else number.group()
    desc = re.search(r"\(([^)]*)\)", text) or (None if guid else re.match(r"\s*\d+\s+(\S+)\s*$", text))
    return f"{ident} ({desc.group(1)})" if desc else ident


def _op_name(profiling_name) -> str:
    """The watchdog's OpType for a Flight Recorder profiling name ("nccl:all_reduce" -> ALLREDUCE)."""
    name = str(profiling_name or "?").split(":")[-1].upper()
    return name.replace("ALL_REDUCE", "ALLREDUCE").replace("ALL_GATHER", "ALLGATHER")


def _numel(sizes) -> int | None:
    """Elements of the first tensor of a Flight Recorder size list ([[3, 4]] -> 12)."""
    if not isinstance(sizes, list) or not sizes or not isinstance(sizes[0], list):
        return None
    total = 1
    for dim in sizes[0]:
        count = _whole(dim)
        if count is None:
            return None
        total *= count
    return total


def _whole(value) -> int | None:
    """A count or sequence number as a dump holds it (an int, or in PyTorch's JSON form a string of
    digits); None for anything else, so a damaged field is missing rather than wrong."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _table(value) -> dict:
    return value if isinstance(value, dict) else {}


def _items(value) -> list:
    return value if isinstance(value, list) else []


def _rank_of(text: str) -> int | None:
    match = _RANK_TAG.search(text)
    if match:
        return int(next(g for g in match.groups() if g is not None))
    return None


# Every kind's words in one pattern: a line with none of them is none of the kinds.
_NEEDLES = re.compile("|".join(re.escape(word) for _, _, words, _ in _KINDS for word in words))
_WARN_WORD = re.compile(r"\bWARN\b")


def _kind_of(text: str, nccl: bool) -> str | None:
    """The first of _KINDS the line is (see there), "warn" for another NCCL warning, else None."""
    warn = ("WARN" in text and _WARN_WORD.search(text) is not None) or "NCCL error" in text or "Error" in text
    if _NEEDLES.search(text) is None:
        return "warn" if warn and nccl else None
    for kind, needs_warning, needles, pattern in _KINDS:
        if not any(word in text for word in needles) or not pattern.search(text):
            continue
        if warn or not needs_warning or (kind == "bootstrap" and _RETRYING.search(text)):
            return kind
    return "warn" if warn and nccl else None


class _Collector:
    def __init__(self):
        self.events: dict[str, list[Event]] = {}
        self.counts: dict[str, int] = {}
        self.timeouts: dict[int, Event] = {}
        self.work: dict[int, Event] = {}
        self.settings: dict[str, dict[str, str]] = {}
        self.versions: dict[str, str] = {}
        self.nranks: set[int] = set()
        self.pid_rank: dict[tuple[str, str], int] = {}
        self.init_complete = 0
        self.lines = 0
        self.ifaces: dict[object, tuple[str, str]] = {}  # rank (else process) -> bootstrap interface, address
        self.socket_ifaces: dict[object, tuple] = {}  # rank (else process) -> NET/Socket's (interface, address)s
        self.networks: dict[str, str] = {}  # process -> the network NCCL runs (IB, Socket, a plugin's)
        self.test_devices: set[tuple] = set()  # nccl-tests' (rank, host, device, GPU name)
        self.test_results = 0  # nccl-tests' "Avg bus bandwidth" lines: runs that finished
        self.hosts: set[str] = set()  # the hosts NCCL's lines come from
        self.members: dict[str, tuple[int, ...]] = {}  # process group -> its ranks (a Flight Recorder's pg_config)
        self.dumped: set[int] = set()  # ranks whose Flight Recorder dump was read
        self.ras_groups: list[list] = []  # [launched up to, count, listed ranks, event]
        self.ras_missing: set[int] = set()
        self.fingerprints: dict[int, tuple[str, int | None]] = {}  # rank -> (OpType, SequenceNumber)
        self.calls: dict[tuple, tuple] = {}  # (host, pid, dev, comm) -> its last COLL line (scan_block)
        self.raw_calls: dict[tuple, tuple] = {}  # (head as written, comm) -> its newest line, not parsed yet
        self.blocks = 0
        self.section = 0  # markdown code blocks: excerpts of separate incidents
        self.timed_section: int | None = None

    def keep(self, event: Event) -> None:
        self.counts[event.kind] = self.counts.get(event.kind, 0) + 1
        kept = self.events.setdefault(event.kind, [])
        if len(kept) < _KEEP_PER_KIND:
            kept.append(event)

    def line(self, name: str, number: int, text: str) -> None:
        if text.startswith("```"):
            self.section += 1
            return
        rank = _rank_of(text)
        nccl = parse_line(text)
        source = name
        if nccl:
            source = f"{nccl.who.host}:{nccl.who.pid}"
            self.hosts.add(nccl.who.host)
            if rank is None:
                rank = self.pid_rank.get((nccl.who.host, nccl.who.pid, nccl.who.dev),
                                         self.pid_rank.get((nccl.who.host, nccl.who.pid)))
        text = text.strip()[:1000]
        if "Avg bus bandwidth" in text:
            self.test_results += 1
            return
        if "Rank" in text and " device " in text:
            device = DEVICE_LINE.search(text)
            if device:
                self.test_devices.add((int(device.group(1)), device.group(2), int(device.group(3)),
                                       device.group(4).strip()))
                return
        if "WorkNCCL" in text and self._watchdog(name, number, text, rank):
            return
        if ("work" in text or "dump signal" in text) and self._work(name, number, text, rank):
            return
        if ("launched up to" in text or "-- GPU" in text or "missing rank" in text or "considered dead" in text) \
                and self._ras_line(name, number, text):
            return
        if ("collective #" in text or "lagging ranks" in text) and self._desync(name, number, text, rank):
            return
        if "CollectiveFingerPrint" in text or "Detected mismatch between collectives" in text:
            prints = _FINGERPRINT.findall(text)
            for who, seq, op in prints:
                self.fingerprints.setdefault(int(who), (op, int(seq) if seq else None))
            self.keep(Event("fingerprint", name, number, text, rank))
            return
        if "Out of bounds" in text:
            oob = _OUT_OF_BOUNDS.search(text)
            if oob:
                self.keep(Event("out_of_bounds", name, number, text, rank,
                                (("count", int(oob.group(1))), ("verdict", oob.group(2)))))
                return
        if "NCCL_" in text:
            for setting in _SETTING.finditer(text):
                # What NCCL says it read is per process; a command line's NAME=VALUE is for every rank.
                if nccl and _SET_BY_ENV in text:
                    self.settings.setdefault(rank if rank is not None else source, {})[setting.group(1)] = \
                        setting.group(2)
                self.keep(Event("setting", name, number, text, rank, ((setting.group(1), setting.group(2)),)))
        if "Using" in text:
            self._interfaces(text, rank if rank is not None else source, source)
        if "NCCL version" in text:
            version = VERSION_LINE.search(text)
            if version:
                self.versions[source] = version.group(1)
        if " nranks " in text:
            comm = _COMM.search(text)
            if comm:
                self.nranks.add(int(comm.group(3)))
                if nccl:
                    self.pid_rank[(nccl.who.host, nccl.who.pid)] = int(comm.group(2))
                    self.pid_rank[(nccl.who.host, nccl.who.pid, nccl.who.dev)] = int(comm.group(2))
                    rank = int(comm.group(2))
        if "Init COMPLETE" in text:
            self.init_complete += 1
        kind = _kind_of(text, bool(nccl))
        if kind == "uid_wait":  # the rank waited for is the one the line names
            self.keep(Event(kind, name, number, text, rank,
                            (("waited_for", int(re.search(r"ncclUniqueId from \[(\d+)\]", text).group(1))),)))
        elif kind:
            self.keep(Event(kind, name, number, text, rank))

    def _watchdog(self, name: str, number: int, text: str, rank: int | None) -> bool:
        """PyTorch's watchdog timeout: the rank's call (SeqNum, OpType, sizes, timeout) and group."""
        watchdog = _WATCHDOG.search(text)
        if not watchdog:
            return False
        seq, op, numel_in, numel_out, timeout_ms, ran_ms = watchdog.groups()
        pg = _PG_RANK.search(text)
        if pg and rank is None:
            rank = int(pg.group(2))
        fields = (("seq", int(seq) if seq else None), ("op", op), ("numel_in", int(numel_in) if numel_in else None),
                  ("numel_out", int(numel_out) if numel_out else None),
                  ("timeout_ms", int(timeout_ms)), ("ran_ms", int(ran_ms) if ran_ms else None),
                  ("pg", _pg(pg.group(1)) if pg else None))
        event = Event("watchdog", name, number, text, rank, fields)
        self.keep(event)
        if self.timed_section is None:
            self.timed_section = self.section
        if rank is not None and self.section == self.timed_section:
            previous = self.timeouts.get(rank)
            # A rank's first timeout is the one it hung in; later lines repeat or follow it.
            if previous is None or (previous.get("pg") is None and event.get("pg") is not None
                                    and previous.get("seq") == event.get("seq")):
                self.timeouts[rank] = event
        return True

    def _work(self, name: str, number: int, text: str, rank: int | None) -> bool:
        """PyTorch's progress line after a timeout (or, on the others, after being told of one):
        the rank's last enqueued and completed work in its group."""
        work = _WORK.search(text)
        signal = None if work else _DUMP_SIGNAL.search(text)
        if not (work or signal):
            return False
        pg = _PG_RANK.search(text)
        if pg and rank is None:
            rank = int(pg.group(2))
        if work:
            seq, enqueued, completed = int(work.group(1)), int(work.group(2)), int(work.group(4))
        else:  # a rank told of another's timeout: where it stands itself, in no call of its own
            seq, enqueued, completed = None, int(signal.group(2)), int(signal.group(3))
        fields = (("seq", seq), ("enqueued", enqueued), ("completed", completed),
                  ("pg", _pg(pg.group(1)) if pg else None))
        event = Event("work", name, number, text, rank, fields)
        self.keep(event)
        if rank is not None and rank not in self.work and self.section == (self.timed_section or 0):
            self.work[rank] = event
        return True

    def _desync(self, name: str, number: int, text: str, rank: int | None) -> bool:
        """A line of PyTorch's desync report: the ranks in a collective they never finished, those that
        finished it but never joined the next, and those that never joined any."""
        for pattern, role in ((_DESYNC_JOINED, "joined"), (_DESYNC_FINISHED, "finished"), (_DESYNC_NEVER, "never")):
            found = pattern.search(text)
            if found:
                ranks = tuple(int(r) for r in re.findall(r"\d+", found.group(1)))
                seq = int(found.group(2)) if role != "never" else None
                self.keep(Event("desync", name, number, text, rank, (("role", role), ("ranks", ranks), ("seq", seq))))
                return True
        return False

    def _interfaces(self, text: str, who, source: str) -> None:
        """The interfaces NCCL lists for its bootstrap and socket transport, and the network it runs."""
        iface = _BOOTSTRAP_IFACE.search(text)
        if iface:
            self.ifaces[who] = (iface.group(1), iface.group(2))
        listed = _SOCKET_IFACES.search(text)
        if listed:
            self.socket_ifaces[who] = tuple(_IFACE_ITEM.findall(listed.group(1)))
        network = _NETWORK.search(text)
        if network:
            self.networks[source] = network.group(1) or network.group(2)

    def scan_block(self, name: str, buf: bytes, base: int) -> Iterator[tuple[int, str]]:
        """A block of whole lines (numbered from base + 1): the lines worth a closer look (those
        _INTERESTING finds, decoded, bytes that are not UTF-8 replaced), and, kept here, what is said
        in lines too many to decode one by one: NCCL's COLL lines (each process's and device's last
        call per communicator) and CUDA's p2pBandwidthLatencyTest matrices."""
        self.blocks += 1
        raw = self.raw_calls
        for index, line in enumerate(buf.split(b"\n")):
            if b": opCount " in line:
                at = line.find(b": opCount ")
                comm = line.find(b" comm 0x", at) + 6
                if comm > 6:
                    raw[(line[:at], line[comm:].split(b" ", 1)[0].rstrip())] = (self.blocks, index, name,
                                                                                base + index + 1, line)
            elif _ROUTINE.search(line) is None and _INTERESTING.search(line):
                yield base + index + 1, line[:_MAX_LINE].decode("utf-8", errors="replace").rstrip("\r")
        if len(raw) > _RAW_CALLS_KEPT:
            self._settle_calls()
        if _P2P_LATENCY in buf:
            self._p2p_matrices(name, buf, base)

    def _p2p_matrices(self, name: str, buf: bytes, base: int) -> None:
        """Each p2pBandwidthLatencyTest latency matrix in the block."""
        at = buf.find(_P2P_LATENCY)
        while at >= 0:
            self._p2p_matrix(name, buf, at, base + buf.count(b"\n", 0, at) + 1)
            at = buf.find(_P2P_LATENCY, at + 1)

    def _p2p_matrix(self, name: str, buf: bytes, at: int, number: int) -> None:
        """The slowest GPU-to-GPU latency of a p2pBandwidthLatencyTest matrix (rows "GPU  lat lat ...")."""
        worst, rows = 0.0, 0
        for line in buf[at:at + 1 << 14].split(b"\n")[2:]:
            cells = line.split()
            if len(cells) < 3 or not cells[0].isdigit():
                break
            row = int(cells[0])
            try:
                values = [float(c) for c in cells[1:]]
            except ValueError:
                break
            worst = max([worst] + [v for col, v in enumerate(values) if col != row])
            rows += 1
        if rows >= 2:
            self.keep(Event("p2p_latency", name, number, f"p2pBandwidthLatencyTest: {rows} GPUs, the slowest pair "
                            f"{worst:g} us", None, (("worst_us", worst), ("gpus", rows))))

    def _settle_calls(self) -> None:
        """Parse the newest COLL line of each head as written (kept raw, so each is parsed once, not
        once a block) into each process's (and device's) last call per communicator."""
        for when, index, name, number, line in self.raw_calls.values():
            text = line[:_MAX_LINE].decode("utf-8", errors="replace").strip()
            nccl = parse_line(text)
            call = parse_call(nccl.text) if nccl else None
            if call is None:
                continue
            key = (nccl.who.host, nccl.who.pid, nccl.who.dev, call["comm"])
            if key in self.calls and self.calls[key][0] > (when, index):
                continue  # the heads of one process differ (its thread, the call's name): the newest wins
            fields = (("op", call["func"]), ("opcount", call["op_count"]), ("count", call["count"]),
                      ("datatype", call["datatype"]), ("root", call["root"]), ("comm", call["comm"]),
                      ("nranks", call["nranks"]), ("source", f"{key[0]}:{key[1]} [{key[2]}]"))
            self.calls[key] = ((when, index), name, number, text[:1000], _rank_of(text), fields)
        self.raw_calls.clear()

    def _last_calls(self) -> tuple[Event, ...]:
        """Each process's last call per communicator, with its rank where the logs tie the process to one."""
        out = []
        self._settle_calls()
        for (host, pid, dev, _), (_, name, number, text, rank, fields) in sorted(self.calls.items()):
            if rank is None:
                rank = self.pid_rank.get((host, pid, dev), self.pid_rank.get((host, pid)))
            out.append(Event("call", name, number, text, rank, fields))
        return tuple(out)

    def _ras_line(self, name: str, number: int, text: str) -> bool:
        """A line of NCCL's RAS status: operation-count groups, their listed ranks, missing ranks."""
        group = _RAS_GROUP.search(text)
        if group:
            event = Event("ras", name, number, text.strip(), None, (("count", int(group.group(1))),
                                                                  ("launched", int(group.group(2)))))
            self.keep(event)
            self.ras_groups.append([int(group.group(2)), int(group.group(1)), [], event])
            return True
        member = _RAS_MEMBER.search(text)
        if member and self.ras_groups:
            self.ras_groups[-1][2].append(int(member.group(1)))
            return True
        missing = _RAS_MISSING.search(text)
        if missing:
            ranks = {int(r) for r in re.findall(r"\d+", missing.group(1))}
            self.ras_missing |= ranks
            self.keep(Event("ras", name, number, text.strip(), None, (("missing", tuple(sorted(ranks))),)))
            return True
        if "considered dead" in text:
            self.keep(Event("ras", name, number, text.strip()))
            return True
        return False

    def ras_json(self, name: str, doc: dict) -> None:
        """ncclras -f json (2.28.7+): per communicator, each rank's collective counts and the ranks
        missing from it (unresponsive or dead)."""
        for comm in _items(doc.get("communicators")):
            if not isinstance(comm, dict):
                continue
            totals: dict[int, list[int]] = {}
            for rank in _items(comm.get("ranks")):
                number = _whole(_table(rank).get("rank"))
                if number is None:
                    continue  # a rank entry that names no rank says nothing about anyone
                counts = _table(rank.get("collective_counts"))
                total = sum(v for v in (_whole(c) for c in counts.values()) if v is not None)
                totals.setdefault(total, []).append(number)
            for index, (total, ranks) in enumerate(sorted(totals.items())):
                event = Event("ras", name, index + 1, f"communicator {comm.get('hash')}: {len(ranks)} rank(s) launched "
                              f"{total} collective(s): {', '.join(str(r) for r in ranks[:16])}", None,
                              (("count", len(ranks)), ("launched", total)))
                self.keep(event)
                self.ras_groups.append([total, len(ranks), list(ranks), event])
            missing = [m for m in (_whole(_table(m).get("rank")) for m in _items(comm.get("missing_ranks")))
                       if m is not None]
            if missing:
                self.ras_missing |= set(missing)
                self.keep(Event("ras", name, 0, f"communicator {comm.get('hash')}: missing rank(s) "
                                f"{', '.join(str(m) for m in missing)}", None, (("missing", tuple(missing)),)))
        self.lines += 1

    def flight_recorder(self, name: str, dump: dict, rank_from_name: int | None) -> None:
        """A rank's Flight Recorder dump: per process group, the first collective not completed
        is where the rank stands ("scheduled": enqueued, never started on the GPU; "started":
        running); a rank whose collectives all completed stands after its last one."""
        rank = _whole(dump.get("rank", rank_from_name))
        if rank is None:
            self.keep(Event("flight_recorder", name, 0, "a Flight Recorder dump that names no rank"))
            return
        self.dumped.add(rank)
        for key, info in _table(dump.get("pg_config")).items():
            # {name: {"name", "desc", "ranks": "[0, 1, 2, 3]"}}: who should have dumped for each group
            info = _table(info)
            members = tuple(int(r) for r in re.findall(r"-?\d+", str(info.get("ranks", ""))))
            if members:
                self.members[_pg([info.get("name", key), info.get("desc", "")]) or str(key)] = members
        # An entry without a whole sequence number cannot be placed against the others': left out.
        entries = [e for e in _items(dump.get("entries")) if isinstance(e, dict) and e.get("is_p2p") is not True
                   and _whole(e.get("collective_seq_id")) is not None]
        self.lines += len(entries)
        standing = None
        for number, entry in enumerate(entries, 1):
            pg_name = _pg(entry.get("process_group") or entry.get("pg_id"))
            sizes = entry.get("input_sizes") or [[]]
            out_sizes = entry.get("output_sizes") or [[]]
            fields = (("seq", _whole(entry.get("collective_seq_id"))), ("op", _op_name(entry.get("profiling_name"))),
                      ("numel_in", _numel(sizes)), ("numel_out", _numel(out_sizes)),
                      ("timeout_ms", _whole(entry.get("timeout_ms"))), ("ran_ms", None), ("pg", pg_name),
                      ("state", entry.get("state")))
            text = (f"{entry.get('profiling_name')} collective_seq_id {entry.get('collective_seq_id')} "
                    f"process_group {pg_name} input_sizes {sizes} state {entry.get('state')}")
            event = Event("flight_recorder", name, number, text, rank, fields)
            if entry.get("state") != "completed" and standing is None:
                standing = event
            last = event
        if not entries:
            return
        self.keep(standing or last)
        status = _table(_table(dump.get("pg_status")).get(str(entries[-1].get("pg_id"))))
        if standing is not None and self.timed_section is None:
            self.timed_section = self.section
        if standing is not None:
            self.timeouts.setdefault(rank, standing)
        enqueued = _whole(status.get("last_enqueued_collective", last.get("seq")))
        completed = _whole(status.get("last_completed_collective", last.get("seq") if standing is None else -1))
        work = Event("work", name, last.line, f"{last.text}; last enqueued collective {enqueued}, last completed "
                     f"{completed}", rank, (("seq", (standing or last).get("seq")), ("enqueued", enqueued),
                                           ("completed", completed), ("pg", last.get("pg")), ("entry", True)))
        self.work.setdefault(rank, work)

    def _grouped_timeouts(self) -> dict[int, Event]:
        """Each rank's timeout with its process group: PyTorch 2.4+ names the group only on the
        progress line that follows the timeout ("[PG ID 0 PG GUID 0(default_pg) Rank 3] failure
        detected by watchdog at work sequence id: N ..."), so a timeout without one takes the group
        of its rank's progress line for the same SeqNum; where the logs name one group only, a
        timeout that names none is in it."""
        def in_group(event: Event, pg: str) -> Event:
            return Event(event.kind, event.file, event.line, event.text, event.rank,
                         tuple((k, pg if k == "pg" else v) for k, v in event.fields))

        out = {}
        for rank, event in self.timeouts.items():
            work = self.work.get(rank)
            if event.get("pg") is None and work is not None and work.get("pg") is not None \
                    and work.get("seq") == event.get("seq"):
                event = in_group(event, work.get("pg"))
            out[rank] = event
        named = {e.get("pg") for e in out.values()} - {None}
        if len(named) == 1:
            (pg,) = named
            out = {rank: event if event.get("pg") else in_group(event, pg) for rank, event in out.items()}
        return out

    def freeze(self, files: tuple[str, ...]) -> Evidence:
        return Evidence(files, self.lines, self.events, self.counts, self._grouped_timeouts(), self.work,
                        self.settings,
                        self.versions, tuple(sorted(self.nranks)), self.init_complete, self.ifaces,
                        tuple((g[0], g[1], tuple(g[2]), g[3]) for g in self.ras_groups),
                        tuple(sorted(self.ras_missing)),
                        self.fingerprints, self._last_calls(), self.socket_ifaces, self.networks,
                        tuple(sorted(self.test_devices)), self.test_results, tuple(sorted(self.hosts)), self.members,
                        tuple(sorted(self.dumped)))


def read_evidence(paths: Iterable[str | Path]) -> Evidence:
    """Every file's lines that bear on a diagnosis (see the module docstring); a file that cannot
    be read is a UsageError naming it."""
    collector = _Collector()
    names = []
    for path in paths:
        path = Path(path)
        names.append(path.name)
        try:
            with open_input(path, "log files (NCCL_DEBUG output, watchdog lines, nccl-tests output)") as stream:
                dump = read_flight_recorder(stream, path)
                if dump is not None and "communicators" in dump:
                    collector.ras_json(path.name, dump)
                    continue
                if dump is not None:
                    collector.flight_recorder(path.name, dump, rank_in_name(path.name))
                    continue
                stream.seek(0)
                for number, text in _lines(stream, partial(collector.scan_block, path.name)):
                    if text is None:
                        collector.lines += number
                    else:
                        collector.line(path.name, number, text)
        except IsADirectoryError:
            raise UsageError("is a folder", str(path), "log files (NCCL_DEBUG output, watchdog lines, "
                             "nccl-tests output)") from None
        except OSError as err:
            raise UsageError(f"cannot read: {err.strerror}", str(path), "a readable log file") from None
    return collector.freeze(tuple(names))

