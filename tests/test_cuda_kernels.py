"""The GPU kernels compile through NVRTC without a GPU (nvidia-cuda-nvrtc-cu12 is a dev
dependency), every type and operator, for Ampere's and Hopper's virtual architectures."""
from __future__ import annotations

import importlib.util
import re

import pytest

from nicksim.realhw.cuda_kernels import (DTYPES, OPS, GpuUnavailable, NvrtcError, compile_ptx, gpu_kernels,
                                         kernel_names)
from nicksim.realhw.kernels import DTYPES as CPU_DTYPES


def test_every_type_the_cpu_kernels_reduce_has_gpu_kernels():
    assert set(DTYPES) == set(CPU_DTYPES)
    names = set(kernel_names())
    for dtype in DTYPES:
        assert f"nicksim_copy_{dtype}" in names
        for op in OPS:
            assert {f"nicksim_reduce_{op}_{dtype}", f"nicksim_reduce_copy_{op}_{dtype}"} <= names
        avg_step = "postdiv" if dtype.startswith(("int", "uint")) else "premul"
        assert f"nicksim_{avg_step}_{dtype}" in names
    assert len(names) == len(DTYPES) * (2 + 2 * len(OPS))


@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
def test_nvrtc_compiles_every_kernel(arch):
    ptx = compile_ptx(arch)
    assert f".target sm_{arch.split('_')[1]}" in ptx
    entries = set(re.findall(r"\.entry\s+(\w+)\(", ptx))
    assert entries == set(kernel_names())


def test_half_and_bfloat16_compute_in_float_with_one_rounding():
    ptx = compile_ptx("compute_80")
    body = ptx.split(".entry nicksim_reduce_sum_half(")[1].split(".entry")[0]
    assert "cvt.f32.f16" in body and "cvt.rn.f16.f32" in body and "add.f32" in body


def test_a_source_nvrtc_rejects_is_reported_with_its_log():
    with pytest.raises(NvrtcError, match=r"do not compile for compute_80: .*nicksim_kernels\.cu\(1\).*undefined"):
        compile_ptx("compute_80", 'extern "C" __global__ void k() { undefined_name(); }')


def test_without_cupy_or_a_device_the_gpu_path_says_why():
    if importlib.util.find_spec("cupy") is None:
        with pytest.raises(GpuUnavailable, match="CuPy is not installed"):
            gpu_kernels()
    else:
        try:
            module = gpu_kernels()
        except GpuUnavailable as err:
            assert "device" in err.line()
        else:
            assert module.get_function(kernel_names()[0]) is not None
