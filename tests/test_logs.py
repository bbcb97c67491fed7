"""NCCL_DEBUG lines: the settings' grammar (debug.cc), the line format, and round trips through
nicksim's own readers (logs.read_job_log, hang diagnosis, the nccl-tests table reader)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import run_cli
from nicksim.forensics.read import read_evidence
from nicksim.job import JobSpec, load_job
from nicksim.formats.joblog import JobLogger, call_lines, comm_pointer, init_lines, setting_lines
from nicksim.calls import call_for_size
from nicksim.formats.logs import (Identity, LogSink, debug_config, expand_debug_file, format_line, line_kind,
                                  parse_line, read_job_log)
from nicksim.params import read_params
from nicksim.formats.report import read_results


def _config(minor=None, **env):
    return debug_config(read_params(env), minor)


# --- the settings' grammar ------------------------------------------------------------------------

@pytest.mark.parametrize("text,level", [("INFO", 3), ("info", 3), ("WARN", 2), ("VERSION", 1), ("TRACE", 5),
                                        ("ABORT", 4)])
def test_levels_are_read_without_regard_to_case(text, level):
    assert _config(NCCL_DEBUG=text).level == level


def test_an_unknown_level_logs_nothing_and_says_so():
    config = _config(NCCL_DEBUG="VERBOSE")
    assert config.level == 0 and not config.enabled
    assert "not a level" in config.warnings[0] and "INFO" in config.warnings[0]


def test_default_subsystems_by_release():
    # debug.cc: INIT,ENV to 2.22; INIT,BOOTSTRAP,ENV from 2.23
    assert _config(22, NCCL_DEBUG="INFO").subsystems == {"INIT", "ENV"}
    assert _config(23, NCCL_DEBUG="INFO").subsystems == {"INIT", "BOOTSTRAP", "ENV"}


def test_caret_inverts_and_all_selects_every_subsystem_of_the_release():
    inverted = _config(30, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="^COLL,NET")
    assert "COLL" not in inverted.subsystems and "NET" not in inverted.subsystems and "INIT" in inverted.subsystems
    assert "DESTROY" in _config(30, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="ALL").subsystems
    assert "RAS" not in _config(22, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="ALL").subsystems  # RAS came in 2.24


def test_an_unknown_subsystem_is_skipped_before_2_30_and_voids_the_value_in_2_30():
    old = _config(28, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="COLL,FOO")
    assert old.subsystems == {"COLL"} and "FOO" in old.warnings[0]
    new = _config(30, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="COLL,FOO")
    assert new.subsystems == {"INIT", "BOOTSTRAP", "ENV"} and "default" in new.warnings[0]


def test_a_mask_of_nothing_hides_even_warn_lines():
    config = _config(28, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="FOO")
    assert not config.subsystems and not config.wants("WARN")
    assert any("not even WARN" in w for w in config.warnings)


def test_levels_and_flags_select_lines():
    config = _config(30, NCCL_DEBUG="WARN")
    assert config.wants("WARN") and config.wants("VERSION") and not config.wants("INFO", "INIT")
    info = _config(30, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="NET")
    assert info.wants("INFO", "INIT|NET") and not info.wants("INFO", "INIT") and info.wants("INFO", "ALL")


@pytest.mark.parametrize("template,expected", [("nccl.%h.%p.log", "nccl.node-03.4711.log"), ("a%%b%p", "a%b4711"),
                                               ("%x%h", "%xnode-03"), ("plain", "plain")])
def test_debug_file_substitutions(template, expected):
    assert expand_debug_file(template, "node-03", 4711) == expected


def test_the_debug_file_is_only_used_above_version():
    assert _config(NCCL_DEBUG="VERSION", NCCL_DEBUG_FILE="x.%p").file_template is None
    assert _config(NCCL_DEBUG="WARN", NCCL_DEBUG_FILE="x.%p").file_template == "x.%p"


# --- the line format --------------------------------------------------------------------------------

def test_lines_as_nccl_prints_them_and_read_back():
    who = Identity("worker-0.example.com", 25, 66, 0)
    info = format_line(who, "INFO", "Channel 00/16 :    0   7")
    assert info == "worker-0:25:66 [0] NCCL INFO Channel 00/16 :    0   7"  # host cut at the first dot
    warn = format_line(who, "WARN", "NET/IB : Got completion", "transport/net_ib.cc:1697")
    assert warn == "worker-0:25:66 [0] transport/net_ib.cc:1697 NCCL WARN NET/IB : Got completion"
    for line, level in ((info, "INFO"), (warn, "WARN"), (f"[1,3]<stdout>:{info}", "INFO"), (f"[rank3]:{warn}", "WARN")):
        parsed = parse_line(line)
        assert parsed.level == level and parsed.who.pid == 25 and parsed.who.tid == 66
    assert parse_line(warn).where == "transport/net_ib.cc:1697"
    # 2.30.7 names the function after file:line
    newer = parse_line("worker-0:25:66 [0] transport/net_ib/p2p.cc:812 (ncclIbTest) NCCL WARN NET/IB: Got completion")
    assert newer.where == "transport/net_ib/p2p.cc:812" and newer.text == "NET/IB: Got completion"
    assert parse_line("# Avg bus bandwidth    : 124.584") is None


def test_the_version_line_is_bare_at_version_level_and_an_info_line_above():
    job = load_job(JobSpec(system="dgx-h100", nccl_version="2.22"), read_params({}))
    for level, expect_info in (("VERSION", False), ("INFO", True)):
        lines = []
        sink = LogSink(_config(22, NCCL_DEBUG=level), _Collect(lines))
        JobLogger(job, sink, (0, 1)).init()
        versions = [line for line in lines if "NCCL version 2.22.3" in line]
        if expect_info:  # init.cc 2.22: every rank, as INFO
            assert len(versions) == 2 and all(" NCCL INFO NCCL version" in v for v in versions)
        else:
            assert versions == ["NCCL version 2.22.3"]


class _Collect:
    def __init__(self, lines):
        self.lines = lines

    def write(self, text):
        self.lines.extend(t for t in text.split("\n") if t)

    def flush(self):
        pass


# --- round trips ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def perf_log():
    out = run_cli("perf", "all_reduce", "-b", "1M", "-e", "4M", "--system", "dgx-h100", "--nodes", "2", "-n", "2",
                  "-w", "1", "--nccl-version", "2.22", "--env", "NCCL_DEBUG=INFO",
                  "--env", "NCCL_DEBUG_SUBSYS=INIT,ENV,COLL", "--env", "NCCL_BUFFSIZE=8388608")
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_log_says_what_the_job_is(perf_log):
    job = load_job(JobSpec(system="dgx-h100", nodes=2, nccl_version="2.22"), read_params({"NCCL_BUFFSIZE": "8388608"}))
    log = read_job_log(perf_log.splitlines())
    assert sorted(log.comms) == list(range(16))
    assert log.comms[9] == {"comm": comm_pointer(9), "nranks": 16, "nnodes": 2, "local_ranks": 8, "local_rank": 1}
    assert [log.rings[c] for c in range(job.channels.n_channels)] == [tuple(r) for r in job.channels.rings]
    for rank in (0, 5, 12):
        view = job.channels_of(rank)
        for c in range(view.n_channels):
            up, down = log.trees[c][rank]
            assert up == view.tree_up[c] and down == tuple(d for d in view.tree_down[c] if d >= 0)
    assert all(log.settings[r] == {"NCCL_BUFFSIZE": "8388608"} for r in range(16))


def test_every_call_nccl_tests_makes_is_logged_in_order(perf_log):
    # common.cu: warm-up of 1M, 2M, 4M (-w 1 each), then per size and placement 1 + 2 (-n) + 1 (-c) calls
    log = read_job_log(perf_log.splitlines())
    calls = log.calls[3]
    assert len(calls) == 3 + 3 * 2 * 4
    assert [c["op_count"] for c in calls] == list(range(len(calls)))
    assert [c["count"] for c in calls[:3]] == [262144, 524288, 1048576]
    assert {c["func"] for c in calls} == {"AllReduce"} and {c["datatype"] for c in calls} == {7}
    assert all(c["nranks"] == 16 for c in calls)


def test_the_table_reads_the_same_with_the_log_between_its_rows(perf_log):
    plain = run_cli("perf", "all_reduce", "-b", "1M", "-e", "4M", "--system", "dgx-h100", "--nodes", "2", "-n", "2",
                    "-w", "1", "--nccl-version", "2.22", "--env", "NCCL_BUFFSIZE=8388608").stdout
    assert len(perf_log.splitlines()) > 10 * len(plain.splitlines())
    with_log, without = read_results(perf_log, "log")[0], read_results(plain, "plain")[0]
    assert [(r.nbytes, r.out_of_place.time_us) for r in with_log.rows] == \
        [(r.nbytes, r.out_of_place.time_us) for r in without.rows]


def test_hang_diagnosis_reads_ranks_and_settings_from_the_log(perf_log, tmp_path):
    path = tmp_path / "job.log"
    path.write_text(perf_log)
    evidence = read_evidence([str(path)])
    assert set(evidence.nranks) == {16}
    assert evidence.init_complete == 16
    assert evidence.settings[7]["NCCL_BUFFSIZE"] == "8388608"


def test_runtime_connections_follow_the_first_call_of_each_algorithm():
    # 2.22 connects at first use (NCCL_RUNTIME_CONNECT with cuMem); NCCL_CUMEM_ENABLE=0 connects during init.
    def kinds(*env):
        out = run_cli("perf", "all_reduce", "-b", "64M", "-e", "64M", "--system", "dgx-a100", "-n", "1", "-w", "0",
                      "--nccl-version", "2.22", "--env", "NCCL_DEBUG=INFO", "--env", "NCCL_DEBUG_SUBSYS=INIT,COLL",
                      "--env", "NICKSIM_DEBUG_RANKS=0", *env)
        assert out.returncode == 0, out.stderr
        return [line_kind(p.text) for p in map(parse_line, out.stdout.splitlines()) if p]
    lazy, eager = kinds(), kinds("--env", "NCCL_CUMEM_ENABLE=0")
    assert lazy.index("connection") > lazy.index("call") > lazy.index("init-complete")
    assert eager.index("connection") < eager.index("init-complete") < eager.index("call")


def test_debug_file_gets_one_file_per_host_and_pid(tmp_path):
    template = str(tmp_path / "nccl.%h.%p.log")
    out = run_cli("perf", "all_reduce", "-b", "1M", "-e", "1M", "--system", "dgx-h100", "--nodes", "2", "-n", "1",
                  "--env", "NCCL_DEBUG=INFO", "--env", f"NCCL_DEBUG_FILE={template}")
    assert out.returncode == 0, out.stderr
    assert " NCCL INFO " not in out.stdout  # the lines went to the files
    files = sorted(tmp_path.glob("nccl.*.log"))
    assert len(files) == 16
    assert files[0].name == "nccl.node-00.4100.log" and files[-1].name == "nccl.node-01.4115.log"
    for f in files:
        pids = {parse_line(line).who.pid for line in f.read_text().splitlines()}
        assert pids == {int(f.name.split(".")[2])}


def test_search_logs_at_info_and_is_silent_otherwise():
    quiet = run_cli("search", "dgx-h100")
    assert " NCCL INFO " not in quiet.stdout
    loud = run_cli("search", "dgx-h100", "--env", "NCCL_DEBUG=INFO", "--env", "NICKSIM_DEBUG_RANKS=0")
    assert "node-00:4100:4100 [0] NCCL INFO comm 0x" in loud.stdout


def test_call_lines_name_send_and_recv_as_collectives_cc_does():
    call = call_for_size("sendrecv", 4096, "float", "sum", 0, 4)
    send, recv = (text for _, _, text in call_lines(call, 5, 1))
    assert re.match(r"Send: opCount 5 sendbuff \(nil\) recvbuff 0x[0-9a-f]+ count 1024 datatype 7 op 0 root 2 ", send)
    assert re.match(r"Recv: opCount 5 sendbuff \(nil\) recvbuff 0x[0-9a-f]+ count 1024 datatype 7 op 0 root 0 ", recv)


def test_init_lines_follow_each_releases_wording():
    for version, boot, start in (("2.22", "Bootstrap : Using", "ncclCommInitRank comm"),
                                 ("2.30", "Bootstrap: Using", "[Rank 0] ncclCommInitRank comm")):
        job = load_job(JobSpec(system="dgx-h100", nccl_version=version), read_params({}))
        texts = [text for _, _, text in init_lines(job, 0)]
        assert any(t.startswith(boot) for t in texts)
        assert any(t.startswith(start) and t.endswith("Init START") for t in texts)
    # rings.cc 2.23+: ranks as wide as the largest (one digit for 8 ranks); 2.22: " %3d"
    ring = job.channels.rings[0]
    assert f"Channel 00/{job.channels.n_channels:02d} :" + "".join(f" {r}" for r in ring) in texts


def test_a_real_run_logs_each_rank_as_itself(tmp_path):
    env = dict(os.environ, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,COLL", NCCL_DEBUG_FILE=str(tmp_path / "r.%p"))
    out = subprocess.run([sys.executable, "-m", "nicksim", "run", "all_reduce", "-np", "2", "-b", "4K", "-e", "4K",
                          "-n", "1", "-w", "0"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    files = sorted(tmp_path.glob("r.*"))
    assert len(files) == 2
    log = read_job_log(line for f in files for line in f.read_text().splitlines())
    assert sorted(log.comms) == [0, 1]
    pids = {int(f.name.split(".")[1]) for f in files}
    assert {parse_line(f.read_text().splitlines()[0]).who.pid for f in files} == pids
    # out of place and in place: the timed call (-n 1) and the check (-c 1), no warm-up (-w 0)
    assert len(log.calls[0]) == len(log.calls[1]) == 2 * (1 + 1)
    assert [c["op_count"] for c in log.calls[1]] == [0, 1, 2, 3]


def test_only_nccls_own_knobs_are_echoed_and_strings_have_no_period():
    params = read_params({"NCCL_BUFFSIZE": "0x800000", "NCCL_TOPO_DUMP_FILE": "/tmp/t.xml", "NCCL_P2P_LEVEL": "NVL",
                          "NCCL_DEBUG": "INFO", "NICKSIM_DEBUG_RANKS": "0", "TORCH_NCCL_BLOCKING_WAIT": "1"})
    texts = [text for _, _, text in setting_lines(params)]
    assert texts == ["NCCL_BUFFSIZE set by environment to 8388608.", "NCCL_P2P_LEVEL set by environment to NVL",
                     "NCCL_TOPO_DUMP_FILE set by environment to /tmp/t.xml"]
