"""The GPU side of the real backend's kernels: CUDA C for CuPy RawKernels, compiled by NVRTC.

`KERNEL_SOURCE` holds one entry point per type and operator NCCL reduces (kernels.py's types:
int8 uint8 int32 uint32 int64 uint64 half float double bfloat16; sum prod max min, avg being a
sum with kernels.py's pre- and post-steps):
- `nicksim_copy_<type>(src, dst, n)`: the copy primitive;
- `nicksim_reduce_<op>_<type>(a, b, out, n)`: out = a (op) b;
- `nicksim_reduce_copy_<op>_<type>(a, b, out, out2, n)`: the same written to two places in one
  pass (NCCL's reduceCopy: the output and the next peer's slot; out2 may be null);
- `nicksim_premul_<type>(a, out, factor, n)` for floating types (avg's 1/nRanks) and
  `nicksim_postdiv_<type>(x, n, nranks)` for integers (avg's division, truncated towards zero).
half and bfloat16 are stored as 16-bit words and computed in float, rounded back to nearest-even:
float's 24 bits are at least 2p+2 for both (p = 11 and 8), so one operation rounded twice equals
the operation rounded once, as __hadd gives; float max/min ignore a NaN, as fmaxf does.

`compile_ptx(arch)` compiles the source with NVRTC through its C API (libnvrtc from the
nvidia-cuda-nvrtc wheel or the system), no GPU needed; `gpu_kernels()` loads the module into
CuPy where CuPy and a device are present, and otherwise raises GpuUnavailable saying why.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os

from ..errors import NickSimError

__all__ = ["KERNEL_SOURCE", "DTYPES", "OPS", "kernel_names", "compile_ptx", "NvrtcError", "GpuUnavailable",
           "gpu_kernels", "gpu_unavailable"]

# kernels.py's type names -> (C storage type, how it computes: int, float or a 16-bit float).
DTYPES = {
    "int8": "signed char", "uint8": "unsigned char", "int32": "int", "uint32": "unsigned int",
    "int64": "long long", "uint64": "unsigned long long", "half": "unsigned short", "float": "float",
    "double": "double", "bfloat16": "unsigned short",
}
_UNSIGNED_OF = {"int8": "unsigned char", "int32": "unsigned int", "int64": "unsigned long long"}
OPS = ("sum", "prod", "max", "min")

_PRELUDE = r"""
__device__ __forceinline__ float h2f(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ unsigned short f2h(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float b2f(unsigned short b) { return __uint_as_float(((unsigned int)b) << 16); }
__device__ __forceinline__ unsigned short f2b(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  // a NaN stays quiet
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return (unsigned short)(u >> 16);
}
#define NICKSIM_LOOP for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
                          i < n; i += (unsigned long long)gridDim.x * blockDim.x)
"""


def _combine_expr(dtype: str, op: str, a: str, b: str) -> str:
    """C for `a (op) b` in `dtype`'s storage type."""
    ctype = DTYPES[dtype]
    if dtype in ("half", "bfloat16"):
        to_f, from_f = ("h2f", "f2h") if dtype == "half" else ("b2f", "f2b")
        return from_f + "(" + _float_expr("float", op, f"{to_f}({a})", f"{to_f}({b})") + ")"
    if dtype in ("float", "double"):
        return _float_expr(dtype, op, a, b)
    if op in ("sum", "prod"):  # wrap around as the hardware does: in the unsigned type
        wide = _UNSIGNED_OF.get(dtype, ctype)
        sign = "+" if op == "sum" else "*"
        return f"({ctype})(({wide}){a} {sign} ({wide}){b})"
    return f"({a} {'>' if op == 'max' else '<'} {b} ? {a} : {b})"


def _float_expr(ctype: str, op: str, a: str, b: str) -> str:
    if op == "sum":
        return f"({a} + {b})"
    if op == "prod":
        return f"({a} * {b})"
    fn = ("fmaxf" if op == "max" else "fminf") if ctype == "float" else ("fmax" if op == "max" else "fmin")
    return f"{fn}({a}, {b})"


def _entries(dtype: str) -> list[str]:
    t = DTYPES[dtype]
    out = [f'extern "C" __global__ void nicksim_copy_{dtype}(const {t}* src, {t}* dst, unsigned long long n) '
           "{ NICKSIM_LOOP dst[i] = src[i]; }"]
    for op in OPS:
        expr = _combine_expr(dtype, op, "a[i]", "b[i]")
        out.append(f'extern "C" __global__ void nicksim_reduce_{op}_{dtype}(const {t}* a, const {t}* b, {t}* out, '
                   f"unsigned long long n) {{ NICKSIM_LOOP out[i] = {expr}; }}")
        out.append(f'extern "C" __global__ void nicksim_reduce_copy_{op}_{dtype}(const {t}* a, const {t}* b, '
                   f"{t}* out, {t}* out2, unsigned long long n) {{ NICKSIM_LOOP {{ {t} v = {expr}; out[i] = v; "
                   "if (out2) out2[i] = v; } }")
    if dtype in ("half", "bfloat16"):
        to_f, from_f = ("h2f", "f2h") if dtype == "half" else ("b2f", "f2b")
        out.append(f'extern "C" __global__ void nicksim_premul_{dtype}(const {t}* a, {t}* out, float factor, '
                   f"unsigned long long n) {{ NICKSIM_LOOP out[i] = {from_f}({to_f}(a[i]) * factor); }}")
    elif dtype in ("float", "double"):
        out.append(f'extern "C" __global__ void nicksim_premul_{dtype}(const {t}* a, {t}* out, {t} factor, '
                   "unsigned long long n) { NICKSIM_LOOP out[i] = a[i] * factor; }")
    else:  # C's division truncates towards zero, as NCCL's integer avg does
        out.append(f'extern "C" __global__ void nicksim_postdiv_{dtype}({t}* x, unsigned long long n, int nranks) '
                   f"{{ NICKSIM_LOOP x[i] = ({t})(x[i] / ({t})nranks); }}")
    return out


KERNEL_SOURCE = _PRELUDE + "\n".join(line for dtype in DTYPES for line in _entries(dtype)) + "\n"


def kernel_names() -> list[str]:
    """Every entry point KERNEL_SOURCE defines."""
    return [line.split("void ", 1)[1].split("(", 1)[0] for line in KERNEL_SOURCE.splitlines()
            if line.startswith('extern "C"')]


class NvrtcError(NickSimError):
    """NVRTC is missing, or rejected the source (its log says where)."""

    kind = "nvrtc"


class GpuUnavailable(NickSimError):
    """The GPU path cannot be used here: no CuPy, or no CUDA device."""

    kind = "gpu"


def _nvrtc_library() -> ctypes.CDLL:
    candidates = []
    spec = importlib.util.find_spec("nvidia.cuda_nvrtc")
    if spec is not None and spec.submodule_search_locations:
        lib_dir = os.path.join(list(spec.submodule_search_locations)[0], "lib")
        candidates += [os.path.join(lib_dir, n) for n in sorted(os.listdir(lib_dir))
                       if n.startswith("libnvrtc.so")] if os.path.isdir(lib_dir) else []
    system = ctypes.util.find_library("nvrtc")
    candidates += [system] if system else []
    for path in candidates:
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    raise NvrtcError("no libnvrtc found", "cuda", "pip install nvidia-cuda-nvrtc-cu12, or a CUDA toolkit")


def compile_ptx(arch: str = "compute_90", source: str = KERNEL_SOURCE) -> str:
    """`source` compiled for `arch` (a virtual architecture, e.g. compute_80) into PTX text."""
    lib = _nvrtc_library()
    prog = ctypes.c_void_p()
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"nicksim_kernels.cu", 0, None, None),
           "nvrtcCreateProgram")
    try:
        options = [f"--gpu-architecture={arch}".encode(), b"-default-device", b"--std=c++14"]
        result = lib.nvrtcCompileProgram(prog, len(options), (ctypes.c_char_p * len(options))(*options))
        if result != 0:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            raise NvrtcError(f"the kernels do not compile for {arch}: {log.value.decode(errors='replace').strip()}",
                             "cuda")
        size = ctypes.c_size_t()
        _check(lib, lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
        ptx = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
        return ptx.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _check(lib: ctypes.CDLL, result: int, call: str) -> None:
    if result != 0:
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise NvrtcError(f"{call} failed: {lib.nvrtcGetErrorString(result).decode()}", "cuda")


def gpu_unavailable() -> str:
    """Why the real backend runs on the CPU here, in one phrase (nothing is compiled or loaded)."""
    if importlib.util.find_spec("cupy") is None:
        return "CuPy is not installed"
    import cupy
    try:
        devices = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError:
        devices = 0
    if devices == 0:
        return "no CUDA device"
    return f"CuPy sees {devices} GPU(s): NICKSIM_DEVICE=gpu runs the ranks on them"


def gpu_kernels():
    """The compiled module as a CuPy RawModule (get_function by kernel name); GpuUnavailable where
    CuPy or a CUDA device is missing, naming which."""
    if importlib.util.find_spec("cupy") is None:
        raise GpuUnavailable("CuPy is not installed, so the GPU kernels are not used", "cuda",
                             "pip install 'nicksim[gpu]' on a machine with an NVIDIA GPU")
    import cupy
    try:
        devices = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as err:
        raise GpuUnavailable(f"CUDA reports no usable device ({err})", "cuda", "a machine with an NVIDIA GPU") from None
    if devices == 0:
        raise GpuUnavailable("no CUDA device", "cuda", "a machine with an NVIDIA GPU")
    return cupy.RawModule(code=KERNEL_SOURCE, options=("--std=c++14",))
