"""The GPU path's own logic (nicksim/realhw/cuda_ipc.py) without a GPU: CuPy replaced by a stand-in
on host memory.

The stand-in keeps device allocations in a registry shared by the threads that play the ranks;
an IPC handle is the allocation's number in 64 bytes, and opening it maps the same memory at
another address, as cudaIpcOpenMemHandle does in another process. Its kernels are looked up by
name in cuda_kernels.KERNEL_SOURCE, and every launch is checked against the entry point's C
signature (argument count; a device array where the C type is a pointer, of the pointee's width;
numpy's uint64 / int32 / float32 / float64 where it is unsigned long long / int / float /
double); the arithmetic is then kernels.py's. What this cannot check — the CUDA runtime, the
kernels' own code on a device — is for a host with a GPU (benchmarks/gpu_check.py)."""
from __future__ import annotations

import itertools
import os
import re
import types

import numpy as np
import pytest

from nicksim.calls import Call
from nicksim.tuning.choose import forced_choice
from nicksim.plan.chunking import plan_call
from nicksim.plan.p2p import p2p_setup
from nicksim.realhw import kernels as K
from nicksim.realhw.cuda_ipc import CudaIpcRing, CudaOps, GpuRuntime
from nicksim.realhw.cuda_kernels import KERNEL_SOURCE, GpuUnavailable
from nicksim.realhw.runner import count_wrong, expected_output
from nicksim.realhw.shm import segment_name
from test_execute import host_job, run_all

_SIGNATURES = {m.group(1): [a.strip() for a in m.group(2).split(",")]
               for m in re.finditer(r'void (nicksim_\w+)\(([^)]*)\)', KERNEL_SOURCE)}
_SCALARS = {"unsigned long long": np.uint64, "int": np.int32, "float": np.float32, "double": np.float64}
_WIDTH = {"signed char": 1, "unsigned char": 1, "unsigned short": 2, "int": 4, "unsigned int": 4, "float": 4,
          "long long": 8, "unsigned long long": 8, "double": 8}


class _CudaRuntimeError(Exception):
    pass


class FakeCupy:
    """The part of CuPy the GPU path uses, on host memory."""

    uint8 = np.uint8

    def __init__(self):
        self.registry: dict[int, np.ndarray] = {}
        self.ids = itertools.count(1 << 20, 1 << 20)
        self.launches: list[str] = []
        self.syncs = 0
        self.open_handles: set[int] = set()
        self.opened = 0
        fake = self

        class Memory:
            def __init__(self, size):
                self.ptr = next(fake.ids)
                fake.registry[self.ptr] = np.zeros(size, np.uint8)

        class UnownedMemory:
            def __init__(self, ptr, size, owner):
                self.ptr = ptr
                assert fake.registry[ptr].size >= size

        class MemoryPointer:
            def __init__(self, memory, offset):
                self.memory, self.offset = memory, offset

        def get_handle(ptr):
            return ptr.to_bytes(64, "little")

        def open_handle(handle):
            ptr = int.from_bytes(handle, "little")
            if ptr not in fake.registry:
                raise _CudaRuntimeError("cudaErrorInvalidValue")
            mapped = next(fake.ids)
            fake.registry[mapped] = fake.registry[ptr]  # the same memory at another address
            fake.open_handles.add(mapped)
            fake.opened += 1
            return mapped

        def close_handle(ptr):
            fake.open_handles.remove(ptr)

        class Stream:
            def synchronize(self):
                fake.syncs += 1

        runtime = types.SimpleNamespace(ipcGetMemHandle=get_handle, ipcOpenMemHandle=open_handle,
                                        ipcCloseMemHandle=close_handle, CUDARuntimeError=_CudaRuntimeError)
        self.cuda = types.SimpleNamespace(Memory=Memory, UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer,
                                          runtime=runtime, get_current_stream=lambda: Stream())

    def ndarray(self, shape, dtype, memptr):
        return self.registry[memptr.memory.ptr][memptr.offset:memptr.offset + shape[0]].view(dtype)

    empty = staticmethod(np.empty)
    zeros = staticmethod(np.zeros)
    empty_like = staticmethod(np.empty_like)
    asarray = staticmethod(np.array)
    asnumpy = staticmethod(np.array)


class FakeModule:
    """cupy.RawModule(code=KERNEL_SOURCE): get_function by name, each launch checked and run."""

    def __init__(self, fake: FakeCupy):
        self.fake = fake

    def get_function(self, name):
        assert name in _SIGNATURES, f"no entry point {name} in KERNEL_SOURCE"
        params = _SIGNATURES[name]

        def launch(grid, block, args):
            assert len(grid) == 1 and len(block) == 1 and grid[0] >= 1 and block[0] >= 1
            assert len(args) == len(params), (name, args)
            for arg, param in zip(args, params):
                ctype = param.rsplit(" ", 1)[0].replace("const ", "").strip()
                if ctype.endswith("*"):
                    assert isinstance(arg, np.ndarray), (name, param)
                    assert arg.dtype.itemsize == _WIDTH[ctype[:-1].strip()], (name, param, arg.dtype)
                else:
                    assert type(arg) is _SCALARS[ctype], (name, param, type(arg))
            self.fake.launches.append(name)
            _run_kernel(name, args)

        return launch




def _run_kernel(name: str, args) -> None:
    parts = name.split("_")
    kind, dtype = parts[1], parts[-1]
    if name.startswith("nicksim_reduce_copy"):
        raise AssertionError("reduce_copy is not used by CudaOps")
    if kind == "copy":
        src, dst, n = args
        dst[:int(n)] = src[:int(n)]
    elif kind == "reduce":
        a, b, out, n = args
        K.combine(a[:int(n)], b[:int(n)], parts[2], dtype, out=out[:int(n)])
    elif kind == "premul":
        a, out, factor, n = args
        values = K.to_float(a) if dtype == "bfloat16" else a.astype(np.float32 if dtype == "half" else a.dtype)
        product = values * factor
        out[:int(n)] = K.from_float(product) if dtype == "bfloat16" else product.astype(out.dtype)
    elif kind == "postdiv":
        x, n, nranks = args
        x[:int(n)] = K.post_op(x[:int(n)], "avg", dtype, int(nranks))
    else:
        raise AssertionError(name)


def fake_runtime(fake: FakeCupy) -> GpuRuntime:
    return GpuRuntime(fake, 0, CudaOps(fake, FakeModule(fake)))


def run_on_fake_gpus(job, plan, tag: str, programs=None):
    """Every rank a thread on the stand-in GPU: rings through IPC handles, kernels by CudaOps."""
    fake = FakeCupy()
    sends, recvs, errors = run_all(job, plan, tag, programs=programs, gpu=fake_runtime(fake))
    assert not errors, errors
    assert fake.open_handles == set() and fake.opened > 0  # every handle opened was closed again
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(f"nicksim-{tag}")]
    return fake, sends, recvs


@pytest.mark.parametrize("protocol", ["Simple", "LL", "LL128"])
@pytest.mark.parametrize("nranks", [2, 3])
def test_collectives_through_ipc_rings_and_kernels_deliver_every_element(nranks, protocol):
    job = host_job(nranks)
    for collective, dtype, op in (("all_reduce", "float", "avg"), ("all_reduce", "int32", "avg"),
                                  ("reduce_scatter", "bfloat16", "max"), ("all_gather", "half", "none"),
                                  ("broadcast", "int8", "none"), ("reduce", "double", "prod")):
        root = 1 if collective in ("broadcast", "reduce") else -1
        call = Call(collective, 70001, dtype, op, root, nranks)
        plan = plan_call(job.comm, call, forced_choice(job.comm, call, "Ring", protocol))
        fake, sends, recvs = run_on_fake_gpus(job, plan, f"g{os.getpid()}{nranks}{protocol}{collective}")
        for r in range(nranks):
            assert count_wrong(call, recvs[r], expected_output(call, r, sends)) == 0, (collective, dtype, r)
        assert fake.syncs > 0 and fake.launches


@pytest.mark.parametrize("collective", ["alltoall", "sendrecv"])
def test_point_to_point_through_ipc_rings(collective):
    job = host_job(3)
    call = Call(collective, 5003, "int32", "none", -1, 3)
    p2p = p2p_setup(job)
    programs = {r: p2p.programs(call, r) for r in range(3)}
    plan = p2p.plan_record(call, programs[0])
    _, sends, recvs = run_on_fake_gpus(job, plan, f"g{os.getpid()}{collective}", programs=programs)
    for r in range(3):
        assert count_wrong(call, recvs[r], expected_output(call, r, sends)) == 0


def test_the_sender_maps_the_receivers_slots_through_the_handle():
    fake = FakeCupy()
    tag = f"g{os.getpid()}handle"
    name = segment_name(tag, 0, 0, 1)
    recv = CudaIpcRing.create(name, 1 << 16, "channel 0, rank 0 -> rank 1", "Simple", fake)
    send = CudaIpcRing.attach(name, 1 << 16, "channel 0, rank 0 -> rank 1", 5, "Simple", fake)
    try:
        recv.unlink()
        slot = send.reserve(8)
        slot[:] = np.arange(8, dtype=np.uint8)
        send.post(8)
        assert list(recv.recv(5)) == list(range(8))  # written by one side, read by the other
        recv.release()
        assert send.free_steps() == 8 - 1  # the ring's own accounting: one step gone round
    finally:
        send.close()
        recv.close()
    assert not fake.open_handles


def test_ll_steps_carry_what_lls_lines_would():
    fake = FakeCupy()
    name = segment_name(f"g{os.getpid()}ll", 0, 0, 1)
    ring = CudaIpcRing.create(name, 1 << 16, "c", "LL", fake)
    try:
        assert ring.data_nbytes == (1 << 16) // 2  # 8 data bytes in every 16-byte line
    finally:
        ring.close()


def test_a_handle_that_cannot_be_opened_is_one_clear_error():
    fake = FakeCupy()
    name = segment_name(f"g{os.getpid()}bad", 0, 0, 1)
    recv = CudaIpcRing.create(name, 4096, "channel 0, rank 0 -> rank 1", "Simple", fake)
    fake.registry.clear()  # the allocation is gone: the handle names nothing
    try:
        with pytest.raises(GpuUnavailable, match="channel 0, rank 0 -> rank 1: CUDA IPC failed on the send side"):
            CudaIpcRing.attach(name, 4096, "channel 0, rank 0 -> rank 1", 5, "Simple", fake)
    finally:
        recv.close()
