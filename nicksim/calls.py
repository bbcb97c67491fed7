"""Collective calls as NCCL receives them: the collective, the element count, type and operation.

A `Call` is what one `ncclAllReduce(...)`-style call hands NCCL; its byte counts follow NCCL's
enqueue.h (ncclFuncSendCount / ncclFuncRecvCount / ncclFuncMaxSendRecvCount) and the traffic
per byte that enqueue.cc's scheduler spreads over channels. Names are nccl-tests' own
(`all_reduce`, `float`, `sum`) with NCCL's function names beside them. COLLECTIVE_TABLE holds
each collective's properties (names in NCCL, nccl-tests and PyTorch, point-to-point or not, busbw
factor, algorithms, what its output is); every other module reads them from there.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import UsageError

__all__ = ["Collective", "COLLECTIVE_TABLE", "COLLECTIVES", "NCCL_FUNC", "DTYPES", "REDOPS", "Call", "collective",
           "collective_name", "known_collective", "dtype_name", "redop_name", "call_for_size", "torch_collective"]


@dataclass(frozen=True)
class Collective:
    """Everything nicksim needs to know about one collective, in one row of COLLECTIVE_TABLE.

    `name` is nccl-tests' (its binary is `<name>_perf`), `func` NCCL's (ncclFuncStr, COLL lines),
    `torch_ops` the OpTypes PyTorch's watchdog and Flight Recorder name it by (the first is what
    `dist.<name>_into_tensor`-style calls log) and `torch_profiling` the Flight Recorder's
    profiling name. `p2p`: NCCL runs it as grouped sends and receives (no algorithm, no time
    model). `reduces`: the reduction matters to NCCL; `prints_redop`: nccl-tests prints its -o
    (sendrecv does, though NCCL reduces nothing). `rooted`: it takes -r. `send_per_rank` /
    `recv_per_rank`: that buffer holds `count` elements per rank (nccl-tests' size column is
    count x nranks x type size when either does). `bus`: nccl-tests' busbw / algbw
    (doc/PERFORMANCE.md): "2(n-1)/n", "(n-1)/n" or "1". `traffic`: enqueue.cc
    ncclFuncTrafficPerByte, what the scheduler spreads over channels per count byte ("2", "n"
    or "1"). `algorithms`: what NCCL's device code can run it with (the newest release; which of
    them a release prices is the time model's business). `torch_count`: which of PyTorch's
    NumelIn / NumelOut is NCCL's count. `output`: what each rank's output holds.
    """

    name: str
    func: str
    torch_ops: tuple[str, ...]
    torch_profiling: str
    p2p: bool
    reduces: bool
    prints_redop: bool
    rooted: bool
    send_per_rank: bool
    recv_per_rank: bool
    bus: str
    traffic: str
    algorithms: tuple[str, ...]
    torch_count: str
    output: str

    @property
    def per_rank(self) -> bool:
        """nccl-tests' size column is count x nranks x type size (and NCCL prices count x nranks)."""
        return self.send_per_rank or self.recv_per_rank

    def bus_factor(self, nranks: int) -> float:
        """busbw / algbw for a run on `nranks` ranks."""
        n = nranks
        return {"2(n-1)/n": 2 * (n - 1) / n, "(n-1)/n": (n - 1) / n, "1": 1.0}[self.bus]

    def traffic_per_byte(self, nranks: int) -> int:
        return {"2": 2, "n": nranks, "1": 1}[self.traffic]


_C = Collective
# NCCL 2.30's device code: src/device/{all_reduce,all_gather,reduce_scatter,broadcast,reduce}.h, and
# sendrecv.h for the point-to-point ones; PyTorch's OpType names from ProcessGroupNCCL.
COLLECTIVE_TABLE: dict[str, Collective] = {c.name: c for c in (
    _C("all_reduce", "AllReduce", ("ALLREDUCE",), "nccl:all_reduce", False, True, True, False, False, False,
       "2(n-1)/n", "2", ("Ring", "Tree", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree"), "in",
       "the reduction of every rank's vector, on every rank"),
    _C("all_gather", "AllGather", ("_ALLGATHER_BASE", "ALLGATHER"), "nccl:_allgather_base", False, False, False, False,
       False, True, "(n-1)/n", "n", ("Ring", "CollNetDirect", "NVLS", "PAT"), "in",
       "every rank's piece, in rank order, on every rank"),
    _C("reduce_scatter", "ReduceScatter", ("_REDUCE_SCATTER_BASE", "REDUCE_SCATTER"), "nccl:_reduce_scatter_base",
       False, True, True, False, True, False, "(n-1)/n", "n", ("Ring", "CollNetDirect", "NVLS", "PAT"), "out",
       "rank r's piece of the reduction of every rank's vector"),
    _C("broadcast", "Broadcast", ("BROADCAST",), "nccl:broadcast", False, False, False, True, False, False, "1", "1",
       ("Ring",), "in", "the root's vector, on every rank"),
    _C("reduce", "Reduce", ("REDUCE",), "nccl:reduce", False, True, True, True, False, False, "1", "1", ("Ring",), "in",
       "the reduction of every rank's vector, on the root"),
    _C("alltoall", "AllToAll", ("ALLTOALL_BASE", "ALLTOALL"), "nccl:all_to_all", True, False, False, False, True, True,
       "(n-1)/n", "1", (), "in", "piece r of every rank's vector, in rank order, on rank r"),
    _C("sendrecv", "SendRecv", (), "", True, False, True, False, False, False, "1", "1", (), "in",
       "the vector of the rank before it (rank r sends to r + 1)"),
)}
del _C

# nccl-tests binaries (src/*.cu) and the NCCL function each one calls.
NCCL_FUNC: dict[str, str] = {name: c.func for name, c in COLLECTIVE_TABLE.items()}
COLLECTIVES: tuple[str, ...] = tuple(COLLECTIVE_TABLE)

# nccl-tests' type names (src/common.cu test_typenames) and their sizes in bytes.
DTYPES: dict[str, int] = {
    "int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
    "half": 2, "float": 4, "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1,
}
_DTYPE_ALIASES = {"char": "int8", "int": "int32", "float16": "half", "float32": "float", "float64": "double",
                  "bf16": "bfloat16", "fp8_e4m3": "f8e4m3", "fp8_e5m2": "f8e5m2"}
REDOPS: tuple[str, ...] = ("sum", "prod", "max", "min", "avg")


def collective(name: str) -> Collective:
    """The table row of a collective by nccl-tests' name (UsageError for any other)."""
    return COLLECTIVE_TABLE[collective_name(name)]


def torch_collective(op_type: str) -> Collective | None:
    """The collective PyTorch names `op_type` (its watchdog's OpType), None for other work."""
    return next((c for c in COLLECTIVE_TABLE.values() if str(op_type).upper() in c.torch_ops), None)


def known_collective(text: str) -> str | None:
    """The nccl-tests name for `all_reduce`, `all_reduce_perf` (also a path to the binary) or
    NCCL's `AllReduce`; None for anything else."""
    name = str(text).strip().replace("\\", "/").rsplit("/", 1)[-1].lower()
    name = name.removesuffix("_perf")
    if name in COLLECTIVES:
        return name
    squashed = name.replace("_", "")  # NCCL's function names: AllReduce, AllToAll, SendRecv, ...
    for known in COLLECTIVES:
        if known.replace("_", "") == squashed:
            return known
    return None


def collective_name(text: str) -> str:
    """known_collective, or a UsageError listing the names."""
    name = known_collective(text)
    if name is None:
        raise UsageError(f"unknown collective '{text}'", "COLL",
                         ", ".join(COLLECTIVES) + " (also as all_reduce_perf or AllReduce)")
    return name


def dtype_name(text: str) -> str:
    name = _DTYPE_ALIASES.get(text.strip().lower(), text.strip().lower())
    if name not in DTYPES:
        raise UsageError(f"unknown data type '{text}'", "-d", ", ".join(DTYPES))
    return name


def redop_name(text: str) -> str:
    name = text.strip().lower()
    if name not in REDOPS:
        raise UsageError(f"unknown reduction '{text}'", "-o", ", ".join(REDOPS))
    return name


@dataclass(frozen=True)
class Call:
    """One collective call on a communicator of `nranks` ranks.

    `count` is NCCL's count argument: per-rank send elements for all_gather, per-rank receive
    elements for reduce_scatter, elements per peer for alltoall, the whole vector otherwise.
    `root` is -1 for rootless collectives; `redop` is "none" where nothing is reduced.
    """

    collective: str
    count: int
    dtype: str
    redop: str
    root: int
    nranks: int

    @property
    def info(self) -> Collective:
        return COLLECTIVE_TABLE[self.collective]

    @property
    def func(self) -> str:
        return self.info.func

    @property
    def elem_nbytes(self) -> int:
        return DTYPES[self.dtype]

    @property
    def send_count(self) -> int:
        """Elements of each rank's send buffer (enqueue.h ncclFuncSendCount)."""
        return self.count * (self.nranks if self.info.send_per_rank else 1)

    @property
    def recv_count(self) -> int:
        """Elements of each rank's receive buffer (enqueue.h ncclFuncRecvCount)."""
        return self.count * (self.nranks if self.info.recv_per_rank else 1)

    @property
    def nbytes(self) -> int:
        """Bytes NCCL prices the call at (ncclFuncMaxSendRecvCount x type size)."""
        return self.count * (self.nranks if self.info.per_rank else 1) * self.elem_nbytes

    @property
    def traffic_per_byte(self) -> int:
        """enqueue.cc ncclFuncTrafficPerByte: what the scheduler spreads over channels per count byte."""
        return self.info.traffic_per_byte(self.nranks)


def call_for_size(collective: str, size_nbytes: int, dtype: str, redop: str, root: int, nranks: int) -> Call:
    """The call nccl-tests makes for a row of `size_nbytes` (its size column).

    nccl-tests' size is the whole buffer: count = size / type size for all_reduce, broadcast,
    reduce and sendrecv; for all_gather, reduce_scatter and alltoall the per-rank count is
    (size / type size / nranks) rounded down to 16 bytes' worth of elements (src/all_gather.cu
    GetCollByteCount: `(count/nranks) & -(16/eltSize)`), so the row's size is Call.nbytes.
    """
    elem = DTYPES[dtype]
    count = size_nbytes // elem
    info = COLLECTIVE_TABLE[collective]
    if info.per_rank:
        count = (count // nranks) & -(16 // elem)
    op = redop if info.prints_redop else "none"
    return Call(collective, count, dtype, op, root if info.rooted else -1, nranks)
