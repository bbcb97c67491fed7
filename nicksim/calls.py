"""Collective calls as NCCL receives them: the collective, the element count, type and operation.

A `Call` is what one `ncclAllReduce(...)`-style call hands NCCL; its byte counts follow NCCL's
enqueue.h (ncclFuncSendCount / ncclFuncRecvCount / ncclFuncMaxSendRecvCount) and the traffic
per byte that enqueue.cc's scheduler spreads over channels. Names are nccl-tests' own
(`all_reduce`, `float`, `sum`) with NCCL's function names beside them.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import UsageError

__all__ = ["COLLECTIVES", "NCCL_FUNC", "DTYPES", "REDOPS", "Call", "collective_name", "known_collective", "dtype_name", "redop_name",
           "call_for_size"]

# nccl-tests binaries (src/*.cu) and the NCCL function each one calls.
NCCL_FUNC: dict[str, str] = {
    "all_reduce": "AllReduce", "all_gather": "AllGather", "reduce_scatter": "ReduceScatter",
    "broadcast": "Broadcast", "reduce": "Reduce", "alltoall": "AllToAll", "sendrecv": "SendRecv",
}
COLLECTIVES: tuple[str, ...] = tuple(NCCL_FUNC)

# nccl-tests' type names (src/common.cu test_typenames) and their sizes in bytes.
DTYPES: dict[str, int] = {
    "int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
    "half": 2, "float": 4, "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1,
}
_DTYPE_ALIASES = {"char": "int8", "int": "int32", "float16": "half", "float32": "float", "float64": "double",
                  "bf16": "bfloat16", "fp8_e4m3": "f8e4m3", "fp8_e5m2": "f8e5m2"}
REDOPS: tuple[str, ...] = ("sum", "prod", "max", "min", "avg")
# nccl-tests prints the -o reduction for these; sendrecv prints it too though NCCL reduces nothing.
_REDUCING = {"all_reduce", "reduce_scatter", "reduce", "sendrecv"}
_ROOTED = {"broadcast", "reduce"}


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
    def func(self) -> str:
        return NCCL_FUNC[self.collective]

    @property
    def elem_nbytes(self) -> int:
        return DTYPES[self.dtype]

    @property
    def nbytes(self) -> int:
        """Bytes NCCL prices the call at (ncclFuncMaxSendRecvCount x type size)."""
        per = self.nranks if self.collective in ("all_gather", "reduce_scatter", "alltoall") else 1
        return self.count * per * self.elem_nbytes

    @property
    def traffic_per_byte(self) -> int:
        """enqueue.cc ncclFuncTrafficPerByte: what the scheduler spreads over channels per count byte."""
        if self.collective == "all_reduce":
            return 2
        if self.collective in ("all_gather", "reduce_scatter"):
            return self.nranks
        return 1


def call_for_size(collective: str, size_nbytes: int, dtype: str, redop: str, root: int, nranks: int) -> Call:
    """The call nccl-tests makes for a row of `size_nbytes` (its size column).

    nccl-tests' size is the whole buffer: count = size / type size for all_reduce, broadcast,
    reduce and sendrecv; for all_gather, reduce_scatter and alltoall the per-rank count is
    (size / type size / nranks) rounded down to 16 bytes' worth of elements (src/all_gather.cu
    GetCollByteCount: `(count/nranks) & -(16/eltSize)`), so the row's size is Call.nbytes.
    """
    elem = DTYPES[dtype]
    count = size_nbytes // elem
    if collective in ("all_gather", "reduce_scatter", "alltoall"):
        count = (count // nranks) & -(16 // elem)
    op = redop if collective in _REDUCING else "none"
    return Call(collective, count, dtype, op, root if collective in _ROOTED else -1, nranks)
