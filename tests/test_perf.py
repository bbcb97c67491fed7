"""`nicksim perf` and `nicksim alphabeta` as a user runs them."""
from __future__ import annotations

import json
import re

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
    own = doc["nicksim"]  # nicksim's fields under their own key; the rest is nccl-tests' schema
    assert own == {"collective": "all_gather", "engine": "nccl", "system": "dgx-h100", "nranks": 8,
                   "nccl_version": "2.30"}
    assert doc["version"] == 3 and doc["nccl_version"] == 23007 and len(doc["config"]["devices"]) == 8
    assert len(doc["results"]) == 9
    first = doc["results"][0]
    assert set(first["nicksim"]["plan"]) == {"algorithm", "protocol", "nchannels", "nthreads"}
    assert first["size"] == 1024 and first["count"] == 1024 // 4 // 8
    assert set(first["out_of_place"]) == {"time", "alg_bw", "bus_bw", "nwrong"}
    assert first["out_of_place"]["nwrong"] is None and doc["config"]["validation"] == 0  # nothing was checked


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
    # -g 8: one process holds the node's 8 GPUs, as nccl-tests prints it (one pid, nGpus 8)
    assert "# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592" in out.stdout
    assert len({line.split()[6] for line in out.stdout.splitlines() if line.startswith("#  Rank")}) == 1
    out = run_cli("perf", "all_reduce", "-b", "8", "-e", "2G", "-f", "2", "-t", "1", "-g", "1", "-c", "1", "-n", "100",
                  "--nodes", "2")
    assert out.returncode == 0 and len(read_results(out.stdout)[0].rows) == 29


def test_perf_compares_against_its_own_output(tmp_path):
    # nicksim's output lists a device line per rank, as nccl-tests does: a saved run reads back as the
    # job's ranks and compares size by size.
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


# --- nccl-tests' text around the table, and its flags ------------------------------------------

NUMBER = re.compile(r" *[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?")


def masked(lines) -> list[str]:
    """Every number, with the blanks that pad it, as one ` N`: what is left is the text."""
    return [NUMBER.sub(" N", line) for line in lines]


def upstream_only(text: str) -> list[str]:
    """nicksim's output with its own text taken out by its rule (formats/report.py): lines starting
    "# nicksim" dropped, a row cut where "  #" starts after nccl-tests' last column."""
    return [line.split("  #", 1)[0] if line[:1] != "#" else line for line in text.split("\n")
            if not line.startswith("# nicksim")]


def expected_v2_19_6(sizes, ranks, bus_ids, name, host="node-00") -> list[str]:
    """An all_reduce_perf run of float sums as nccl-tests 2.19.6 prints it, from its printf formats
    (src/util.cu at v2.19.6: writeDeviceReport, writeResultHeader, writeBenchmarkLinePreamble and
    writeBenchmarkLineBody with reportErrors 0, writeResultFooter, finalizeFooter, writeErrors),
    written here apart from nicksim's code; the numbers are placeholders (0): they are masked."""
    lines = ["# nccl-tests version %s nccl-headers=%d nccl-library=%d" % ("2.19.6", 0, 0),
             "# Collective test starting: %s" % "all_reduce_perf",
             ("# nThread %d nGpus %d minBytes %ld maxBytes %ld step: %ld(%s) warmup iters: %d iters: %d agg iters: %d "
              "validation: %d graph: %d unalign: %d") % (1, 1, 0, 0, 2, "factor", 1, 20, 1, 0, 0, 0),
             "#", "# Using devices"]
    for rank in range(ranks):
        lines.append("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s"
                     % (rank, 0, 0, host, rank, 0, bus_ids[rank], 0, name))
    lines.append("#")
    lines.append("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
                 % ("", "", "", "", ""))
    lines.append("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s"
                 % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                    "busbw", "#wrong", 0, ""))
    lines.append("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s"
                 % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "",
                    0, ""))
    for size in sizes:
        line = "%12li  %12li  %8s  %6s  %6s" % (size, size // 4, "float", "sum", "%6i" % -1)
        lines.append(line + "  %7s  %6s  %6s    N/A" % ("0", "0", "0") * 2)
    lines += ["# %-20s : %d %s" % ("Out of bounds values", 0, "OK"), "# %-20s : %g %s" % ("Avg bus bandwidth", 0, ""),
              "#", "# Collective test concluded: %s" % "all_reduce_perf", "#", ""]
    return lines


def test_perf_output_is_nccl_tests_text_but_for_numbers():
    out = run_cli("perf", "all_reduce", "-b", "1M", "-e", "8M", "--plan")
    assert out.returncode == 0, out.stderr
    bus_ids = [0x1b, 0x43, 0x52, 0x61, 0x9d, 0xc3, 0xd1, 0xdf]  # topologies/dgx-h100.xml
    expected = expected_v2_19_6([1 << 20, 2 << 20, 4 << 20, 8 << 20], 8, bus_ids, "NVIDIA H100 80GB HBM3")
    assert masked(upstream_only(out.stdout)) == masked(expected + [""])  # print's last newline: one more ""
    assert out.stdout.startswith("# nicksim perf all_reduce: engine nccl, dgx-h100, 8 ranks")
    assert "# Ring/LL" in out.stdout or "# NVLS/Simple" in out.stdout  # --plan, after the last column


def test_perf_beside_a_real_nccl_tests_log_differs_in_numbers_and_hosts():
    # xxrjun_cluster01_smoke_N2_G1.log: nccl-tests 2.17.8 all_reduce_perf on 2 nodes x 1 H100, -b 32M -e 512M
    # -w 2 -n 5; its first table's preamble, header and footer, against nicksim's of the same run.
    log = (need_validation() / "raw" / "xxrjun_cluster01_smoke_N2_G1.log").read_text().split("\n")
    out = run_cli("perf", "all_reduce", "--nodes", "2", "--gpus-per-node", "1", "-b", "32M", "-e", "512M", "-w", "2",
                  "-n", "5", "-c", "0", "--nccl-tests-version", "2.17.8", "--nccl-version", "2.29")
    assert out.returncode == 0, out.stderr
    ours = upstream_only(out.stdout)
    hosts = {"cnode3-002": f"{'node-00':>10}", "cnode3-003": f"{'node-01':>10}"}  # both as "%10s" prints them
    real = [line.replace("cnode3-002", hosts["cnode3-002"]).replace("cnode3-003", hosts["cnode3-003"])
            for line in log[:22]]
    real[2] = real[2].replace("validation: 1", "validation: 0")  # -c 0 here: nicksim checks nothing
    assert masked(ours[:11]) == masked(real[:11])  # version .. header
    assert masked(ours[16:22]) == masked(real[16:22])  # footer .. the blank line
    assert ours[0].endswith("nccl-headers=22907 nccl-library=22907")  # 2.29.7, the release nicksim's 2.29 is


def test_older_releases_print_their_own_preamble():
    lines = run_cli("perf", "all_reduce", "-b", "1M", "-e", "1M", "--nccl-tests-version", "2.13.0").stdout.split("\n")
    lines = [line for line in lines if not line.startswith("# nicksim")]
    assert lines[0].startswith("# nThread 1 nGpus 1") and lines[0].endswith("graph: 0")  # no version line yet
    assert lines[3] == "#   Rank  0 Pid   4100 on    node-00 device  0 [0x1b] NVIDIA H100 80GB HBM3"
    assert lines[-3:] == ["# Avg bus bandwidth    : 65.5027 ", "#", ""]  # nothing after the footer's "#"
    v2_16 = run_cli("perf", "all_reduce", "-b", "1M", "-e", "1M", "--nccl-tests-version", "2.16.7").stdout
    assert "#  Rank  0 Group  0 Pid   4100 on    node-00 device  0 [0000:1b:00]" in v2_16
    assert v2_16.endswith("# Collective test concluded: all_reduce_perf\n\n")  # then the empty NCCL error
    assert "# nccl-tests version" not in v2_16 and "# Collective test starting: all_reduce_perf" in v2_16


def test_every_rank_has_a_device_line():
    out = run_cli("perf", "all_reduce", "--nodes", "128", "-b", "1M", "-e", "1M")
    assert out.returncode == 0, out.stderr
    devices = [line for line in out.stdout.split("\n") if line.startswith("#  Rank")]
    assert len(devices) == 1024 and devices[-1].startswith("#  Rank 1023 Group  0 Pid   5123 on   node-127 device  7")
    assert read_results(out.stdout)[0].nranks == 1024


def test_sizes_beyond_the_gpus_memory_are_dropped_as_nccl_tests_drops_them():
    out = run_cli("perf", "all_reduce", "-b", "16G", "-e", "64G")
    # H100 80GB HBM3 (84929478656 bytes): (that - 4 GiB reserve - 1 GiB) / 3 buffers (-c 1 asked)
    assert "#\n# Reducing maxBytes to 26520256512 due to memory limitation\n#\n" in out.stdout
    assert [r.nbytes for r in read_results(out.stdout)[0].rows] == [16 << 30]
    old = run_cli("perf", "all_reduce", "-b", "16G", "-e", "64G", "--nccl-tests-version", "2.16.5", "-c", "1")
    assert "# Reducing maxBytes to 27951912277 due to memory limitation" in old.stdout  # NVIDIA/nccl-tests#322
    none = run_cli("perf", "all_reduce", "-b", "32G", "-e", "64G", "--nccl-tests-version", "2.16.5")
    assert none.returncode == 0 and read_results(none.stdout)[0].rows == ()  # minBytes stays above: no size


def test_all_types_reductions_and_roots_loop_as_nccl_tests_loops():
    out = run_cli("perf", "reduce", "-b", "1K", "-e", "2K", "-d", "all", "-o", "all", "-r", "all", "--nodes", "1",
                  "--gpus-per-node", "2")
    assert out.returncode == 0, out.stderr
    rows = read_results(out.stdout)[0].rows
    types = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16", "f8e4m3",
             "f8e5m2"]
    ops = ["sum", "prod", "max", "min", "avg"]  # mulsum is not modelled: said, and left out
    assert [(r.dtype, r.redop, r.root, r.nbytes) for r in rows] == \
        [(t, o, root, size) for t in types for o in ops for root in (0, 1) for size in (1024, 2048)]
    assert "# nicksim: -o all: mulsum" in out.stdout
    gather = run_cli("perf", "all_gather", "-b", "1K", "-e", "1K", "-o", "all", "-r", "all")
    assert [(r.redop, r.root) for r in read_results(gather.stdout)[0].rows] == [("none", -1)]  # neither loops
    old = run_cli("perf", "all_reduce", "-b", "1K", "-e", "1K", "-d", "all", "--nccl-tests-version", "2.14.1")
    assert read_results(old.stdout)[0].rows[-1].dtype == "bfloat16"  # fp8 came in 2.15.0


def test_reporting_flags_change_the_text_as_in_nccl_tests():
    out = run_cli("perf", "all_reduce", "-b", "1K", "-e", "2K", "-S", "1", "-I", "1", "-K", "2", "-N", "2", "-z", "1",
                  "-p", "1", "-u", "3", "-G", "0", "-M", "1")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "unalign: 3" in text and "# Blocking Enabled: wait and barrier after each inner iteration (-m) \n" in text
    assert "# Per-Iteration Report: CUDA event timing; i_* uses max over process rows; summary skips first 2 " \
           "iterations \n" in text and "# Parallel Init Enabled: threads call into NcclInitRank concurrently \n" in text
    assert "    i_min    i_max    i_p99    i_cv%" in text and text.count("           timestamp") == 1
    rows = [line for line in text.split("\n") if line[:1] == " "]
    assert len(rows) == 4 and rows[0] == rows[2][:-19] + rows[0][-19:]  # -N 2: the sizes again
    assert re.search(r" 20\d\d-\d\d-\d\d \d\d:\d\d:\d\d$", rows[0])
    assert "# nicksim: -M 1: GPU memory usage is not modelled" in text
    (table,) = read_results(text)
    assert len(table.rows) == 4 and table.rows[0].out_of_place.nwrong is None


@pytest.mark.parametrize("args, where", [
    (["-C", "1"], "-C"), (["-D", "1"], "-D"), (["-S", "1", "--nccl-tests-version", "2.17.5"], "-S"),
    (["-J", "r.json", "--nccl-tests-version", "2.17.2"], "-J"), (["-K", "1"], "-K"), (["-I", "1", "-K", "20"], "-K"),
    (["-g", "3"], "-t/-g"),
    (["-z", "3", "--nccl-tests-version", "2.19.1"], "-z"), (["-I", "1", "-G", "2"], "-I"), (["-z", "4"], "-z"),
    (["--nccl-tests-version", "2.12.0"], "--nccl-tests-version"), (["-N", "0"], "-N"), (["-r", "some"], "-r"),
    (["-u", "1", "--nccl-tests-version", "2.17.9"], "-u"), (["-d", "mulsum"], "-d"),
])
def test_nccl_tests_flags_that_cannot_be_honoured_are_one_line(args, where):
    out = run_cli("perf", "all_reduce", "-b", "1K", "-e", "1K", *args)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and where in lines[0], out.stderr


def test_json_output_never_overwrites(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("mine")
    first = run_cli("perf", "all_reduce", "-b", "1K", "-e", "2K", "-J", str(path))
    second = run_cli("perf", "all_reduce", "-b", "1K", "-e", "2K", "--output_file", str(path))
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert path.read_text() == "mine"
    assert f"# Writing JSON output to {path}.0\n" in first.stdout and f"{path}.1\n" in second.stdout
    doc = json.loads((tmp_path / "r.json.1").read_text())
    assert list(doc) == ["version", "start_time", "args", "env", "nccl_version", "config", "results", "out_of_bounds",
                         "average_bus_bandwidth", "errors", "end_time", "nicksim"]
    assert doc["args"][:3] == ["nicksim", "perf", "all_reduce"] and doc["config"]["step_factor"] == 2
    assert doc["results"][0]["root"] == "    -1" and doc["results"][0]["experiment_name"] == ""
    (table,) = read_results((tmp_path / "r.json.1").read_text())
    assert (table.collective, table.nranks, len(table.rows)) == ("all_reduce", 8, 2)
    assert table.rows[0].plan is not None
