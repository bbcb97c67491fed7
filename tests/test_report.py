"""nccl-tests' tables written and read: numbers, rows, headers and footers as nccl-tests prints
them (checked line for line against real logs in ../shared/validation/raw), bus bandwidth and
size conventions, JSON, and the CSV blocks of the validation cases."""
import json
import math
import re

import pytest

from conftest import need_validation
from nicksim.errors import UsageError
from nicksim.formats.report import (COLLECTIVES, IterStats, Measurement, ResultRow, RankDevice, RunSetup, bus_factor,
                                    claim_json_path, closing_lines, collective_name, device_line, flag_release,
                                    format_number, format_row, format_table, measurement,
                                    memory_max_nbytes, nccl_version_code, preamble, read_results, reduced_sizes,
                                    result_row, results_json, size_and_count, table_header, nccl_tests_json)

TAG = re.compile(r"\[\d+,\d+\]<stdout>:")

# Header lines copied from the logs: nccl-tests 2.17.8 (xxrjun_cluster01_*) and the v2.13-v2.16
# layout (aws_p5_KeitaW_*, after removing the mpirun tags).
HEADER_CURRENT = [
    "#",
    "#                                                              out-of-place                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong ",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         ",
]
HEADER_V2_13 = [
    "#",
    "#                                                              out-of-place                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
]

# Rows copied from the logs, with the numbers they print. The times and bandwidths are the
# printed (rounded) ones, so formatting them must give the printed line back exactly.
LOGGED_ROWS = [
    # xxrjun_cluster01_nccl_N1_G8_cnode3-002.log, nccl-tests 2.17.8, all_reduce line 20 and 27
    ("2.17.8", "    33554432       4194304    double     sum      -1   182.87  183.49  321.10       0   182.88  183.48  321.08       0",
     ResultRow(33554432, 4194304, "double", "sum", -1, Measurement(182.87, 183.49, 321.10, 0),
               Measurement(182.88, 183.48, 321.08, 0))),
    ("2.17.8", "  4294967296     536870912    double     sum      -1  15668.1  274.12  479.71       0  15661.3  274.24  479.92       0",
     ResultRow(4294967296, 536870912, "double", "sum", -1, Measurement(15668.1, 274.12, 479.71, 0),
               Measurement(15661.3, 274.24, 479.92, 0))),
    # same log, all_gather (per-rank count, redop none)
    ("2.17.8", "    33554432        524288    double    none      -1   123.44  271.83  237.85       0   120.61  278.20  243.43       0",
     ResultRow(33554432, 524288, "double", "none", -1, Measurement(123.44, 271.83, 237.85, 0),
               Measurement(120.61, 278.20, 243.43, 0))),
    # xxrjun_cluster01_nccl_N10_G8.log line 421: alltoall, a 6-digit time, in-place not checked
    ("2.17.8", "  8589934080      13421772    double    none      -1   167847   51.18   50.54       0   167426   51.31   50.66    N/A",
     ResultRow(8589934080, 13421772, "double", "none", -1, Measurement(167847, 51.18, 50.54, 0),
               Measurement(167426, 51.31, 50.66, None))),
    # xxrjun_cluster01_smoke_N2_G1.log line 34: sendrecv prints its reduction
    ("2.17.8", "    33554432       4194304    double     sum      -1   838.43   40.02   40.02       0   787.24   42.62   42.62    N/A",
     ResultRow(33554432, 4194304, "double", "sum", -1, Measurement(838.43, 40.02, 40.02, 0),
               Measurement(787.24, 42.62, 42.62, None))),
    # aws_p5_KeitaW_nccl-test-output-v2.22.3-1.log lines 2905, 2930, 2934 (v2.13-v2.16 layout)
    ("2.14.0", "           8             2     float     sum      -1    85.70    0.00    0.00      0    74.97    0.00    0.00      0",
     ResultRow(8, 2, "float", "sum", -1, Measurement(85.70, 0.00, 0.00, 0), Measurement(74.97, 0.00, 0.00, 0))),
    ("2.14.0", "   268435456      67108864     float     sum      -1   1469.4  182.68  342.52      0   1461.3  183.70  344.44      0",
     ResultRow(268435456, 67108864, "float", "sum", -1, Measurement(1469.4, 182.68, 342.52, 0),
               Measurement(1461.3, 183.70, 344.44, 0))),
    ("2.14.0", "  4294967296    1073741824     float     sum      -1    17232  249.24  467.32      0    17261  248.83  466.55      0",
     ResultRow(4294967296, 1073741824, "float", "sum", -1, Measurement(17232, 249.24, 467.32, 0),
               Measurement(17261, 248.83, 466.55, 0))),
]

# Each raw log: the nccl-tests layout it is in, the all_reduce-only logs' collective (they do not
# name it), and per table (collective, nranks, rows, footer avg busbw, a named row:
# (index, size, count, out-of-place time/algbw/busbw, in-place time, in-place #wrong)).
RAW_LOGS = {
    "aws_p5_KeitaW_nccl-test-output-v2.20.3-1.log": ("2.14.0", "all_reduce", [
        (None, 16, 32, 124.196, (0, 8, 2, 85.14, 0.00, 0.00, 62.82, 0))]),
    "aws_p5_KeitaW_nccl-test-output-v2.22.3-1.log": ("2.14.0", "all_reduce", [
        (None, 16, 32, 124.584, (26, 536870912, 134217728, 2593.9, 206.97, 388.08, 2567.0, 0))]),
    "aws_p5_KeitaW_nccl-test-output-v2.22.3-1-with-tuner.log": ("2.14.0", "all_reduce", [
        (None, 16, 32, 124.343, (31, 17179869184, 4294967296, 66154, 259.69, 486.93, 66064, 0))]),
    "blog_chlc_rtx4090x8_P2Punlocked.TRANSCRIBED.out": ("2.14.0", "all_reduce", [
        (None, 8, 25, 6.11168, (24, 134217728, 33554432, 11382, 11.79, 20.64, 11380, 0))]),
    "blog_chlc_rtx4090x8_noP2P.TRANSCRIBED.out": ("2.14.0", "all_reduce", [
        (None, 8, 25, 4.85265, (24, 134217728, 33554432, 16253, 8.26, 14.45, 16227, 0))]),
    "unknownrepo_findstring33201577724_a100x8_thanos.TRANSCRIBED.out": ("2.14.0", "all_reduce", [
        (None, 8, 30, 66.2058, (29, 4294967296, 1073741824, 32336, 132.82, 232.44, 32455, 0))]),
    "xxrjun_cluster01_nccl_N1_G8_cnode3-002.log": ("2.17.8", None, [
        ("all_reduce", 8, 10, 437.957, (9, 17179869184, 2147483648, 62340.7, 275.58, 482.27, 62359.0, 0)),
        ("all_gather", 8, 10, 328.618, (0, 33554432, 524288, 123.44, 271.83, 237.85, 120.61, 0)),
        ("reduce_scatter", 8, 10, 330.721, (0, 33554432, 524288, 111.83, 300.05, 262.55, 111.63, 0)),
        ("alltoall", 8, 10, 313.838, (9, 17179869184, 268435456, 43193.3, 397.74, 348.03, 43289.4, None)),
        ("sendrecv", 8, 10, 279.874, (7, 4294967296, 536870912, 11746.6, 365.63, 365.63, 11771.9, None))]),
    "xxrjun_cluster01_nccl_N10_G1.log": ("2.17.8", None, [
        ("all_reduce", 10, 10, 47.8165, (0, 33554432, 4194304, 1405.25, 23.88, 42.98, 1406.35, 0)),
        ("all_gather", 10, 10, 46.7949, (0, 33554400, 419430, 721.94, 46.48, 41.83, 687.61, 0)),
        ("reduce_scatter", 10, 10, 47.1335, (0, 33554400, 419430, 710.67, 47.21, 42.49, 684.49, 0)),
        ("alltoall", 10, 10, 43.6048, (9, 17179869120, 214748364, 346210, 49.62, 44.66, 345521, None)),
        ("sendrecv", 10, 10, 24.7624, (9, 17179869184, 2147483648, 691104, 24.86, 24.86, 690729, None))]),
    "xxrjun_cluster01_nccl_N10_G8.log": ("2.17.8", None, [
        ("all_reduce", 80, 10, 265.631, (9, 17179869184, 2147483648, 105854, 162.30, 320.54, 105146, 0)),
        ("all_gather", 80, 10, 218.677, (0, 33553920, 52428, 682.20, 49.19, 48.57, 672.05, 0)),
        ("reduce_scatter", 80, 10, 216.683, (9, 17179868160, 26843544, 52458.7, 327.49, 323.40, 52777.8, 0)),
        ("alltoall", 80, 10, 47.1472, (8, 8589934080, 13421772, 167847, 51.18, 50.54, 167426, None)),
        ("sendrecv", 80, 10, 15.1671, (0, 33554432, 4194304, 2271.70, 14.77, 14.77, 2290.00, None))]),
    "xxrjun_cluster01_smoke_N2_G1.log": ("2.17.8", None, [
        ("all_reduce", 2, 5, 43.6076, (4, 536870912, 67108864, 11591.0, 46.32, 46.32, 11556.7, 0)),
        ("sendrecv", 2, 5, 42.9182, (0, 33554432, 4194304, 838.43, 40.02, 40.02, 787.24, None))]),
}


def ver(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def raw(name: str) -> str:
    return (need_validation() / "raw" / name).read_text(errors="replace")


# --- names, factors, sizes -------------------------------------------------------------------

def test_collective_names():
    assert COLLECTIVES == ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall",
                           "sendrecv")
    for text in ("all_reduce", "all_reduce_perf", "./build/all_reduce_perf", "AllReduce", " ALL_REDUCE "):
        assert collective_name(text) == "all_reduce"
    assert collective_name("AllToAll") == "alltoall"
    assert collective_name("sendrecv_perf") == "sendrecv"
    with pytest.raises(UsageError) as err:
        collective_name("allreduce2")
    line = err.value.line()
    assert "allreduce2" in line and all(name in line for name in COLLECTIVES) and "\n" not in line


def test_bus_factors_follow_performance_md():
    assert bus_factor("all_reduce", 8) == 1.75
    assert bus_factor("all_reduce", 1) == 0.0
    assert bus_factor("all_gather", 8) == bus_factor("reduce_scatter", 8) == bus_factor("alltoall", 8) == 0.875
    assert bus_factor("alltoall", 80) == 79 / 80
    for name in ("broadcast", "reduce", "sendrecv"):
        assert bus_factor(name, 80) == 1.0
    with pytest.raises(UsageError):
        bus_factor("all_reduce", 0)


def test_size_and_count_per_collective():
    # whole-buffer collectives: count = size / type size
    assert size_and_count("all_reduce", 33554432, "double", 8) == (33554432, 4194304)
    assert size_and_count("sendrecv", 33554432, "double", 80) == (33554432, 4194304)
    assert size_and_count("broadcast", 10, "float", 2) == (8, 2)
    # per-rank count, rounded down to 16 bytes' worth of elements (N10 logs: 33554400 / 33553920)
    assert size_and_count("all_gather", 33554432, "double", 8) == (33554432, 524288)
    assert size_and_count("all_gather", 33554432, "double", 10) == (33554400, 419430)
    assert size_and_count("reduce_scatter", 33554432, "double", 80) == (33553920, 52428)
    assert size_and_count("alltoall", 17179869184, "double", 80) == (17179868160, 26843544)
    assert size_and_count("alltoall", 64, "float", 16) == (0, 0)
    with pytest.raises(UsageError):
        size_and_count("all_reduce", 64, "float128", 2)


def test_measurement_and_result_row():
    m = measurement("all_reduce", 8, 33554432, 182.87, nwrong=0)  # N1_G8 log line 20: 183.49, 321.10
    assert m.algbw_gbps == 33554432 / 1e9 / (182.87 / 1e6)
    assert m.busbw_gbps == m.algbw_gbps * 1.75
    assert (round(m.algbw_gbps, 2), round(m.busbw_gbps, 2), m.nwrong) == (183.49, 321.10, 0)
    row = result_row("broadcast", 2, 1024, "float", 11.0, 12.0, root=0)
    assert (row.nbytes, row.count, row.redop, row.root) == (1024, 256, "none", 0)
    row = result_row("sendrecv", 2, 1024, "float", 11.0)
    assert (row.redop, row.root, row.in_place) == ("sum", -1, None)
    row = result_row("all_gather", 8, 1 << 20, "half", 10.0, 10.0, nwrong=0, plan={"algorithm": "RING"})
    assert (row.nbytes, row.count, row.plan) == (1 << 20, 65536, {"algorithm": "RING"})
    for bad in (0, -1.0, math.nan, math.inf):
        with pytest.raises(UsageError):
            measurement("all_reduce", 8, 1024, bad)


# --- numbers and lines -----------------------------------------------------------------------

def test_number_widths():
    assert format_number(182.87, 7) == " 182.87"
    assert format_number(15668.1, 7) == "15668.1"
    assert format_number(167847, 7) == " 167847"
    assert format_number(0.0, 6) == "  0.00"
    assert format_number(1234.5, 6) == "1234.5"
    assert format_number(1234567.0, 6) == " 1e+06"
    assert format_number(1.5e9, 7) == "1.5e+09"
    # 2.19.6+ keeps what fits; 2.17.3-2.19.5 counted integer digits and overflowed on round-up
    assert format_number(9999.996, 7) == "10000.0"
    assert format_number(9999.996, 7, "2.17.8") == "10000.00"
    assert format_number(999.999, 6) == "1000.0"
    assert format_number(999.999, 6, "2.17.8") == "1000.00"
    # 2.19.6 cuts the exponent form to the width (snprintf with width + 1)
    assert format_number(1e100, 7) == "1.0e+10"
    assert format_number(1e100, 7, "2.17.8") == "1.0e+100"
    with pytest.raises(UsageError):
        format_number(1.0, 7, "2.12.0")


@pytest.mark.parametrize("version, line, row", LOGGED_ROWS)
def test_rows_print_as_the_logs(version, line, row):
    assert format_row(row, version) == line
    if ver(version) >= (2, 17, 3):
        assert format_row(row) == line  # the newest rule agrees away from round-up edges


def test_header_and_footer_as_printed():
    row = ResultRow(8, 2, "float", "sum", -1, Measurement(10.0, 0.0, 1.0, 0), Measurement(10.0, 0.0, 2.0, 0))
    lines = format_table("all_reduce_perf", [row])
    assert lines[:4] == HEADER_CURRENT
    assert lines[5:] == ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 1.5 ", "#",
                         "# Collective test concluded: all_reduce_perf"]
    old = format_table("all_reduce", [row], version="2.14.0")
    assert old[:4] == HEADER_V2_13 and old[-1] == "#"
    assert format_table("all_reduce", [row], version="2.16.6")[-1] == "#"
    assert format_table("all_reduce", [row], version="2.16.7")[-1] == "# Collective test concluded: all_reduce_perf"
    assert format_table("reduce", [])[-3] == "# Avg bus bandwidth    : -nan "


def test_footer_counts_and_averages():
    rows = [ResultRow(8, 2, "float", "sum", -1, Measurement(10.0, 1.0, 3.0, 2), Measurement(10.0, 1.0, 4.0, 0)),
            ResultRow(16, 4, "float", "sum", -1, Measurement(10.0, 1.0, 5.0, None), None)]
    lines = format_table("all_reduce", rows, threads=16)
    assert lines[-4] == "# Out of bounds values : 16 FAILED"
    assert lines[-3] == "# Avg bus bandwidth    : 4 "
    assert lines[-5].endswith("    N/A") and len(lines[-5]) < len(lines[-6])


def test_rows_need_every_column():
    with pytest.raises(UsageError) as err:
        format_table("all_reduce", [ResultRow(8, None, "float", "sum", -1, Measurement(1.0, 1.0, 1.0), None)])
    assert "row 0" in err.value.line() and "count" in err.value.line()


# --- real logs -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(RAW_LOGS))
def test_raw_logs_read(name):
    version, collective, expected = RAW_LOGS[name]
    tables = read_results(raw(name), name)
    assert [(t.collective, t.nranks, len(t.rows), t.avg_busbw_gbps) for t in tables] == \
        [(c, n, rows, avg) for c, n, rows, avg, _ in expected]
    for table, (*_, named) in zip(tables, expected):
        index, size, count, time, algbw, busbw, in_time, in_wrong = named
        row = table.rows[index]
        assert (row.nbytes, row.count, row.root) == (size, count, -1)
        assert row.out_of_place == Measurement(time, algbw, busbw, 0)
        assert (row.in_place.time_us, row.in_place.nwrong) == (in_time, in_wrong)


@pytest.mark.parametrize("name", sorted(RAW_LOGS))
def test_raw_logs_print_back_and_recompute(name):
    """Every row prints back as its log line; bandwidths recomputed from size and the printed
    time agree with the printed ones within their rounding and the time's; the footer average
    of the printed busbw is within rounding of the printed average."""
    version, collective, _ = RAW_LOGS[name]
    text = raw(name)
    lines = {TAG.sub("", line) for line in text.splitlines()}
    for table in read_results(text, name):
        coll = table.collective or collective
        printed = format_table(coll, table.rows, version=version)
        assert all(line in lines for line in printed[4:-3 if ver(version) < (2, 16, 7) else -4])
        if "TRANSCRIBED" not in name:  # the transcriptions kept no header
            assert all(line in lines for line in printed[1:4])
        for row in table.rows:
            tokens = format_row(row, version).split()
            for m, time_text in ((row.out_of_place, tokens[5]), (row.in_place, tokens[9])):
                decimals = len(time_text.partition(".")[2])
                time_slack = 0.5 * 10 ** -decimals / m.time_us
                again = measurement(coll, table.nranks, row.nbytes, m.time_us)
                assert abs(again.algbw_gbps - m.algbw_gbps) <= 0.005 + again.algbw_gbps * time_slack + 1e-9
                assert abs(again.busbw_gbps - m.busbw_gbps) <= 0.005 + again.busbw_gbps * time_slack + 1e-9
        values = [m.busbw_gbps for row in table.rows for m in (row.out_of_place, row.in_place)]
        assert abs(sum(values) / len(values) - table.avg_busbw_gbps) <= 0.005 + 1e-4 * table.avg_busbw_gbps


def test_case_blocks_read():
    cases = need_validation() / "cases"
    for path in sorted(cases.glob("*.md")):
        text = path.read_text()
        comments = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.startswith("# collective=")]
        tables = read_results(text, path.name)
        assert [t.source_line for t in tables] == [n for n, _ in comments], path.name
        for table, (_, comment) in zip(tables, comments):
            stated = re.search(r"\brows=(\d+)", comment)
            if stated:
                assert len(table.rows) == int(stated[1]), (path.name, comment)
            assert table.collective in COLLECTIVES and table.nranks >= 2 and table.rows


def test_case_values():
    cases = need_validation() / "cases"
    c01 = read_results((cases / "C01.md").read_text(), "C01.md")
    assert [(t.collective, t.nranks, t.dtype, t.redop, len(t.rows)) for t in c01] == [("all_reduce", 16, "float", "sum", 32)] * 3
    assert c01[0].rows[0] == ResultRow(8, None, "float", "sum", None, Measurement(85.70, 0.00, 0.00),
                                       Measurement(74.97, 0.00, 0.00))
    assert c01[1].rows[0].in_place is None and c01[1].rows[0].out_of_place == Measurement(85.14, 0.00, 0.00)
    # C01's first block is the out-of-place and in-place table of the v2.22.3 log
    log = read_results(raw("aws_p5_KeitaW_nccl-test-output-v2.22.3-1.log"))[0]
    strip = lambda m: (m.time_us, m.algbw_gbps, m.busbw_gbps)  # noqa: E731
    assert [(r.nbytes, strip(r.out_of_place), strip(r.in_place)) for r in c01[0].rows] == \
        [(r.nbytes, strip(r.out_of_place), strip(r.in_place)) for r in log.rows]
    c02 = read_results((cases / "C02.md").read_text(), "C02.md")[0]
    assert (c02.collective, c02.nranks, c02.dtype, len(c02.rows)) == ("all_reduce", 8, None, 24)
    assert c02.rows[0].nbytes == 1024 and c02.rows[0].out_of_place == Measurement(None, None, None)
    assert c02.rows[-1].in_place == Measurement(None, None, 478.87)
    c05 = read_results((cases / "C05.md").read_text(), "C05.md")
    assert [(t.collective, t.nranks) for t in c05] == [(c, n) for n in (8, 80) for c in
                                                        ("all_reduce", "all_gather", "reduce_scatter", "alltoall",
                                                         "sendrecv")]
    assert c05[0].avg_busbw_gbps == 437.957 and c05[0].rows[-1].out_of_place == Measurement(62340.7, 275.58, 482.27)
    c20c = read_results((cases / "C20c.md").read_text(), "C20c.md")[0]
    assert c20c.rows[0].in_place == Measurement(88.53, 23.69, 41.46)
    assert c20c.rows[-1].out_of_place == Measurement(2946.6, 91.10, 159.43) and c20c.rows[-1].in_place is None


# --- prefixes, JSON, round trips -------------------------------------------------------------

def test_prefixes_and_info_lines():
    body = format_table("all_gather", [result_row("all_gather", 2, 1 << 20, "float", 50.0, 51.0, nwrong=0)])
    text = "\n".join(
        ["node-a:1234:1234 [0] NCCL INFO Bootstrap : Using eth0", "# nThread 1 nGpus 1 minBytes 8",
         "#  Rank  0 Group  0 Pid   1 on node-a device  0 [0000:1b:00] NVIDIA H100",
         "#  Rank  1 Group  0 Pid   2 on node-b device  0 [0000:1b:00] NVIDIA H100"]
        + [f"0: {line}" for line in body[:5]] + ["node-b:2:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] via NET"]
        + [f"[1,0]<stdout>:node-a: {line}" for line in body[5:]])
    (table,) = read_results(text)
    assert (table.collective, table.nranks, table.dtype, table.redop) == ("all_gather", 2, "float", "none")
    assert table.rows[0].nbytes == 1 << 20 and table.rows[0].out_of_place.time_us == 50.0


def test_rows_cut_by_nccl_log_lines():
    # NCCL logs to rank 0's stdout between nccl-tests' printf calls, so its lines can cut a row.
    text = "\n".join(HEADER_V2_13 + [
        "[1,0]<stdout>:           8             2     float     sum      -1[1,0]<stdout>:node-a:25:90 [0] NCCL INFO "
        "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
        "[1,0]<stdout>:    85.70    0.00    0.00      0node-a:25:90 [0] NCCL INFO Connected all rings",
        "[1,1]<stdout>:node-b:26:91 [1] NCCL INFO Connected all rings",
        "[1,0]<stdout>:    74.97    0.00    0.00      0",
        "[1,0]<stdout>:          16             4     float     sum      -1    63.44    0.00    0.00      0    63.31    0.00    0.00      0",
        "# Out of bounds values : 0 OK"])
    (table,) = read_results(text)
    assert [row.out_of_place.time_us for row in table.rows] == [85.70, 63.44]
    assert table.rows[0].in_place == Measurement(74.97, 0.0, 0.0, 0)


def test_per_iteration_columns():
    header = ("#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max"
              "    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%  ")
    row = ("        1024           256     float     sum      -1    12.50    0.08    0.14       0    12.00    13.00"
           "    13.00     2.50    12.60    0.08    0.14       0    12.10    13.10    13.10     2.40")
    (table,) = read_results(f"{header}\n{row}\n")
    assert table.rows[0].in_place == Measurement(12.60, 0.08, 0.14, 0)


def test_json_round_trip():
    rows = [result_row("reduce_scatter", 8, size, "bfloat16", 10.0 + size / 1e4, 11.0 + size / 1e4, nwrong=0,
                       plan={"algorithm": "RING", "protocol": "SIMPLE", "nchannels": 16, "nthreads": 512})
            for size in (1024, 1 << 20)]
    doc = results_json("reduce_scatter_perf", rows, {"engine": "model", "system": "dgx-h100", "nranks": 8,
                                                     "nccl_version": "2.22.3"})
    assert (doc["collective"], doc["engine"], doc["nranks"]) == ("reduce_scatter", "model", 8)
    assert doc["results"][0]["root"] == "    -1" and doc["results"][0]["plan"]["nchannels"] == 16
    assert set(doc["results"][0]["out_of_place"]) == {"time", "alg_bw", "bus_bw", "nwrong"}
    assert doc["out_of_bounds"] == {"count": 0, "okay": True}
    (table,) = read_results(json.dumps(doc, indent=1), "run.json")
    assert (table.collective, table.nranks, table.dtype, table.redop) == ("reduce_scatter", 8, "bfloat16", "sum")
    assert table.rows == tuple(rows)
    with pytest.raises(UsageError):
        results_json("all_reduce", rows, {"results": []})


def test_nccl_tests_json():
    # The shape src/util.cu writes: root as "%6i", doubles for #wrong, null when unchecked,
    # one device per process in config.devices.
    doc = """{"version":3,"start_time":"2026-01-01 00:00:00","args":["./build/all_reduce_perf","-b","8"],
    "env":[],"nccl_version":22902,"config":{"nthreads":1,"ngpus":4,"minimum_bytes":8,"maximum_bytes":8,
    "step_factor":2,"warmup_iters":1,"iterations":20,"aggregated_iterations":1,"validation":1,"graph":0,
    "blocking_collectives":"false","devices":[{"rank":0,"group":0,"pid":1,"hostname":"a","device":0,
    "device_hex":"0000:1b:00","device_info":"NVIDIA H100"},{"rank":4,"group":0,"pid":2,"hostname":"b",
    "device":0,"device_hex":"0000:1b:00","device_info":"NVIDIA H100"}]},
    "results":[{"size":8,"count":2,"type":"float","redop":"sum","root":"    -1",
    "out_of_place":{"time":12.500000,"alg_bw":0.000640,"bus_bw":0.001120,"nwrong":0.000000},
    "in_place":{"time":"nan","alg_bw":0.000640,"bus_bw":0.001120,"nwrong":null},
    "actual_iterations":20,"experiment_name":""}],
    "out_of_bounds":{"count":0,"okay":"true"},"average_bus_bandwidth":{"bandwidth":0.001120,"okay":"unchecked"},
    "errors":[],"end_time":"2026-01-01 00:00:01"}"""
    (table,) = read_results(doc)
    assert (table.collective, table.nranks, table.avg_busbw_gbps) == ("all_reduce", 8, 0.00112)
    row = table.rows[0]
    assert (row.root, row.out_of_place) == (-1, Measurement(12.5, 0.00064, 0.00112, 0))
    assert math.isnan(row.in_place.time_us) and row.in_place.nwrong is None


def test_text_round_trip():
    rows = [result_row("broadcast", 4, 8 << k, "half", 20.0 * (k + 1), 21.0 * (k + 1), nwrong=0) for k in range(6)]
    (table,) = read_results("\n".join(format_table("broadcast", rows)))
    assert table.collective == "broadcast" and table.rows[3].root == 0
    assert [r.out_of_place.time_us for r in table.rows] == [20.0 * (k + 1) for k in range(6)]


# --- bad input -------------------------------------------------------------------------------

@pytest.mark.parametrize("text, where, words", [
    ("hello\nworld\n", "x.log", "no nccl-tests results"),
    ("\n".join(HEADER_CURRENT) + "\n    33554432       4194304    double     sum      -1   182.87  183.49\n",
     "x.log:5", "malformed nccl-tests row"),
    ("\n".join(HEADER_CURRENT) + "\n    8    2    float    sum    -1    1.0    x    0.0    0    1.0    0.0    0.0    0\n",
     "x.log:5", "malformed"),
    ("#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error\n",
     "x.log:1", "before v2.13"),
    ("```\n# collective=all_reduce nranks=2\nsize_bytes,time_us\n8,1.0,2\n```\n", "x.log:4", "3 values"),
    ("# collective=all_reduce nranks=2\n8,1.0,2.0\n", "x.log:2", "CSV header"),
    ("# collective=all_reduce nranks=2\nsize_bytes,time_us\n8,fast\n", "x.log:3", "time_us"),
    ('{"results": [1, 2', "x.log:1", "not valid JSON"),
    ('{"results": [{"size": "8"}]}', "results[0]", "size"),
    ('{"rows": []}', "x.log:1", "'results'"),
])
def test_bad_input_is_one_line(text, where, words):
    with pytest.raises(UsageError) as err:
        read_results(text, "x.log")
    line = err.value.line()
    assert where in line and words in line and "\n" not in line


# --- the run around the table ----------------------------------------------------------------

def printf_header(names: str, units: str, name_args, unit_args) -> list[str]:
    """writeResultHeader's lines from its own formats (the title line is the same in every release)."""
    title = "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
    return ["#", title % ("", "", "", "", ""), names % name_args, units % unit_args]


LEAD = "# %10s  %12s  %8s  %6s  %6s"
KEYS = ("size", "count", "type", "redop", "root")
UNITS = ("(B)", "(elements)", "", "", "")


def test_header_layouts_by_release():
    cells = ("time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong")
    unit_cells = ("(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
    # src/util.cu v2.17.3 writeResultHeader: two spaces before #wrong, its unit cell "%5s", nothing after
    v2_17_3 = printf_header(LEAD + "  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s",
                            LEAD + "  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s", KEYS + cells, UNITS + unit_cells)
    assert table_header("2.17.3") == table_header("2.17.5") == v2_17_3
    # v2.17.6: a timestamp column " %20s", empty without -S
    fmt = "  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %20s"
    assert table_header("2.17.6") == printf_header(LEAD + fmt, LEAD + fmt, KEYS + cells + ("",),
                                                   UNITS + unit_cells + ("",))
    assert table_header("2.17.6", timestamps=True)[2].endswith("#wrong            timestamp")
    # v2.17.7+: " %*s" (0 wide without -S, 19 with), the layout of HEADER_CURRENT (2.17.8's log)
    fmt = "  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s"
    assert table_header("2.19.6") == table_header("2.17.7") == HEADER_CURRENT == printf_header(
        LEAD + fmt, LEAD + fmt, KEYS + cells + (0, ""), UNITS + unit_cells + (0, ""))
    stamped = table_header("2.19.6", timestamps=True, cputime=True)
    cpu = ("cputime",) + cells[1:4] + ("cputime",) + cells[5:]
    assert stamped[2] == (LEAD + fmt) % (KEYS + cpu + (19, "timestamp"))
    assert stamped[3].endswith("  %Y-%m-%d %H:%M:%S")
    per_iter = table_header("2.19.2", per_iter=True)
    assert per_iter[1].endswith("in-place (+ per-iteration)") and per_iter[2].split()[-4:] == ["i_min", "i_max",
                                                                                               "i_p99", "i_cv%"]
    for bad in (lambda: table_header("2.17.5", timestamps=True), lambda: table_header("2.19.1", per_iter=True)):
        with pytest.raises(UsageError):
            bad()


def test_rows_with_per_iteration_columns_and_timestamps():
    row = ResultRow(1024, 256, "float", "sum", -1, Measurement(12.5, 0.08, 0.14, None),
                    Measurement(12.6, 0.08, 0.14, None))
    stats = IterStats(12.0, 13.0, 12.5, 12.5, 12.5, 13.0, 0.3, 2.5, (12.5,) * 20)
    line = format_row(row, per_iter=(stats, stats), timestamp="2026-01-01 00:00:00")
    # writeBenchmarkLineBody, then writePerIterReport "  %7s  %7s  %7s  %7s" per placement, then "%21s"
    assert line.endswith("    N/A    12.00    13.00    13.00     2.50  2026-01-01 00:00:00")
    (table,) = read_results("\n".join(table_header(per_iter=True, timestamps=True) + [line]))
    assert table.rows[0].in_place == Measurement(12.6, 0.08, 0.14, None)


def test_device_lines_as_the_logs_print_them():
    # xxrjun_cluster01_smoke_N2_G1.log line 6 (nccl-tests 2.17.8) and NVIDIA/nccl-tests issue #322 (2.13-2.16.5)
    assert device_line(RankDevice(0, 0, 2201134, "cnode3-002", 0, "0000:1b:00.0", "NVIDIA H100 80GB HBM3"), "2.17.8") \
        == "#  Rank  0 Group  0 Pid 2201134 on cnode3-002 device  0 [0000:1b:00] NVIDIA H100 80GB HBM3"
    assert device_line(RankDevice(7, 0, 3491124, "HCA-32", 7, "0000:c2:00.0", "NVIDIA H100 80GB HBM3"), "2.16.5") \
        == "#  Rank  7 Group  0 Pid 3491124 on     HCA-32 device  7 [0000:c2:00] NVIDIA H100 80GB HBM3"
    # src/common.cu: "#   Rank %2d Pid %6d on %10s device %2d [0x%02x] %s" before v2.13.4, with Group until v2.14.0
    d = RankDevice(3, 0, 41, "h", 3, "0000:61:00.0", "GPU")
    assert device_line(d, "2.13.3") == "#   Rank  3 Pid     41 on          h device  3 [0x61] GPU"
    assert device_line(d, "2.14.0") == "#  Rank  3 Group  0 Pid     41 on          h device  3 [0x61] GPU"
    assert device_line(d, "2.14.1") == "#  Rank  3 Group  0 Pid     41 on          h device  3 [0000:61:00] GPU"


def test_preamble_as_a_real_log_prints_it():
    # xxrjun_cluster01_smoke_N2_G1.log lines 1-7: nccl-tests 2.17.8 on NCCL 2.29.2
    log = ["# nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902",
           "# Collective test starting: all_reduce_perf",
           "# nThread 1 nGpus 1 minBytes 33554432 maxBytes 536870912 step: 2(factor) warmup iters: 2 iters: 5 agg "
           "iters: 1 validation: 1 graph: 0",
           "#",
           "# Using devices",
           "#  Rank  0 Group  0 Pid 2201134 on cnode3-002 device  0 [0000:1b:00] NVIDIA H100 80GB HBM3",
           "#  Rank  1 Group  0 Pid 945256 on cnode3-003 device  0 [0000:1b:00] NVIDIA H100 80GB HBM3"]
    processes = tuple((RankDevice(r, 0, pid, host, 0, "0000:1b:00.0", "NVIDIA H100 80GB HBM3"),)
                      for r, pid, host in ((0, 2201134, "cnode3-002"), (1, 945256, "cnode3-003")))
    setup = RunSetup("all_reduce_perf", nccl_version_code(2, 29, 2), 33554432, 536870912, 2, None, 2, 5,
                       processes=processes)
    assert preamble(setup, "2.17.8") == log
    lines = preamble(RunSetup("all_reduce_perf", 22902, 8, 8, None, 1024, blocking=2, parallel_init=1, unalign=1,
                                per_iter=1, per_iter_skip=3), "2.19.6")
    assert lines[2].endswith("step: 1024(bytes) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0 "
                             "unalign: 1")
    assert lines[3:] == ["# Blocking Enabled: wait after each inner iteration (-m), no barrier ",
                         "# Per-Iteration Report: CUDA event timing; i_* uses max over process rows; summary skips "
                         "first 3 iterations ",
                         "# Parallel Init Enabled: threads call into NcclInitRank concurrently ", "#",
                         "# Using devices"]
    assert preamble(RunSetup("x_perf", 0, 8, 8, blocking=2), "2.18.0")[3] == \
        "# Blocking Enabled: wait for completion and barrier after each collective "
    many = RunSetup("x_perf", 0, 8, 8, processes=(tuple(RankDevice(r, 0, 1, "h", r, "0000:01:00.0", "G" * 60)
                                                           for r in range(40)),))
    cut = preamble(many, "2.19.6")[5:]  # one process's 40 lines overflow its 2048-byte buffer (MAX_LINE)
    assert len("\n".join(cut)) + 1 == 2047 and cut[-1].endswith("...")
    assert nccl_version_code(2, 8, 4) == 2804 and nccl_version_code(2, 30, 7) == 23007


def test_memory_rule_against_published_logs():
    # "Reducing maxBytes to N" lines of real runs with -c 1, each GPU's totalGlobalMem worked back from them
    assert memory_max_nbytes(84929478656, 1, "2.16.5") == 27951912277  # H100 80GB HBM3, NVIDIA/nccl-tests#322
    assert memory_max_nbytes(150109880320, 1, "2.18.3") == 48247057066  # H200, a 2.18.3 run
    assert memory_max_nbytes(42406903808, 1, "2.16.7") == 12703978837  # A100-PCIE-40GB, NVIDIA/nccl-tests#350
    assert memory_max_nbytes(16928342016, 1, "2.14.0") == 5284866730  # V100-SXM2-16GB
    assert memory_max_nbytes(84929478656, 0, "2.19.6") == (84929478656 - 5 * (1 << 30)) // 2
    assert memory_max_nbytes(1 << 29, 1) > 1 << 60  # size_t wraps: nothing is reduced
    assert reduced_sizes(8, 1 << 40, 1000, "2.16.6") == (8, 1000) and reduced_sizes(8, 100, 1000) is None
    assert reduced_sizes(2000, 4000, 1000, "2.16.6") == (1000, 1000)  # minBytes follows from 2.16.6
    assert reduced_sizes(2000, 4000, 1000, "2.16.5") == (2000, 1000)


def test_closing_lines_by_release():
    assert closing_lines("2.13.3") == []
    assert closing_lines("2.13.4") == closing_lines("2.17.6") == [""]  # the empty ncclGetLastError line
    assert closing_lines("2.17.7") == ["#", ""] and closing_lines("2.19.6", "# m") == ["# m", "#", ""]


def test_flags_by_release():
    assert flag_release("-J") == "2.17.3" and flag_release("-S") == "2.17.6" and flag_release("-K") == "2.19.6"
    assert flag_release("-b") is None


def test_tests_json_as_util_cu_writes_it():
    rows = [result_row("all_reduce", 2, 1024, "float", 10.0, 11.0, nwrong=0)]
    device = RankDevice(0, 0, 7, "host a", 0, "0000:1b:00.0", "NVIDIA H100 80GB HBM3")
    setup = RunSetup("all_reduce_perf", 22902, 1024, 1024, processes=((device,), (device,)))
    doc = nccl_tests_json(setup, rows, extra={"engine": "nccl"})
    assert list(doc) == ["version", "start_time", "args", "env", "nccl_version", "config", "results", "out_of_bounds",
                         "average_bus_bandwidth", "errors", "end_time", "nicksim"]
    assert doc["version"] == 3 and doc["config"]["blocking_collectives"] == "false"
    assert doc["config"]["devices"][0] == {"rank": 0, "group": 0, "pid": 7, "hostname": "host", "device": 0,
                                           "device_hex": "0000:1b:00", "device_info": "NVIDIA H100 80GB HBM3"}
    item = doc["results"][0]
    assert list(item) == ["size", "count", "type", "redop", "root", "out_of_place", "in_place", "actual_iterations",
                          "experiment_name"]
    assert item["out_of_place"]["nwrong"] == 0.0 and doc["out_of_bounds"] == {"count": 0, "okay": "true"}
    old = nccl_tests_json(setup, rows, version="2.17.8")
    assert old["version"] == 1 and "average_bus_bandwidith" in old and "per_iter_timing" not in old["config"]
    assert nccl_tests_json(setup, rows, version="2.19.2")["version"] == 2
    with pytest.raises(UsageError):
        nccl_tests_json(setup, rows, version="2.17.2")
    for doc in (old, nccl_tests_json(setup, rows, version="2.19.6", cputime=True)):
        (table,) = read_results(json.dumps(doc))
        assert table.avg_busbw_gbps == pytest.approx(rows[0].out_of_place.busbw_gbps * 0.5 +
                                                     rows[0].in_place.busbw_gbps * 0.5)


def test_json_paths_are_claimed_never_overwritten(tmp_path):
    target = tmp_path / "r.json"
    assert claim_json_path(str(target)) == (str(target), f"# Writing JSON output to {target}")
    assert claim_json_path(str(target))[0] == f"{target}.0" and claim_json_path(str(target))[0] == f"{target}.1"
    missing = tmp_path / "no" / "r.json"
    assert claim_json_path(str(missing)) == (None, f"# skipping json output; {missing} not accessible")
    assert claim_json_path("/dev/null") == ("/dev/null", "# Writing JSON output to /dev/null")  # written as it is


def test_nicksim_lines_and_plan_notes_read_as_nccl_tests_text():
    row = result_row("all_reduce", 8, 1024, "float", 10.0, 10.0)
    text = "\n".join(["# nicksim perf all_reduce: engine nccl, dgx-h100, 8 ranks (1 node x 8 GPUs), NCCL 2.30",
                      "# nicksim: a note", "# nccl-tests version 2.19.6 nccl-headers=1 nccl-library=1",
                      "# Collective test starting: all_reduce_perf", *table_header(),
                      format_row(row) + "  # Ring/LL 24ch 512t", *format_table("all_reduce", [row])[5:]])
    (table,) = read_results(text)
    assert (table.collective, table.nranks, table.rows[0].out_of_place.time_us) == ("all_reduce", 8, 10.0)
