"""The CPU kernels' arithmetic: NCCL's operators on every type it reduces (enqueue.cc hostToDevRedOp)."""
from __future__ import annotations

import numpy as np
import pytest

from nicksim.errors import UsageError
from nicksim.realhw.kernels import DTYPES, combine, copy_into, from_float, post_op, pre_op, to_float


def arr(dtype, values):
    if dtype == "bfloat16":
        return from_float(np.array(values, dtype=np.float32))
    return np.array(values, dtype=DTYPES[dtype])


def test_integers_wrap_as_the_gpu_does():
    assert combine(arr("int8", [127, -128]), arr("int8", [1, -1]), "sum", "int8").tolist() == [-128, 127]
    assert combine(arr("uint8", [200]), arr("uint8", [100]), "sum", "uint8").tolist() == [44]
    assert combine(arr("int32", [1 << 20]), arr("int32", [1 << 12]), "prod", "int32").tolist() == [0]
    assert combine(arr("uint64", [2 ** 64 - 1]), arr("uint64", [2]), "sum", "uint64").tolist() == [1]


def test_min_and_max_follow_the_type():
    assert combine(arr("int8", [-1, 5]), arr("int8", [3, -7]), "max", "int8").tolist() == [3, 5]
    assert combine(arr("uint8", [255, 5]), arr("uint8", [3, 7]), "min", "uint8").tolist() == [3, 5]
    # fmaxf / fminf: a number wins over a NaN.
    got = combine(arr("float", [np.nan, 2.0]), arr("float", [1.0, np.nan]), "max", "float")
    assert got.tolist() == [1.0, 2.0]
    got = combine(arr("bfloat16", [np.nan]), arr("bfloat16", [-3.0]), "min", "bfloat16")
    assert to_float(got).tolist() == [-3.0]


def test_bfloat16_rounds_to_nearest_even():
    # 1 + 2^-8 lies halfway between 1 and the next bfloat16 (1 + 2^-7): ties go to the even one, 1.
    # (1 + 2^-7) + 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: to 1 + 2^-6, whose last bit is 0.
    assert from_float(np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8], np.float32)).tolist() == [0x3F80, 0x3F80, 0x3F82]
    one, step = arr("bfloat16", [1.0, 1 + 2 ** -7]), arr("bfloat16", [2 ** -8, 2 ** -8])
    assert to_float(combine(one, step, "sum", "bfloat16")).tolist() == [1.0, 1 + 2 ** -6]
    assert from_float(np.array([np.inf, np.nan, -0.0], np.float32)).tolist() == [0x7F80, 0x7FC0, 0x8000]


def test_float_avg_multiplies_each_input_first():
    # PreMulSum: half(1/3) is 0.33325; 3 x 0.33325 = 1 - 2^-12, halfway to 1.0, rounds to 1.0;
    # three such inputs sum to exactly 3.0. bfloat16(1/3) is 0.33398; 3 x that rounds to 1.0 too.
    for dtype in ("half", "bfloat16"):
        x = pre_op(arr(dtype, [3.0]), "avg", dtype, 3)
        total = combine(combine(x, x, "avg", dtype), x, "avg", dtype)
        value = to_float(total) if dtype == "bfloat16" else total
        assert value.tolist() == [3.0] and post_op(total, "avg", dtype, 3) is total
    # float: 1 and 2 averaged over two ranks is 0.5 + 1.0.
    halves = [pre_op(arr("float", [v]), "avg", "float", 2) for v in (1.0, 2.0)]
    assert combine(*halves, "avg", "float").tolist() == [1.5]


def test_integer_avg_divides_the_sum_truncating_towards_zero():
    # SumPostDiv: C integer division.
    sums = arr("int8", [-7, 7, -8, 8, -128, 127])
    assert post_op(sums, "avg", "int8", 4).tolist() == [-1, 1, -2, 2, -32, 31]
    assert post_op(arr("uint32", [7, 2 ** 32 - 1]), "avg", "uint32", 2).tolist() == [3, 2 ** 31 - 1]
    low = np.iinfo(np.int64).min
    assert post_op(arr("int64", [low]), "avg", "int64", 3).tolist() == [-(-low // 3)]
    assert pre_op(arr("int32", [5]), "avg", "int32", 4).tolist() == [5]  # integers are not pre-multiplied


def test_other_operators_have_no_pre_or_post_step():
    x = arr("float", [2.5])
    for op in ("sum", "prod", "max", "min"):
        assert pre_op(x, op, "float", 8) is x and post_op(x, op, "float", 8) is x


def test_copy_keeps_the_bits():
    src, dst = arr("bfloat16", [1.5, -2.0]), np.zeros(2, np.uint16)
    copy_into(dst, src)
    assert dst.tolist() == src.tolist()


@pytest.mark.parametrize("dtype, op", [("float128", "sum"), ("float", "median")])
def test_unknown_types_and_operators_are_refused(dtype, op):
    with pytest.raises(UsageError, match="valid:"):
        combine(np.zeros(1), np.zeros(1), op, dtype)
