"""The real backend on GPUs: connections through CUDA IPC, arithmetic by CuPy RawKernels.

`CudaIpcRing` is one direction of a connection between two ranks of a host, as NCCL's P2P
transport lays it out: the receiver allocates the NCCL_STEPS slots in its GPU's memory and hands
the sender a CUDA IPC handle, through which the sender's kernels write straight into them. The
head and tail counters and the slot lengths stay in a POSIX shared-memory segment (shm.py's
layout, the handle after them), so the flow control is ShmRing's. Steps are driven from the
host: a pass's kernels are launched, their stream synchronised (`CudaOps.fence`), and only then
is the tail advanced or the head given back, so a peer never reads a slot before it is written
nor overwrites one still being read. Every protocol moves its steps this way; its step size is
the data NCCL's LL or LL128 lines would carry, so the plan's steps are the same on CPU and GPU
(the flagged lines are a device-side polling scheme that host-driven steps do not need).

`CudaOps` is execute.HostOps over device arrays: copy, reduce, avg's pre-multiplication and
post-division, each a cuda_kernels.py entry point. `gpu_runtime(local_rank)` picks the rank's
device (local rank modulo the devices, so several ranks may share one GPU, IPC between processes
working on one device as between two) and loads the kernels, or raises GpuUnavailable.
"""
from __future__ import annotations

import mmap

import numpy as np

from .cuda_kernels import GpuUnavailable, gpu_kernels
from .kernels import pre_op, storage_dtype
from .shm import _SLOTS, NCCL_STEPS, ShmRing, attach_segment, create_segment

__all__ = ["CudaIpcRing", "CudaOps", "GpuRuntime", "gpu_runtime", "GpuUnavailable"]

_HANDLE_NBYTES = 64  # sizeof(cudaIpcMemHandle_t)
_THREADS = 512
_MAX_BLOCKS = 1024


class CudaIpcRing(ShmRing):
    """A ShmRing whose slots are device memory: allocated by the receiver (`create`), opened by
    the sender through the IPC handle in the counters' segment (`attach`). Slots hold
    `step_data_nbytes` of the protocol's step each."""

    def __init__(self, name, step_nbytes, side, label, fd, buf, owner, cupy):
        self._cupy = cupy
        self._device_mem = None  # the receiver's allocation
        self._opened_ptr = None  # the sender's mapping of it
        super().__init__(name, step_nbytes, side, label, fd, buf, owner)

    @staticmethod
    def segment_nbytes(step_nbytes: int) -> int:
        return _SLOTS + _HANDLE_NBYTES

    @classmethod
    def create(cls, name: str, step_nbytes: int, label: str, protocol: str = "Simple", cupy=None) -> "CudaIpcRing":
        """The receiving side: the counters' segment, and slots on the current device whose IPC
        handle it carries."""
        data = ShmRing.layout(protocol).step_data_nbytes(step_nbytes)
        fd, buf = create_segment(name, cls.segment_nbytes(data))
        return cls(name, data, "recv", label, fd, buf, True, cupy)

    @classmethod
    def attach(cls, name: str, step_nbytes: int, label: str, timeout_s: float, protocol: str = "Simple",
               cupy=None) -> "CudaIpcRing":
        """The sending side: the receiver's segment (made before the ranks' barrier, so its
        handle is written) and its slots, opened through the handle."""
        data = ShmRing.layout(protocol).step_data_nbytes(step_nbytes)
        fd, buf = attach_segment(name, cls.segment_nbytes(data), label, timeout_s)
        return cls(name, data, "send", label, fd, buf, False, cupy)

    def _map_slots(self, buf: mmap.mmap):
        try:
            return self._device_slots(buf)
        except self._cupy.cuda.runtime.CUDARuntimeError as err:
            raise GpuUnavailable(f"{self.label}: CUDA IPC failed on the {self.side} side: {err}", "cuda",
                                 "GPUs that CUDA IPC can map between processes") from None

    def _device_slots(self, buf: mmap.mmap):
        cp = self._cupy
        nbytes = NCCL_STEPS * self.step_nbytes
        handle_at = slice(_SLOTS, _SLOTS + _HANDLE_NBYTES)
        if self.side == "recv":
            # Its own cudaMalloc, not a pool's block: an IPC handle names a whole allocation.
            self._device_mem = cp.cuda.Memory(max(1, nbytes))
            buf[handle_at] = bytes(cp.cuda.runtime.ipcGetMemHandle(self._device_mem.ptr))
            memory = self._device_mem
        else:
            self._opened_ptr = cp.cuda.runtime.ipcOpenMemHandle(bytes(buf[handle_at]))
            memory = cp.cuda.UnownedMemory(self._opened_ptr, max(1, nbytes), self)
        return cp.ndarray((nbytes,), dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(memory, 0))

    def send(self, data, timeout_s: float, steps: int = 1) -> None:
        raise NotImplementedError("a GPU ring is filled by kernels: reserve, fence, post")

    def close(self) -> None:
        super().close()
        if self._opened_ptr is not None:
            self._cupy.cuda.runtime.ipcCloseMemHandle(self._opened_ptr)
            self._opened_ptr = None
        self._device_mem = None


class CudaOps:
    """execute.HostOps on device arrays: each step a cuda_kernels.py kernel on the current stream;
    `fence` waits for them."""

    def __init__(self, cupy, module):
        self._cp, self._module = cupy, module
        self._functions: dict[str, object] = {}

    def _launch(self, name: str, n: int, *args) -> None:
        fn = self._functions.get(name)
        if fn is None:
            fn = self._functions[name] = self._module.get_function(name)
        blocks = max(1, min(_MAX_BLOCKS, -(-n // _THREADS)))
        fn((blocks,), (_THREADS,), args)

    def copy(self, dst, src) -> None:
        kind = _kernel_type(dst.dtype)
        self._launch(f"nicksim_copy_{kind}", dst.size, src.view(dst.dtype), dst, np.uint64(dst.size))

    def pre(self, own, op: str, dtype: str, nranks: int):
        if op != "avg" or dtype not in ("half", "bfloat16", "float", "double"):
            return own
        out = self._cp.empty_like(own)
        one = pre_op(np.ones(1, storage_dtype(dtype)), op, dtype, nranks)  # the factor, rounded as on the CPU
        factor = _factor_value(one, dtype)
        self._launch(f"nicksim_premul_{dtype}", own.size, own, out, factor, np.uint64(own.size))
        return out

    def combine(self, a, b, op: str, dtype: str, out) -> None:
        kernel_op = "sum" if op == "avg" else op
        self._launch(f"nicksim_reduce_{kernel_op}_{dtype}", out.size, a, b, out, np.uint64(out.size))

    def post(self, dest, op: str, dtype: str, nranks: int) -> None:
        if op == "avg" and dtype not in ("half", "bfloat16", "float", "double"):
            self._launch(f"nicksim_postdiv_{dtype}", dest.size, dest, np.uint64(dest.size), np.int32(nranks))

    def empty(self, n: int, storage):
        return self._cp.empty(n, storage)

    def fence(self) -> None:
        self._cp.cuda.get_current_stream().synchronize()


def _kernel_type(dtype) -> str:
    """The kernel type name that copies elements of numpy `dtype` (any type of that width)."""
    return {1: "uint8", 2: "half", 4: "uint32", 8: "uint64"}[np.dtype(dtype).itemsize]


def _factor_value(one: np.ndarray, dtype: str):
    """pre_op's factor (1 x factor, rounded to the type) as the premul kernel's argument."""
    if dtype == "bfloat16":
        return np.float32((one.astype(np.uint32) << 16).view(np.float32)[0])
    if dtype == "half":
        return np.float32(one[0])
    return one[0]


class GpuRuntime:
    """What a rank needs to run on its GPU: CuPy, its device, the kernels' arithmetic, and how to
    make rings and buffers there."""

    def __init__(self, cupy, device: int, ops: CudaOps):
        self.cupy, self.device, self.ops = cupy, device, ops

    def ring_create(self, name: str, step_nbytes: int, label: str, protocol: str) -> CudaIpcRing:
        return CudaIpcRing.create(name, step_nbytes, label, protocol, self.cupy)

    def ring_attach(self, name: str, step_nbytes: int, label: str, timeout_s: float, protocol: str) -> CudaIpcRing:
        return CudaIpcRing.attach(name, step_nbytes, label, timeout_s, protocol, self.cupy)

    def to_device(self, host: np.ndarray):
        return self.cupy.asarray(host)

    def to_host(self, device) -> np.ndarray:
        return self.cupy.asnumpy(device)


def gpu_runtime(local_rank: int) -> GpuRuntime:
    """The rank's GPU (local rank modulo the devices) made current, with the kernels loaded;
    GpuUnavailable where CuPy or a device is missing."""
    module = gpu_kernels()
    import cupy
    device = local_rank % cupy.cuda.runtime.getDeviceCount()
    cupy.cuda.Device(device).use()
    return GpuRuntime(cupy, device, CudaOps(cupy, module))

