"""The arithmetic of NCCL's reductions on the CPU, with numpy, for every type NCCL reduces.

NCCL turns the user's operator into a device operator once per call (enqueue.cc hostToDevRedOp,
2.30.7): sum, prod, min and max act element by element; avg is a sum whose inputs are each first
multiplied by 1/nRanks for floating types (PreMulSum, the factor rounded to the type), and a sum
divided by nRanks at the end for integer types (SumPostDiv, C division: truncated towards zero).
So a rank applies `pre_op` to its own input where it enters a reduction, `combine` to add what it
received, and `post_op` where the reduction's result is final (the primitives' postOp).

Integer arithmetic wraps as the GPU's does. half rounds every operation to float16, as __hadd
does; bfloat16, which numpy lacks, is held as uint16 bit patterns and computed in float32, each
result rounded to the nearest bfloat16, ties to even, as __hadd on __nv_bfloat16 does. Min and max
of floating types prefer the number over a NaN (fminf / fmaxf).
"""
from __future__ import annotations

import numpy as np

from ..errors import UsageError

__all__ = ["DTYPES", "OPS", "storage_dtype", "to_float", "from_float", "pre_op", "combine", "post_op", "copy_into"]

# nccl-tests' type names (calls.DTYPES) -> numpy storage (bfloat16 as its bit pattern).
DTYPES = {
    "int8": np.int8, "uint8": np.uint8, "int32": np.int32, "uint32": np.uint32, "int64": np.int64,
    "uint64": np.uint64, "half": np.float16, "bfloat16": np.uint16, "float": np.float32, "double": np.float64,
}
OPS = ("sum", "prod", "max", "min", "avg")


def _check(dtype: str, op: str | None = None) -> None:
    if dtype not in DTYPES:
        raise UsageError(f"type {dtype!r}", "kernels", ", ".join(DTYPES))
    if op is not None and op not in OPS:
        raise UsageError(f"operator {op!r}", "kernels", ", ".join(OPS))


def storage_dtype(dtype: str) -> type:
    """The numpy type holding `dtype`'s elements."""
    _check(dtype)
    return DTYPES[dtype]


def _is_float(dtype: str) -> bool:
    return dtype in ("half", "bfloat16", "float", "double")


def to_float(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns -> float32 (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def from_float(values: np.ndarray) -> np.ndarray:
    """float32 -> the nearest bfloat16 bit patterns, ties to even; NaN stays a (quiet) NaN."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((bits + (0x7FFF + ((bits >> 16) & 1))) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():
        rounded[nan] = ((bits[nan] >> 16) | 0x0040).astype(np.uint16)
    return rounded


def _apply(dtype: str, fn, *arrays: np.ndarray) -> np.ndarray:
    """fn over the arrays in their own type (bfloat16: in float32, rounded back)."""
    if dtype == "bfloat16":
        return from_float(fn(*(to_float(a) for a in arrays)))
    with np.errstate(over="ignore", invalid="ignore"):
        return fn(*arrays).astype(DTYPES[dtype], copy=False)


def _scalar(dtype: str, value: float):
    """`value` rounded to `dtype`, as hostToDevRedOp rounds the PreMulSum factor."""
    if dtype == "bfloat16":
        return to_float(from_float(np.array([value], dtype=np.float32)))[0]
    return DTYPES[dtype](value)


def pre_op(values: np.ndarray, op: str, dtype: str, nranks: int) -> np.ndarray:
    """A rank's own input as it enters the reduction: times 1/nRanks for a floating avg."""
    _check(dtype, op)
    if op != "avg" or not _is_float(dtype):
        return values
    factor = _scalar(dtype, 1.0 / nranks)
    return _apply(dtype, lambda x: x * factor, values)


_COMBINE = {"sum": np.add, "avg": np.add, "prod": np.multiply}


def combine(a: np.ndarray, b: np.ndarray, op: str, dtype: str, out: np.ndarray | None = None) -> np.ndarray:
    """a (op) b, element by element; into `out` where given (it may be a or b)."""
    _check(dtype, op)
    fn = _COMBINE.get(op) or ((np.fmax if op == "max" else np.fmin) if _is_float(dtype) else
                              (np.maximum if op == "max" else np.minimum))
    if out is None:
        return _apply(dtype, fn, a, b)
    if dtype == "bfloat16":
        out[:] = from_float(fn(to_float(a), to_float(b)))
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            fn(a, b, out=out)
    return out


def post_op(values: np.ndarray, op: str, dtype: str, nranks: int) -> np.ndarray:
    """The final result: an integer avg's sum divided by nRanks, truncated towards zero."""
    _check(dtype, op)
    if op != "avg" or _is_float(dtype):
        return values
    quotient = values // nranks  # floor; C truncates, so a negative value with a remainder goes up one
    if not dtype.startswith("u"):
        quotient = quotient + ((values < 0) & (values % nranks != 0)).astype(values.dtype)
    return quotient.astype(DTYPES[dtype], copy=False)


def copy_into(dst: np.ndarray, src: np.ndarray) -> None:
    """The copy primitive: src's elements into dst, which has their length."""
    np.copyto(dst, src, casting="no")
