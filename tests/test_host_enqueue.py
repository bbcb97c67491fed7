"""nccl-tests' timed loop with one thread for several GPUs (-g): an iteration takes the longer of the
GPUs' time and the thread's enqueue of the call on each of its GPUs (constants/host.py)."""
import pytest

from conftest import run_cli
from nicksim.api import load_job
from nicksim.constants.host import HOST_CALL_US
from nicksim.job import JobSpec
from nicksim.params import read_params
from nicksim.studies.perf import host_enqueue_us, perf_rows
from nicksim.studies.validate import load_case, run_case

SIZES = [8, 1 << 30]


@pytest.fixture(scope="module")
def job():
    return load_job(JobSpec(system="dgx-h100"), read_params({}, []))


def _times(job, engine, gpus_per_thread):
    return [row.out_of_place.time_us for row, _ in perf_rows(job, "all_reduce", SIZES, engine=engine,
                                                              gpus_per_thread=gpus_per_thread)]


def test_the_enqueue_grows_with_the_gpus_one_thread_drives():
    assert host_enqueue_us(1) == HOST_CALL_US
    assert host_enqueue_us(8) == 8 * host_enqueue_us(1)


@pytest.mark.parametrize("engine", ["nccl", "des"])
def test_small_calls_wait_for_the_host_and_large_ones_for_the_gpus(job, engine):
    alone = _times(job, engine, 1)
    eight = _times(job, engine, 8)
    # One thread per GPU enqueues faster than any call runs: the GPUs set the pace at every size.
    assert alone[0] > host_enqueue_us(1)
    # One thread for eight GPUs: 8 B waits for the eight enqueues, more than the GPUs take for it.
    assert alone[0] < host_enqueue_us(8)
    assert eight[0] == pytest.approx(host_enqueue_us(8))
    # 1 GiB takes far longer on the GPUs than its enqueue: -g changes nothing.
    assert eight[1] == pytest.approx(alone[1])


def test_perf_minus_g_prints_the_host_bound(tmp_path):
    rows = {}
    for g in ("1", "8"):
        out = run_cli("perf", "all_reduce", "--system", "dgx-h100", "-b", "8", "-e", "8", "-g", g)
        assert out.returncode == 0, out.stderr
        line = next(x for x in out.stdout.splitlines() if x.strip().startswith("8 "))
        rows[g] = float(line.split()[5])
    assert rows["1"] < host_enqueue_us(8) and rows["8"] == pytest.approx(host_enqueue_us(8), abs=0.01)


ROWS = """# collective=all_reduce nranks=8 dtype=float redop=sum
size_bytes,time_us,algbw_GBps,busbw_GBps
1024,40.0,0.0256,0.0448
"""


def _case(folder, name, head=""):
    path = folder / f"{name}.toml"
    path.write_text(f'{head}collective = "all_reduce"\nrows = """\n{ROWS}"""\n[system]\nsystem = "dgx-h100"\n')
    return load_case(path)


def test_a_case_says_how_many_gpus_a_thread_drove(tmp_path):
    one = run_case(_case(tmp_path, "one"), "nccl").points[0]
    eight = run_case(_case(tmp_path, "eight", "ngpus = 8\n"), "nccl").points[0]
    # Measured at 40 us: with -g 8 the host's 8 x 5 us is the prediction; with -g 1 the GPUs' ~15 us.
    assert eight.error_pct == pytest.approx(0.0, abs=0.5)
    assert one.error_pct > 100


def test_a_thread_cannot_drive_gpus_the_node_does_not_split_into(tmp_path):
    result = run_case(_case(tmp_path, "three", "ngpus = 3\n"), "nccl")
    assert "ngpus = 3" in result.error and "8 GPUs" in result.error


PASTED = """# nThread 1 nGpus 8 minBytes 1024 maxBytes 1024 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           256     float     sum      -1    40.00    0.03    0.04      0    40.00    0.03    0.04      0
"""


def test_nccl_tests_output_says_its_gpus_per_thread(tmp_path):
    from nicksim.formats.report import read_results
    (table,) = read_results(PASTED)
    assert table.ngpus == 8
    (table,) = read_results(PASTED.replace("nGpus 8", "nGpus 1"))
    assert table.ngpus == 1


def test_a_case_of_pasted_output_takes_its_gpus_per_thread_from_it(tmp_path):
    path = tmp_path / "pasted.toml"
    path.write_text(f'collective = "all_reduce"\nrows = """\n{PASTED}"""\n[system]\nsystem = "dgx-h100"\n')
    point = run_case(load_case(path), "nccl").points[0]
    assert point.predicted_busbw_gbps == pytest.approx(1024 * 1.75 / host_enqueue_us(8) / 1e3, rel=1e-3)


def test_calibration_prices_a_minus_g_8_run_as_nccl_tests_times_it(tmp_path, job):
    from nicksim.studies.fit import _observations, Holdout
    from nicksim.studies.measured import read_measured
    log = tmp_path / "g8.log"
    log.write_text(PASTED)
    (run,) = read_measured([str(log)], "all_reduce")
    assert run.ngpus == 8
    (obs,) = _observations([run], [job], Holdout(frozenset(), False, frozenset(), frozenset(), frozenset()), 0,
                           1 << 40)
    assert obs.floor_us == host_enqueue_us(8)
