"""numba is optional: the compiled functions give the answers their plain Python code gives, and
without numba the package imports and runs the DES with the same output."""
import subprocess
import sys

import numpy as np
import pytest

from nicksim.model import flows, network
from nicksim.model._jit import COMPILED

from conftest import REPO

PERF = ["perf", "all_reduce", "-b", "1M", "-e", "16M", "-f", "4", "--engine", "des", "--nodes", "2"]


def _compiled(function):
    """The numba dispatcher's plain Python function (the test needs numba to compare them)."""
    if not COMPILED:
        pytest.skip("numba is not installed: there is only the Python code")
    return function.py_func


def _filling_inputs(rng):
    """Random transfers over random links, laid out as fair_rates_flat lays them out."""
    n_links, n = int(rng.integers(1, 12)), int(rng.integers(1, 30))
    sizes = rng.integers(0, 5, n)
    link = rng.integers(0, n_links, int(sizes.sum()))
    times = rng.integers(1, 3, link.size).astype(float)
    capacity = rng.choice([0.0, 12.5, 50.0, 370.8], n_links)
    skip = rng.random(n) < 0.1
    return link, times, sizes, capacity, skip


def _fill(function, link, times, sizes, capacity, skip):
    work = flows.Workspace()
    work.fit(sizes.size, link.size)
    scratch = np.full(capacity.size, -1, dtype=np.int64)
    return function(link, times, sizes, capacity, skip, scratch, work.pairs, work.links, work.link_f, work.firsts,
                    work.active)


def test_progressive_filling_compiled_and_in_python_agree():
    python = _compiled(flows._progressive_filling)
    rng = np.random.default_rng(7)
    for _ in range(200):
        given = _filling_inputs(rng)
        rates, busy = _fill(flows._progressive_filling, *given)
        py_rates, py_busy = _fill(python, *given)
        assert rates.tolist() == py_rates.tolist()  # bit for bit, infinities included
        assert busy.tolist() == py_busy.tolist()


def test_arrivals_and_first_wait_compiled_and_in_python_agree():
    first_wait, arrivals = _compiled(network._first_wait), _compiled(network._arrivals)
    rng = np.random.default_rng(11)
    for _ in range(200):
        n = int(rng.integers(0, 20))
        rate = rng.choice([0.0, 1e-3, 25.0, 370.8], n)
        left = rng.choice([0.0, 1e-9, 1.0, 4096.0, 1e6], n)
        head = rng.choice([-np.inf, 0.0, 1.0, 2048.0], n)
        assert network._first_wait(rate, left, head) == first_wait(rate, left, head)
        head_c, head_p = head.copy(), head.copy()
        got = network._arrivals(rate, left, head_c)
        want = arrivals(rate, left, head_p)
        assert [a.tolist() for a in got] == [a.tolist() for a in want]
        assert head_c.tolist() == head_p.tolist()  # the first steps found are marked the same way


def test_without_numba_the_des_runs_and_prints_what_it_prints_with_numba():
    code = ("import sys; sys.modules['numba'] = None\n"
            "from nicksim.model import _jit, flows\n"
            "assert not _jit.COMPILED and not hasattr(flows._progressive_filling, 'py_func')\n"
            "from nicksim.cli import main\n"
            f"sys.exit(main({PERF!r}))")
    without = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert without.returncode == 0, without.stderr
    with_numba = subprocess.run([sys.executable, "-m", "nicksim", *PERF], capture_output=True, text=True, cwd=REPO,
                                timeout=300)
    assert with_numba.returncode == 0, with_numba.stderr
    assert without.stdout == with_numba.stdout
    assert "Avg bus bandwidth" in without.stdout
