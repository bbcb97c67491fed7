"""`nicksim perf` and `nicksim alphabeta` as a user runs them."""
from __future__ import annotations

import json

import pytest

from conftest import need_validation, run_cli
from nicksim.job import JobSpec, load_job
from nicksim.params import read_params
from nicksim.studies.perf import perf_rows, sweep_sizes
from nicksim.formats.report import bus_factor, read_results


def test_sweep_sizes_like_nccl_tests():
    assert sweep_sizes(8, 64) == [8, 16, 32, 64]
    assert sweep_sizes(8, 8 << 30) [-1] == 8 << 30 and len(sweep_sizes(8, 8 << 30)) == 31
    assert sweep_sizes(100, 400, step_nbytes=100) == [100, 200, 300, 400]
    assert sweep_sizes(1024, 1024) == [1024]


def test_default_perf_is_the_main_job():
    out = run_cli("perf", "all_reduce")
    assert out.returncode == 0, out.stderr
    tables = read_results(out.stdout)
    assert len(tables) == 1 and tables[0].collective == "all_reduce"
    rows = tables[0].rows
    assert [r.nbytes for r in rows] == [8 << k for k in range(31)]  # 8 B .. 8 GiB
    assert "# Avg bus bandwidth" in out.stdout and "# Collective test concluded: all_reduce_perf" in out.stdout
    for r in rows:
        m = r.out_of_place
        assert m.busbw_gbps == pytest.approx(m.algbw_gbps * bus_factor("all_reduce", 8), abs=0.015)  # both printed to 0.01
    # NVLS on one H100 node: 8 heads x 40 GB/s x 0.85 x 7/8 x 2 = 476 GB/s bus bandwidth at the top.
    assert 460 < rows[-1].out_of_place.busbw_gbps < 476


def test_perf_json_carries_plans_and_the_run():
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.json"
        out = run_cli("perf", "all_gather_perf", "-b", "1K", "-e", "64M", "-f", "4", "-J", str(path))
        assert out.returncode == 0, out.stderr
        doc = json.loads(path.read_text())
    assert doc["engine"] == "nccl" and doc["system"] == "dgx-h100" and doc["nranks"] == 8
    assert doc["nccl_version"] == "2.30"
    assert len(doc["results"]) == 9
    first = doc["results"][0]
    assert set(first["plan"]) == {"algorithm", "protocol", "nchannels", "nthreads"}
    assert first["size"] == 1024 and first["count"] == 1024 // 4 // 8
    assert set(first["out_of_place"]) == {"time", "alg_bw", "bus_bw", "nwrong"}


def test_perf_plan_column_and_tuning_lines():
    out = run_cli("perf", "all_reduce", "-b", "8", "-e", "8M", "-f", "1024", "--plan",
                  "--env", "NCCL_DEBUG=INFO", "--env", "NCCL_DEBUG_SUBSYS=TUNING")
    assert out.returncode == 0, out.stderr
    assert "NCCL INFO 8 Bytes -> Algo 1 proto 0 time 15.000" in out.stdout  # Ring LL: 6.6 + 14 x 0.6
    assert "# Ring/LL 1ch 96t" in out.stdout
    assert "# NVLS/Simple 16ch 640t" in out.stdout


@pytest.mark.parametrize("coll", ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                                  "alltoall", "sendrecv"])
def test_every_collective_runs_on_two_nodes(coll):
    job = load_job(JobSpec(system="dgx-h100", nodes=2), read_params({}))
    rows = perf_rows(job, coll, sweep_sizes(1024, 1 << 30, 32))
    assert len(rows) == 5
    for row, result in rows:
        assert row.out_of_place.time_us > 0
        if coll in ("alltoall", "sendrecv"):
            assert result.estimate == "nicksim-p2p"
    times = [row.out_of_place.time_us for row, _ in rows]
    assert times == sorted(times)


@pytest.mark.parametrize("args, where", [
    (["perf", "all_reduse"], "COLL"),
    (["perf", "all_reduce", "-b", "1G", "-e", "1K"], "-b/-e"),
    (["perf", "all_reduce", "-b", "12Q"], "-b"),
    (["perf", "all_reduce", "-d", "floot"], "-d"),
    (["perf", "all_reduce", "-o", "xor"], "-o"),
    (["perf", "broadcast", "-r", "8"], "-r"),
    (["perf", "all_reduce", "--engine", "fluid"], "--engine"),
    (["perf", "all_reduce", "--engine", "real", "-b", "1G", "-e", "1G"], "NVLS"),
    (["perf", "all_reduce", "--engine", "des", "--set", "cta.bw=3"], "--set"),
    (["perf", "all_reduce", "--engine", "des", "--set", "cta.bw_gbps"], "--set"),
    (["perf", "all_reduce", "--engine", "des", "--set", "cta.bw_gbps=-1"], "--set"),
    (["perf", "all_reduce", "--nccl-version", "2.17"], "--nccl-version"),
    (["perf", "all_reduce", "--compare", "/nonexistent/file"], "/nonexistent/file"),
])
def test_bad_perf_input_is_one_line_and_status_2(args, where):
    out = run_cli(*args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and where in lines[0], out.stderr


def test_perf_beside_the_c01_measurement():
    shared = need_validation()
    topo = shared / "topologies" / "topo_aws_p5_48xl_v1.9.2.xml"
    out = run_cli("perf", "all_reduce", "--system", str(topo), "--gpu", "h100", "--nodes", "2", "--fabric", "efa",
                  "--nccl-version", "2.22", "-b", "8", "-e", "16G", "--compare", str(shared / "cases" / "C01.md"))
    assert out.returncode == 0, out.stderr
    block = out.stdout.split("# nccl vs measured", 1)[1].splitlines()
    rows = [line.split() for line in block if line.startswith("# ") and line.split()[1].isdigit()]
    assert len(rows) == 32  # 8 B .. 16 GiB, every size the log has
    by_size = {int(r[1]): r for r in rows}
    assert float(by_size[536870912][3]) == 2593.9  # the measured time, from the log
    assert any(line.startswith("# band") for line in block)


def test_alphabeta_scenarios_and_custom():
    out = run_cli("alphabeta")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("crossover m* =") == 3
    custom = run_cli("alphabeta", "--p", "8", "--bw", "100", "--lat", "1", "-b", "1K", "-e", "16M")
    assert custom.returncode == 0
    # T_ring = 1.75 m/B + 14a, T_tree = 3 m/B + 6a -> m* = 8a B / 1.25 = 640,000 B at B=100 GB/s, a=1 us.
    assert "crossover m* = 640000 B" in custom.stdout
    bad = run_cli("alphabeta", "--p", "8")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_print_tuning_flag_prints_the_cost_table():
    out = run_cli("perf", "all_reduce", "-b", "1M", "-e", "1M", "--print-tuning")
    assert out.returncode == 0, out.stderr
    assert "  Algorithm   |" in out.stdout and out.stdout.count("    AllReduce |") == 3  # 7 algorithms, 3 per block
    assert len(read_results(out.stdout)[0].rows) == 1
    search = run_cli("search", "dgx-h100", "--print-tuning")
    assert search.returncode == 0 and search.stdout.count("    AllReduce |") == 3


def test_a_pasted_nccl_tests_command_line_runs():
    # C02's harness: all_reduce_perf -b 8 -e 8G -f 2 -g 8 -n 40; C11's: -b 8 -e 2G -f 2 -t 1 -g 1 -c 1 -n 100
    out = run_cli("perf", "all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "8", "-n", "40")
    assert out.returncode == 0, out.stderr
    assert "-t/-g describe nccl-tests' processes (8 GPU(s) each); the job has 8 ranks" in out.stderr
    out = run_cli("perf", "all_reduce", "-b", "8", "-e", "2G", "-f", "2", "-t", "1", "-g", "1", "-c", "1", "-n", "100",
                  "--nodes", "2")
    assert out.returncode == 0 and len(read_results(out.stdout)[0].rows) == 29


def test_perf_compares_against_its_own_output(tmp_path):
    # nicksim's table says nThread 1 nGpus 1 and lists no devices (its ranks are simulated): its first
    # line names the ranks, so a saved run reads back as the job's ranks and compares size by size.
    saved = run_cli("perf", "all_gather", "--system", "dgx-h100", "--nodes", "2", "-b", "1M", "-e", "4M")
    assert saved.returncode == 0, saved.stderr
    (tables,) = read_results(saved.stdout)
    assert (tables.collective, tables.nranks, len(tables.rows)) == ("all_gather", 16, 3)
    (tmp_path / "own.txt").write_text(saved.stdout)
    again = run_cli("perf", "all_gather", "--system", "dgx-h100", "--nodes", "2", "-b", "1M", "-e", "4M",
                    "--compare", str(tmp_path / "own.txt"))
    assert again.returncode == 0, again.stderr
    errors = [line.split()[-1] for line in again.stdout.splitlines() if line.startswith("#") and
              line.split()[1:2] and line.split()[1].isdigit()]
    # the saved table carries the times as printed (two decimals): the error stays under 0.05%
    assert len(errors) == 3 and all(abs(float(e)) < 0.05 for e in errors), again.stdout
