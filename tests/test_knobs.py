"""Every knob nicksim lists: its grammar (a bad value warns like NCCL and keeps the default), the
releases that read it, and, for each knob with an effect, a test that shows the effect."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import need_validation, run_cli
from nicksim.calls import call_for_size
from nicksim.constants.knobs import NO_EFFECT
from nicksim.engines import engine_result
from nicksim.errors import UsageError
from nicksim.job import JobSpec, load_job
from nicksim.params import KNOBS, read_params
from nicksim.plan.chunking import plan_call
from nicksim.realhw.launch import root_address
from nicksim.scenarios import SCENARIOS
from nicksim.scenarios.replay import TorchSettings, replay

ROOT = Path(__file__).resolve().parents[1]


def _job(env=None, version="2.30", **spec):
    return load_job(JobSpec(nccl_version=version, **spec), read_params(env or {}))


# --- the table itself ---------------------------------------------------------------------------------

def _read_in_code(name: str) -> bool:
    """Whether some module besides the knob table reads `name` (as a string literal)."""
    for path in (ROOT / "nicksim").rglob("*.py"):
        if path.name in ("knobs.py",) and path.parent.name == "constants":
            continue
        if f'"{name}"' in path.read_text():
            return True
    return False


def test_every_knob_the_issue_names_is_listed():
    named = ("NCCL_ALGO NCCL_PROTO NCCL_NVLS_ENABLE NCCL_COLLNET_ENABLE NCCL_MAX_CTAS NCCL_MIN_CTAS NCCL_MIN_NCHANNELS "
             "NCCL_MAX_NCHANNELS NCCL_NTHREADS NCCL_MAX_NTHREADS NCCL_BUFFSIZE NCCL_P2P_NET_CHUNKSIZE "
             "NCCL_P2P_NVL_CHUNKSIZE NCCL_P2P_LL_THRESHOLD NCCL_P2P_LEVEL NCCL_P2P_DISABLE NCCL_SHM_DISABLE "
             "NCCL_NET_GDR_LEVEL NCCL_NET_GDR_C2C NCCL_CROSS_NIC NCCL_P2P_PXN_LEVEL NCCL_PXN_DISABLE NCCL_IB_DISABLE "
             "NCCL_IB_HCA NCCL_IB_GID_INDEX NCCL_IB_TC NCCL_IB_TIMEOUT NCCL_IB_RETRY_CNT NCCL_IB_QPS_PER_CONNECTION "
             "NCCL_IB_SPLIT_DATA_ON_QPS NCCL_IB_ADAPTIVE_ROUTING NCCL_IB_MERGE_NICS NCCL_SOCKET_IFNAME "
             "NCCL_SOCKET_NTHREADS NCCL_NSOCKS_PERTHREAD NCCL_COMM_ID NCCL_TOPO_FILE NCCL_TOPO_DUMP_FILE NCCL_GRAPH_FILE "
             "NCCL_GRAPH_DUMP_FILE NCCL_MNNVL_ENABLE NCCL_CGA_CLUSTER_SIZE NCCL_NET_OVERHEAD NCCL_LL128_BUFFSIZE "
             "NCCL_LL_BUFFSIZE NCCL_CUMEM_ENABLE NCCL_SINGLE_RING_THRESHOLD NCCL_LL_THRESHOLD NCCL_TREE_THRESHOLD "
             "TORCH_NCCL_ASYNC_ERROR_HANDLING TORCH_NCCL_BLOCKING_WAIT TORCH_NCCL_DESYNC_DEBUG "
             "TORCH_NCCL_TRACE_BUFFER_SIZE TORCH_NCCL_DUMP_ON_TIMEOUT NCCL_DEBUG NCCL_DEBUG_SUBSYS NCCL_DEBUG_FILE")
    assert not [name for name in named.split() if name not in KNOBS]


@pytest.mark.parametrize("name", sorted(KNOBS))
def test_a_knob_said_to_have_an_effect_is_read_by_the_code(name):
    knob = KNOBS[name]
    effects = [knob.effect(e) for e in ("model", "des", "real")]
    claimed = [e for e in effects if not e.startswith((NO_EFFECT, "none", "no effect"))]
    assert not claimed or _read_in_code(name), f"{name} claims {claimed} but nothing reads it"


def test_env_lists_every_knob_with_its_effect_per_engine(tmp_path):
    out = run_cli("env", "--json", str(tmp_path / "env.json"))
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "env.json").read_text())
    assert [k["name"] for k in doc["knobs"]] == list(KNOBS)
    cga = next(k for k in doc["knobs"] if k["name"] == "NCCL_CGA_CLUSTER_SIZE")
    assert cga["nccl"].startswith("none") and cga["releases"] == "2.15+"
    assert "NCCL_IB_QPS_PER_CONNECTION = unset; default 1; NCCL 2.10+" in out.stdout


def test_env_with_a_system_says_what_its_job_uses():
    # computed defaults: 16 NVLS channels on SM90, 24 on a single-node SM100 (2.27+); adaptive routing on
    # for an InfiniBand fabric; channels as the search found them
    h100 = run_cli("env", "NCCL_NVLS_NCHANNELS", "NCCL_IB_ADAPTIVE_ROUTING", "NCCL_MAX_CTAS", "--system", "dgx-h100")
    assert "NCCL_NVLS_NCHANNELS = unset; default unset; on dgx-h100: 16;" in h100.stdout
    assert "NCCL_IB_ADAPTIVE_ROUTING = unset; default -2; on dgx-h100: 1;" in h100.stdout
    channels = _job(system="dgx-h100").channels.n_channels
    assert f"on dgx-h100: {channels} channels;" in h100.stdout
    b200 = run_cli("env", "NCCL_NVLS_NCHANNELS", "--system", "dgx-b200")
    assert "on dgx-b200: 24;" in b200.stdout
    forced = run_cli("env", "NCCL_IB_ADAPTIVE_ROUTING", "--system", "dgx-h100", "--env", "NCCL_IB_ADAPTIVE_ROUTING=0")
    assert "on dgx-h100: 0;" in forced.stdout


def test_env_says_where_a_value_came_from_and_what_the_release_does_with_it():
    out = run_cli("env", "NCCL_PAT_ENABLE", "NCCL_BUFFSIZE", "--nccl-version", "2.22", "--env", "NCCL_PAT_ENABLE=1",
                  "--env", "NCCL_BUFFSIZE=0x200000")
    assert "NCCL_PAT_ENABLE = 1 (--env, ignored (not read by 2.22)); default 2; NCCL 2.23+" in out.stdout
    assert "NCCL_BUFFSIZE = 0x200000 (--env); default 4194304; NCCL 2.3+" in out.stdout
    assert run_cli("env", "NCCL_NO_SUCH").returncode == 2


# --- grammar: a bad value warns like NCCL and keeps the default ----------------------------------------

@pytest.mark.parametrize("text,value", [("8388608", 8388608), ("0x800000", 8388608), ("040000000", 8388608),
                                        ("8388608abc", 8388608), (" 8388608", 8388608), ("-1", -1)])
def test_integers_read_as_strtoll_base_0(text, value):
    assert read_params({"NCCL_NTHREADS": text}).get("NCCL_NTHREADS") == value  # a knob with no lower bound


@pytest.mark.parametrize("text,value,tail", [("1.8e-162", 1, ".8e-162"), ("4M", 4, "M"), ("0x10g", 16, "g")])
def test_text_after_the_number_is_said_to_be_ignored_and_the_number_is_what_is_logged(text, value, tail):
    params = read_params({"NCCL_P2P_LL_THRESHOLD": text})
    assert params.get("NCCL_P2P_LL_THRESHOLD") == value  # as strtoll reads it
    assert params.warnings == (f"NCCL_P2P_LL_THRESHOLD={text} is read as {value}, as NCCL's strtoll reads it "
                               f"('{tail}' ignored; valid: an integer, decimal, 0x hex or 0 octal, with no unit)",)
    assert params.info == (f"NCCL INFO NCCL_P2P_LL_THRESHOLD set by environment to {value}.",)  # param.cc's %lld


def test_a_buffer_size_with_a_unit_is_refused_saying_how_it_was_read():
    with pytest.raises(UsageError, match=r"NCCL_BUFFSIZE=4M \(read as 4: no units\) cannot run"):
        read_params({"NCCL_BUFFSIZE": "4M"})


@pytest.mark.parametrize("name,text,line,used", [
    ("NCCL_NTHREADS", "100", "Invalid NCCL_NTHREADS 100 (must be a multiple of 32).", 512),
    ("NCCL_NTHREADS", "1024", "Invalid NCCL_NTHREADS 1024 (maximum 512).", 512),
    ("NCCL_NTHREADS", "32", "Invalid NCCL_NTHREADS 32 (minimum 64).", 64),
    ("NCCL_LL128_NTHREADS", "96", "Invalid NCCL_LL128_NTHREADS 96 (minimum 160).", 160),
    ("NCCL_LL128_NTHREADS", "704", "Invalid NCCL_LL128_NTHREADS 704 (maximum 640).", 640),
])
def test_thread_counts_out_of_range_warn_as_getnthreads_does_and_the_tuning_uses_its_fallback(name, text, line,
                                                                                              used):
    params = read_params({name: text})
    assert params.warnings == (f"NCCL WARN {line} NCCL uses {used} threads",)
    job = load_job(JobSpec(system="dgx-h100"), params)
    protocol = 1 if name == "NCCL_LL128_NTHREADS" else 0
    ring = job.comm.table.algorithms.index("Ring")
    assert job.comm.table.max_threads[ring][protocol] == used


@pytest.mark.parametrize("name,text", [("NCCL_NTHREADS", "256"), ("NCCL_NTHREADS", "-2"), ("NCCL_LL128_NTHREADS", "640")])
def test_thread_counts_in_range_say_nothing(name, text):
    assert read_params({name: text}).warnings == ()


@pytest.mark.parametrize("text", ["abc", "99999999999999999999", "-"])
def test_a_bad_integer_warns_in_ncclloadparams_words_and_keeps_the_default(text):
    params = read_params({"NCCL_IB_TIMEOUT": text})
    assert not params.is_set("NCCL_IB_TIMEOUT") and params.get("NCCL_IB_TIMEOUT") == 20
    assert params.warnings == (f"NCCL INFO Invalid value {text} for NCCL_IB_TIMEOUT, using default 20.",)


@pytest.mark.parametrize("text", ["mlx5_0", "mlx5_0:1,mlx5_1:1", "^mlx5_3", "=mlx5_0", "^=mlx5_0:1", "mlx5"])
def test_device_lists_in_parsestringlists_grammar(text):
    params = read_params({"NCCL_IB_HCA": text})
    assert params.get("NCCL_IB_HCA") == text and not params.warnings


@pytest.mark.parametrize("text", ["^", "=", ",", "mlx5_0:x", "mlx5 0"])
def test_a_device_list_that_matches_nothing_sensible_is_refused(text):
    params = read_params({"NCCL_SOCKET_IFNAME": text})
    assert not params.is_set("NCCL_SOCKET_IFNAME")
    assert "is not a device list" in params.warnings[0]


@pytest.mark.parametrize("text,ok", [("10.0.0.1:29500", True), ("node7:1", True), ("[fe80::1]:4000", True),
                                     ("[fe80::1%eth0]:4000", True), ("node7", False), ("node7:0", False),
                                     ("node7:70000", False), ("a:b", False)])
def test_comm_id_grammar(text, ok):
    # bootstrap.cc refuses a malformed NCCL_COMM_ID outright; the real backend says which and why
    params = read_params({"NCCL_COMM_ID": text})
    if ok:
        assert root_address(params, {})[1] in (29500, 1, 4000)
    else:
        with pytest.raises(UsageError, match="NCCL_COMM_ID.*host:port"):
            root_address(params, {})


# --- releases -------------------------------------------------------------------------------------------

def test_a_knob_the_release_does_not_read_is_dropped_with_a_note():
    job = _job({"NCCL_PAT_ENABLE": "1", "NCCL_LL_THRESHOLD": "4096"}, "2.22", system="dgx-h100")
    assert not job.params.is_set("NCCL_PAT_ENABLE") and not job.params.is_set("NCCL_LL_THRESHOLD")
    assert "NCCL_PAT_ENABLE is ignored: NCCL reads it from 2.23 on, not in 2.22" in job.params.notes
    assert "NCCL_LL_THRESHOLD is ignored: NCCL read it from 2.3 until 2.5 (removed), not in 2.22" in job.params.notes


@pytest.mark.parametrize("name", ["NCCL_TREE_THRESHOLD", "NCCL_SINGLE_RING_THRESHOLD", "NCCL_MAX_NTHREADS"])
def test_removed_and_never_read_knobs_are_reported_on_the_command_line(name):
    out = run_cli("perf", "all_reduce", "-b", "1M", "-e", "1M", "--env", f"{name}=1024")
    assert out.returncode == 0 and f"nicksim: {name} is ignored: NCCL read it from" in out.stderr


@pytest.mark.parametrize("name,minor,value", [("NCCL_IB_TIMEOUT", 22, 18), ("NCCL_IB_TIMEOUT", 23, 20),
                                              ("NCCL_IB_SPLIT_DATA_ON_QPS", 19, 1), ("NCCL_IB_SPLIT_DATA_ON_QPS", 20, 0),
                                              ("NCCL_NET_GDR_C2C", 26, 0), ("NCCL_NET_GDR_C2C", 27, 1),
                                              ("NCCL_CUMEM_ENABLE", 18, 0), ("NCCL_IB_TC", 25, 0), ("NCCL_IB_TC", 26, -1)])
def test_defaults_follow_the_release(name, minor, value):
    assert read_params({}).for_version(minor).get(name) == value


def test_deprecated_channel_knobs_are_honoured_with_a_note():
    job = _job({"NCCL_MAX_NCHANNELS": "4"}, system="dgx-h100")
    assert job.channels.n_channels == 4
    assert any(n.startswith("NCCL_MAX_NCHANNELS is deprecated since NCCL 2.17") for n in job.params.notes)
    both = _job({"NCCL_MAX_NCHANNELS": "4", "NCCL_MAX_CTAS": "2"}, system="dgx-h100")
    assert both.channels.n_channels == 2  # the more restrictive


# --- effects ----------------------------------------------------------------------------------------

def test_buffsize_changes_step_sizes_and_small_pipeline_time():
    call = call_for_size("all_reduce", 1 << 20, "float", "sum", 0, 8)
    env = {"NCCL_PROTO": "Simple", "NCCL_ALGO": "Ring", "NCCL_MAX_NCHANNELS": "2"}
    small, default = _job({**env, "NCCL_BUFFSIZE": "65536"}, system="dgx-h100"), _job(env, system="dgx-h100")
    assert plan_call(small.comm, call).step_nbytes == 65536 // 8
    assert plan_call(default.comm, call).step_nbytes == (4 << 20) // 8
    # 8 KiB steps: many more of them, each paying its step latency in the DES; NCCL's own time model
    # (tuning.cc) does not look at the buffer size, and neither does nicksim's model engine.
    des_small, des_default = (engine_result(j, call, "des").time_us for j in (small, default))
    assert des_small > 1.3 * des_default
    assert engine_result(small, call).time_us == engine_result(default, call).time_us


def test_ll_and_ll128_buffer_sizes_set_their_steps():
    job = _job({"NCCL_LL_BUFFSIZE": "262144", "NCCL_LL128_BUFFSIZE": "2457600"}, system="dgx-h100")
    assert job.comm.buff_nbytes[:2] == (262144, 2457600)
    call = call_for_size("all_reduce", 65536, "float", "sum", 0, 8)
    plan = plan_call(_job({"NCCL_LL_BUFFSIZE": "262144", "NCCL_PROTO": "LL"}, system="dgx-h100").comm, call)
    assert plan.step_nbytes == 262144 // 8


def test_p2p_ll_threshold_moves_send_recv_between_ll_and_simple():
    call = call_for_size("sendrecv", 32768, "float", "sum", 0, 16)
    default = engine_result(_job(system="dgx-h100", nodes=2), call)
    raised = engine_result(_job({"NCCL_P2P_LL_THRESHOLD": "1048576"}, system="dgx-h100", nodes=2), call)
    lowered = engine_result(_job({"NCCL_P2P_LL_THRESHOLD": "0"}, system="dgx-h100", nodes=2), call)
    assert {default.protocol, raised.protocol, lowered.protocol} == {"LL", "Simple"}
    assert raised.protocol == "LL" and lowered.protocol == "Simple"


def test_topo_file_is_the_same_as_system():
    topo = str(need_validation() / "topologies" / "topo_azure_ndv5.xml")
    by_flag = run_cli("search", "--system", topo, "--gpu", "h100")
    by_env = run_cli("search", "--gpu", "h100", "--env", f"NCCL_TOPO_FILE={topo}")
    assert by_flag.returncode == 0 and by_flag.stdout == by_env.stdout


def test_topo_and_graph_dump_files_are_written_during_perf(tmp_path):
    topo, graph = tmp_path / "topo.xml", tmp_path / "graph.xml"
    out = run_cli("perf", "all_reduce", "-b", "1M", "-e", "1M", "--system", "dgx-a100",
                  "--env", f"NCCL_TOPO_DUMP_FILE={topo}", "--env", f"NCCL_GRAPH_DUMP_FILE={graph}")
    assert out.returncode == 0, out.stderr
    assert "<system" in topo.read_text() and "<graphs" in graph.read_text()
    again = run_cli("search", "--system", str(topo))
    assert again.stdout == run_cli("search", "dgx-a100").stdout  # the dump loads back as the same machine
    reuse = run_cli("search", "dgx-a100", "--env", f"NCCL_GRAPH_FILE={graph}")
    assert reuse.returncode == 0 and reuse.stdout.splitlines()[0] == again.stdout.splitlines()[0]


def test_ib_hca_selects_the_nics_nccl_uses():
    every = _job(system="dgx-h100", nodes=2)
    two = _job({"NCCL_IB_HCA": "=mlx5_0,mlx5_1"}, system="dgx-h100", nodes=2)
    assert len(every.paths.system.nets()) == 8 and len(two.paths.system.nets()) == 2
    assert two.graphs["ring"].n_channels < every.graphs["ring"].n_channels
    none = _job({"NCCL_IB_HCA": "bnxt_re"}, system="dgx-h100", nodes=2)
    assert none.paths.net_plugin == "Socket"  # "NET/IB : No device found.", then sockets
    excluded = _job({"NCCL_IB_HCA": "^=mlx5_0"}, system="dgx-h100", nodes=2)
    names = {excluded.paths.system.nodes[n].net.name for n in excluded.paths.system.nets()}
    assert "mlx5_0" not in names and len(names) == 7


def test_nccl_comm_id_is_the_root_when_nicksim_comm_id_is_not_set():
    assert root_address(read_params({"NCCL_COMM_ID": "10.1.2.3:4000"}), {}) == ("10.1.2.3", 4000)
    both = read_params({"NCCL_COMM_ID": "10.1.2.3:4000", "NICKSIM_COMM_ID": "10.9.9.9:5000"})
    assert root_address(both, {}) == ("10.9.9.9", 5000)


def test_cumem_off_names_ipc_connections():
    on = run_cli("search", "dgx-h100").stdout
    off = run_cli("search", "dgx-h100", "--env", "NCCL_CUMEM_ENABLE=0").stdout
    assert "via P2P/CUMEM" in on and "via P2P/CUMEM" not in off and "via P2P/IPC" in off


# --- PyTorch's watchdog knobs in a hang replay ------------------------------------------------------------

def _replayed(tmp_path, **settings):
    done = replay(SCENARIOS["straggler"], tmp_path, torch=TorchSettings(**settings))
    logs = "\n".join((tmp_path / f"rank{r}.log").read_text() for r in range(SCENARIOS["straggler"].nranks))
    return done, logs


def test_pg_timeout_sets_the_watchdog_limit(tmp_path):
    _, logs = _replayed(tmp_path, pg_timeout_s=60)
    assert "Timeout(ms)=60000)" in logs and "Timeout(ms)=600000)" not in logs


def test_blocking_wait_raises_in_the_caller_and_leaves_no_dump(tmp_path):
    done, logs = _replayed(tmp_path, blocking_wait=True)
    assert "DistBackendError" in logs and "Watchdog caught" not in logs
    assert not list(tmp_path.glob("nccl_trace_rank_*.json"))
    # wait()'s exception still names the call each rank waits in, without the watchdog's progress line
    assert done.diagnosis.category in ("straggler", "stuck-peer")


@pytest.mark.parametrize("handling,teardown", [(3, True), (1, True), (2, False), (0, False)])
def test_async_error_handling_decides_whether_the_process_is_taken_down(tmp_path, handling, teardown):
    _, logs = _replayed(tmp_path, async_error_handling=handling)
    assert ("taking the entire process down" in logs) == teardown


def test_trace_buffer_size_and_dump_on_timeout_shape_the_flight_recorder(tmp_path):
    _replayed(tmp_path / "a", trace_buffer=3)
    assert len(json.loads((tmp_path / "a" / "nccl_trace_rank_0.json").read_text())["entries"]) <= 3
    _replayed(tmp_path / "b", dump_on_timeout=False)
    assert not list((tmp_path / "b").glob("nccl_trace_rank_*.json"))


def test_desync_debug_adds_its_report(tmp_path):
    done, logs = _replayed(tmp_path, desync_debug=True)
    # TraceUtils.h retrieveDesyncReport: the straggler (rank 3) finished the call before and never joined this one
    assert re.search(r"Timeout at collective: ALLREDUCE, #(\d+)", logs)
    seq = int(re.search(r"Timeout at collective: ALLREDUCE, #(\d+)", logs).group(1))
    assert f"[3] finished collective #{seq - 1}, but didn't join collective #{seq} (count from 1)" in logs
    assert done.diagnosis.culprit_ranks == (3,) and "desync report" in done.diagnosis.why
    _, plain = _replayed(tmp_path / "plain")
    assert "Timeout at collective" not in plain


def test_replay_takes_torch_knobs_from_the_command_line(tmp_path):
    out = run_cli("hang", "replay", "straggler", "--out", str(tmp_path), "--env", "TORCH_NCCL_BLOCKING_WAIT=1")
    assert out.returncode == 0, out.stderr
    assert "DistBackendError" in (tmp_path / "rank0.log").read_text()


def test_p2p_ll_threshold_prices_the_protocol_it_picks():
    """NCCL_P2P_LL_THRESHOLD=0 sends a 4 KiB sendrecv as Simple, so it costs Simple's latency, not LL's
    (tuning.cc's Ring baseLat + hwLat[NVLINK] of each protocol; the bytes add a few ns here)."""
    from nicksim.constants import parse_version, tuning_tables
    call = call_for_size("sendrecv", 4096, "float", "sum", 0, 8)
    default = engine_result(_job(system="dgx-h100"), call)
    lowered = engine_result(_job({"NCCL_P2P_LL_THRESHOLD": "0"}, system="dgx-h100"), call)
    tables = tuning_tables(parse_version("2.30"))
    lat = {p: tables.base_lat("Ring", p) + tables.hw_lat("NVLINK", "Ring", p) for p in ("LL", "Simple")}
    assert (default.protocol, lowered.protocol) == ("LL", "Simple")
    assert default.time_us == pytest.approx(lat["LL"], abs=0.1)
    assert lowered.time_us == pytest.approx(lat["Simple"], abs=0.1)
