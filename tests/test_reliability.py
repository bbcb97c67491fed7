"""Bad input is one line and exit 2, wherever it comes from; a run's ranks end with their launcher;
a failed check fails the run; a call the ranks disagree on is refused, not answered wrongly."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nicksim import api
from nicksim.calls import Call
from nicksim.job import JobSpec, check_spec
from nicksim.params import read_params
from nicksim.plan.chunking import plan_call
from nicksim.realhw import runner
from nicksim.realhw.agree import PlanMismatchError, check_same_plan, plan_fingerprint
from nicksim.realhw.runner import RunOptions, free_port
from nicksim.studies.perf import MAX_SIZES
from test_bootstrap import GUARD_S

REPO = Path(__file__).resolve().parent.parent


def nicksim(*args, timeout=GUARD_S, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nicksim", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)


def one_line_exit_2(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("collective", ["all_reduce", "broadcast", "all_gather"])
def test_a_job_of_one_rank_copies_its_input(collective):
    done = nicksim("run", collective, "-np", "1", "-b", "1K", "-e", "1M", "-f", "32", "-n", "2", "-c", "1")
    assert done.returncode == 0, done.stderr
    rows = api.nccl_tests_lines(done.stdout)[0].rows
    assert len(rows) == 3 and all(r.out_of_place.nwrong == 0 and r.in_place.nwrong == 0 for r in rows)


def test_one_rank_on_the_des():
    job = api.load("dgx-h100", gpus_per_node=1)
    run = api.perf(job, "all_reduce", [1 << 20], engine="des")
    assert run.records()[0]["time_us"] > 0


@pytest.mark.parametrize("flags, words", [
    (["-b", "inf"], ["'inf' is not a size"]), (["-e", "1e400"], ["'1e400' is not a size"]),
    (["-b", "nan"], ["'nan' is not a size"]),
    (["-b", "1", "-e", "64M", "-i", "1"], ["67108864 sizes", f"at most {MAX_SIZES}"]),
    (["--nic-gbps", "1e308"], ["nic_gbps", "NCCL's speed is an int of Mbps"]),
])
def test_sizes_and_speeds_out_of_range_are_refused(flags, words):
    one_line_exit_2(nicksim("perf", "all_reduce", *flags), *words)


@pytest.mark.parametrize("field, value", [("nic_gbps", 1e-9), ("nic_gbps", float("nan")), ("nic_gbps", -100.0),
                                          ("switch_lat_us", -5.0), ("switch_lat_us", float("nan")),
                                          ("oversubscription", float("inf")), ("nodes", 0), ("gpus_per_node", 0)])
def test_every_system_option_is_checked_wherever_it_comes_from(field, value):
    spec = JobSpec(system="dgx-h100", where="grid.toml", **{field: value})
    with pytest.raises(api.UsageError, match=f"{field} = "):
        check_spec(spec)
    with pytest.raises(api.UsageError):
        api.load_job(spec, read_params({}))


def test_a_sweep_row_out_of_range_is_an_error_row_not_a_wrong_answer(tmp_path):
    grid = tmp_path / "grid.toml"
    grid.write_text('[sweep]\ncollective = "all_reduce"\nsizes = ["1M"]\nsystem = ["dgx-h100"]\nnodes = [2]\n'
                    'nic_gbps = [1e-9, 400]\n')
    rows = api.sweep(api.read_grid(grid)).records()
    assert "nic_gbps" in rows[0]["error"] and not rows[1].get("error")


@pytest.mark.parametrize("setting, least", [("NCCL_BUFFSIZE=1", 4096), ("NCCL_BUFFSIZE=-1", 4096),
                                            ("NCCL_LL_BUFFSIZE=1", 256), ("NCCL_LL128_BUFFSIZE=2000", 16384),
                                            ("NCCL_P2P_NET_CHUNKSIZE=0", 512),
                                            ("NCCL_P2P_NET_CHUNKSIZE=1M", 512), ("NCCL_P2P_NVL_CHUNKSIZE=511", 512), ("NCCL_P2P_SCHEDULE_GROUP_SIZE=0", 1),
                                            ("NICKSIM_TIMEOUT=0", 1), ("NICKSIM_TIMEOUT=-5", 1)])
def test_knob_values_that_cannot_run_are_refused(setting, least):
    with pytest.raises(api.UsageError, match=f"at least {least}"):
        api.settings([setting])
    one_line_exit_2(nicksim("perf", "all_reduce", "-b", "1M", "-e", "1M", "--env", setting), setting.split("=")[0])


@pytest.mark.parametrize("setting", ["NCCL_P2P_NET_CHUNKSIZE=512", "NCCL_P2P_NVL_CHUNKSIZE=512",
                                     "NCCL_P2P_PCI_CHUNKSIZE=512"])
def test_the_smallest_p2p_chunks_run(setting):
    for nodes in (1, 2):
        job = api.load("dgx-h100", nodes=nodes, env=[setting])
        for collective in ("sendrecv", "alltoall"):
            rows = api.perf(job, collective, [4096, 1 << 20], engine="des").records()
            assert all(r["time_us"] > 0 for r in rows), rows


@pytest.mark.parametrize("setting", ["NCCL_BUFFSIZE=4096", "NCCL_LL_BUFFSIZE=256", "NCCL_LL128_BUFFSIZE=16384",
                                     "NCCL_BUFFSIZE=-2"])
def test_the_smallest_buffers_run_on_every_protocol(setting):
    job = api.load("dgx-h100", nodes=2, env=[setting])
    for protocol in ("LL", "LL128", "Simple"):
        forced = api.load("dgx-h100", nodes=2, env=[setting, f"NCCL_PROTO={protocol}"])
        for collective in ("all_reduce", "broadcast"):
            result = api.perf(forced, collective, [64 << 10], engine="des").records()[0]
            assert result["protocol"] == protocol and result["time_us"] > 0
    value = int(setting.split("=")[1])
    assert job.params.get(setting.split("=")[0]) == (4 << 20 if value == -2 else value)  # -2: the default


def test_ranks_that_differ_in_reduction_or_root_are_refused():
    job = api.load("dgx-h100")
    fingerprints = [plan_fingerprint(plan_call(job.comm, Call("all_reduce", 4096, "float", op, -1, 8)))
                    for op in ("sum", "max")]
    with pytest.raises(PlanMismatchError, match="redop max on rank 1, sum on rank 0") as caught:
        check_same_plan(fingerprints)
    assert "the same call on every rank" in caught.value.line()
    rooted = [plan_fingerprint(plan_call(job.comm, Call("broadcast", 4096, "float", "none", root, 8)))
              for root in (0, 3)]
    with pytest.raises(PlanMismatchError, match="root 3 on rank 1, 0 on rank 0"):
        check_same_plan(rooted)


def test_ranks_asked_for_different_reductions_stop_instead_of_answering_wrong():
    """Two ranks under a launcher, one asked for -o sum and one for -o max: both refuse the run."""
    comm = f"127.0.0.1:{free_port()}"
    procs = []
    for rank, op in ((0, "sum"), (1, "max")):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), NICKSIM_COMM_ID=comm)
        procs.append(subprocess.Popen([sys.executable, "-m", "nicksim", "run", "all_reduce", "-b", "64K", "-e", "64K",
                                       "-o", op, "-c", "1"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=GUARD_S) for p in procs]
    assert [p.returncode for p in procs] == [2, 2], outs
    assert "redop max on rank 1, sum on rank 0" in outs[0][1] and "the same call on every rank" in outs[0][1]


def test_a_root_outside_the_job_is_said_once_before_any_rank_starts():
    started = time.monotonic()
    one_line_exit_2(nicksim("run", "broadcast", "-np", "2", "-r", "5", "-b", "1K", "-e", "1K"), "-r", "0..1")
    assert time.monotonic() - started < 20


def test_a_failed_check_fails_the_run(monkeypatch):
    """A rank whose check counts wrong elements makes `nicksim run` exit 1, as nccl-tests does."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    params = read_params({"NICKSIM_COMM_ID": f"127.0.0.1:{free_port()}"})
    options = RunOptions("all_reduce", (4096,), "float", "sum", 0, 1, 0, 1, str(api.DEFAULT_NCCL_VERSION), False)
    lines: list[str] = []
    right = runner.run_command(options, params, None, [], "# header", lines.append)
    assert right.status == 0 and "0 OK" in "\n".join(lines)
    monkeypatch.setattr(runner, "count_wrong", lambda call, got, want: 7)
    lines.clear()
    wrong = runner.run_command(options, params, None, [], "# header", lines.append)
    assert wrong.status == 1 and "FAILED" in "\n".join(lines)


def test_sizes_beyond_the_hosts_memory_are_reduced_as_nccl_tests_reduces_them(monkeypatch):
    """`nicksim run -b 1T -e 1T` on a host with 2 GiB + 8 MiB available: nccl-tests' reserve (1 GiB
    per 16 GiB, and 1 GiB) leaves 8 MiB, a send and a receive buffer of 4 MiB on one rank."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setattr(runner, "available_nbytes", lambda: (2 << 30) + (8 << 20))
    params = read_params({"NICKSIM_COMM_ID": f"127.0.0.1:{free_port()}"})
    options = RunOptions("all_reduce", (1 << 40,), "float", "sum", 0, 1, 0, 0, str(api.DEFAULT_NCCL_VERSION), False)
    lines: list[str] = []
    done = runner.run_command(options, params, None, [], "# header", lines.append)
    assert done.status == 0
    assert lines[lines.index("# header") + 1:lines.index("# header") + 3] == [
        "#", "# Reducing maxBytes to 4194304 due to memory limitation"]
    assert [row.nbytes for row in done.rows] == [4 << 20]


def test_the_fitting_size_is_the_largest_whose_buffers_fit():
    options = RunOptions("all_gather", (1 << 40,), "half", "sum", 0, 1, 0, 1, str(api.DEFAULT_NCCL_VERSION), False)
    most = runner.fitting_max_nbytes(options, 4, 100 << 20)
    fits = lambda size: runner.rank_nbytes(runner.call_for_size("all_gather", size, "half", "sum", 0, 4), 1)
    assert fits(most) <= 100 << 20 < fits(most + 64)


def test_the_real_engine_refuses_sizes_beyond_the_hosts_memory_before_any_rank_starts():
    # Ring: a plan the backend runs (NCCL picks NVLS at 16 GiB on dgx-h100, refused first for itself);
    # 16 GiB fits an H100's memory, so nccl-tests' own rule does not lower -e first
    one_line_exit_2(nicksim("perf", "all_reduce", "-b", "16G", "-e", "16G", "--engine", "real", "--env", "NCCL_ALGO=Ring"),
                    "--engine real: a 17179869184-byte all_reduce needs", "valid: sizes up to")


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            if f"\nPPid:\t{pid}\n" in status:
                found.append(int(entry))
    return found


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _ignoring_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_a_rank_whose_launcher_died_before_the_death_signal_was_armed_ends_before_it_runs():
    # the launcher killed between fork and prctl(PR_SET_PDEATHSIG): the kernel would never signal the child
    from nicksim.realhw import launch
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that is not this process, standing for the dead launcher
    child = subprocess.Popen([sys.executable, "-c", "pass"], preexec_fn=launch._exit_with(gone.pid))
    assert child.wait(timeout=GUARD_S) == 128 + signal.SIGINT
    mine = subprocess.Popen([sys.executable, "-c", "pass"], preexec_fn=launch.exit_with_parent())
    assert mine.wait(timeout=GUARD_S) == 0


# while the ranks start; in their timed iterations; a launcher started in a shell script's background,
# where SIGINT comes ignored (and stays ignored across exec unless the ranks take it back)
@pytest.mark.parametrize("wait_s, preexec", [(0.0, None), (2.0, None), (2.0, _ignoring_sigint)])
def test_ranks_end_with_their_launcher_when_it_is_killed(wait_s, preexec):
    from test_runner import leaked, segments
    before = segments()
    launcher = subprocess.Popen([sys.executable, "-m", "nicksim", "run", "all_reduce", "-np", "2", "-n", "100000",
                                 "-b", "64K", "-e", "64K"], cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, preexec_fn=preexec)
    deadline = time.monotonic() + GUARD_S
    ranks: list[int] = []
    while len(ranks) < 2 and time.monotonic() < deadline:
        ranks = _children(launcher.pid)
        time.sleep(0.1)
    assert len(ranks) == 2
    time.sleep(wait_s)
    launcher.kill()
    launcher.wait()
    killed = time.monotonic()
    while any(_running(r) for r in ranks) and time.monotonic() - killed < 10:
        time.sleep(0.05)
    assert not any(_running(r) for r in ranks)
    assert time.monotonic() - killed < 2.0
    time.sleep(0.5)
    assert not leaked(before)


def _ranks_of(launcher: subprocess.Popen, nranks: int) -> dict[int, int]:
    """rank -> pid of the ranks a `nicksim run` launcher started (RANK in each one's environment)."""
    deadline = time.monotonic() + GUARD_S
    while time.monotonic() < deadline:
        ranks = {}
        for pid in _children(launcher.pid):
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            ranks.update({int(v[5:]): pid for v in env if v.startswith(b"RANK=")})
        if len(ranks) == nranks:
            return ranks
        time.sleep(0.05)
    raise AssertionError(f"{nranks} ranks never started")


@pytest.mark.parametrize("how, victim, timeout_s, within_s", [
    (signal.SIGKILL, 1, 60, 2.0),  # a closed connection is evidence at once, whatever the timeout
    (signal.SIGKILL, 0, 60, 2.0),
    (signal.SIGSTOP, 1, 3, 3 + 1.0),  # a silent rank: within NICKSIM_TIMEOUT and a second
    (signal.SIGSTOP, 0, 3, 3 + 1.0),
])
def test_a_killed_or_stopped_rank_is_named_by_every_survivor_in_time_and_nothing_is_left(how, victim, timeout_s,
                                                                                      within_s):
    from test_runner import leaked, segments
    before = segments()
    launcher = subprocess.Popen([sys.executable, "-m", "nicksim", "run", "all_reduce", "-np", "3", "-n", "100000",
                                 "-b", "1M", "-e", "1M"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=dict(os.environ, NICKSIM_TIMEOUT=str(timeout_s)))
    assert launcher.stdout.readline().startswith("# nicksim run all_reduce: 3 ranks")
    ranks = _ranks_of(launcher, 3)
    time.sleep(1.0)  # into the timed iterations
    os.kill(ranks[victim], how)
    hit = time.monotonic()
    survivors = [pid for rank, pid in ranks.items() if rank != victim]
    while any(_running(pid) for pid in survivors) and time.monotonic() - hit < GUARD_S:
        time.sleep(0.02)
    took = time.monotonic() - hit
    _, err = launcher.communicate(timeout=GUARD_S)
    assert took < within_s, err
    culprit = f"rank {victim} closed its connection (the process ended or was killed)" if how == signal.SIGKILL \
        else f"rank {victim} sent nothing for {timeout_s} s (stopped or hung)"
    want = {f"nicksim: error: bootstrap: {culprit}" if rank == 0 else
            f"nicksim: error: bootstrap: rank {rank} stopped: {culprit}" for rank in ranks if rank != victim}
    assert set(err.strip().splitlines()) == want, err
    assert launcher.returncode != 0
    assert not any(_running(pid) for pid in ranks.values())  # the stopped rank too: the launcher ended it
    assert not leaked(before)


def test_debug_ranks_name_only_the_jobs_ranks_however_wide_the_range():
    from nicksim.params import debug_ranks
    started = time.monotonic()
    assert debug_ranks(read_params({"NICKSIM_DEBUG_RANKS": "0-99999999999"}), 16) == tuple(range(16))
    assert debug_ranks(read_params({"NICKSIM_DEBUG_RANKS": "3,40-99999999999"}), 16) == (3,)
    assert time.monotonic() - started < 1


@pytest.mark.parametrize("flags", [["--set", "cta.bw_gbps=inf"], ["--set", "des.max_chunks=nan"]])
def test_infinite_engine_parameters_are_refused(flags):
    one_line_exit_2(nicksim("perf", "all_reduce", "-b", "1M", "-e", "1M", "--engine", "des", *flags, timeout=60),
                    "a finite number")


def test_infinite_calibration_values_are_refused(tmp_path):
    calibration = tmp_path / "cal.toml"
    calibration.write_text('[set]\n"des.max_chunks" = inf\n')
    one_line_exit_2(nicksim("perf", "all_reduce", "-b", "1M", "-e", "1M", "--engine", "des", "--calibration",
                            str(calibration), timeout=60), "cal.toml", "a finite number")


@pytest.mark.parametrize("command", [["perf", "all_reduce", "--engine", "des", "--calibration"], ["sweep"],
                                     ["validate"]])
def test_files_that_are_not_utf8_are_one_line(command, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"\xff\xfe[set]\n")
    one_line_exit_2(nicksim(*command, str(bad), timeout=60), "bad.toml", "not UTF-8")


def test_an_output_that_cannot_be_written_is_said_before_the_run():
    started = time.monotonic()
    one_line_exit_2(nicksim("run", "all_reduce", "-np", "2", "-b", "1K", "-e", "1K", "-J", "/nonexistent/dir/x.json"),
                    "/nonexistent/dir", "-J/--json")
    one_line_exit_2(nicksim("perf", "all_reduce", "--trace", "/nonexistent/t.json", "--engine", "des"), "--trace")
    assert time.monotonic() - started < 20


def test_a_failed_write_leaves_the_previous_file_whole(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    api.write_json(target, {"run": 1})
    assert json_of(target) == {"run": 1}

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(api.UsageError, match="No space left"):
        api.write_json(target, {"run": 2, "rows": list(range(1000))})
    assert json_of(target) == {"run": 1} and [p.name for p in tmp_path.iterdir()] == ["out.json"]


def json_of(path: Path):
    import json
    return json.loads(path.read_text())


def test_a_case_with_an_unknown_data_type_is_one_line(tmp_path):
    case = tmp_path / "case.toml"
    case.write_text('measured = "x.md"\ncollective = "all_reduce"\ndtype = "Tree/LL"\n[system]\nsystem = "dgx-h100"\n')
    one_line_exit_2(nicksim("validate", str(case), timeout=60), "case.toml: dtype", "unknown data type 'Tree/LL'")


def test_an_output_that_is_a_device_or_a_link_to_one_is_written_to_not_replaced(tmp_path):
    link = tmp_path / "stdout"
    link.symlink_to("/dev/null")
    api.check_output(link, "-J")
    api.write_json(link, {"run": 1})
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stdout"]
    done = nicksim("perf", "all_reduce", "-b", "1M", "-e", "1M", "-J", "/dev/stdout")
    assert done.returncode == 0 and '"algorithm"' in done.stdout, done.stdout[-300:]
    assert Path("/dev/stdout").is_symlink()


@pytest.mark.parametrize("command", [
    ["hang", "diagnose"], ["topo"], ["sweep"], ["validate"],
    ["perf", "all_reduce", "-b", "1M", "-e", "1M", "--engine", "des", "--calibration"],
    ["perf", "all_reduce", "-b", "1M", "-e", "1M", "--compare"],
])
def test_a_named_pipe_with_no_writer_is_read_as_empty_not_waited_on(command, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    done = nicksim(*command, str(fifo), timeout=60)
    assert "Traceback" not in done.stderr
    if command[:2] == ["hang", "diagnose"]:  # an empty log: nothing to diagnose, said as such
        assert done.returncode == 0 and "category: unknown" in done.stdout
    else:
        one_line_exit_2(done, str(fifo))


def test_a_pipe_with_a_writer_is_read_whole(tmp_path):
    log = "a line a writer sent\n" * 3
    done = subprocess.run([sys.executable, "-m", "nicksim", "hang", "diagnose", "/dev/stdin"], cwd=REPO, input=log,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "found in 1 file(s) (3 lines)" in done.stdout, done.stdout


def test_a_topology_with_more_nodes_of_a_kind_than_nccl_holds_is_refused_at_once(tmp_path):
    gpu = ('<pci busid="0000:{b:02x}:{d:02x}.0" class="0x030200" vendor="0x10de" device="0x2330" '
           'link_speed="32.0 GT/s PCIe" link_width="16"><gpu dev="{i}" sm="90" rank="{i}" gdr="1"/></pci>')
    gpus = "".join(gpu.format(b=i // 32, d=i % 32, i=i) for i in range(700))
    path = tmp_path / "big.xml"
    path.write_text(f'<system version="1"><cpu numaid="0" affinity="ff" arch="x86_64" vendor="GenuineIntel" '
                    f'familyid="6" modelid="143">{gpus}</cpu></system>')
    start = time.monotonic()
    one_line_exit_2(nicksim("topo", str(path)), "700 <gpu> elements: NCCL 2.30 creates at most 640 nodes of a kind")
    assert time.monotonic() - start < 30  # refused before the work that grows as the cube of the count
