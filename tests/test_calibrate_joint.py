"""`nicksim calibrate MEASURED...`: both engines fitted jointly to measurements, judged on what the fit did not see."""
from __future__ import annotations

import csv
import io
import json
import re
import statistics
from pathlib import Path

import pytest

from conftest import REPO, VALIDATION, run_cli
from nicksim import api
from nicksim.studies.fit import EngineFit, Observation, PointFit, parse_holdout
from nicksim.studies.measured import log_facts, read_measured
from nicksim.studies.tuner import TUNER_HEADER, TUNER_NAMES

C01_LOG = VALIDATION / "raw" / "aws_p5_KeitaW_nccl-test-output-v2.22.3-1.log"
C01_TOPO = VALIDATION / "topologies" / "topo_aws_p5_48xl_v1.9.2.xml"
C05_LOG = VALIDATION / "raw" / "xxrjun_cluster01_nccl_N10_G8.log"
MiB = 1 << 20


def measured_json(tmp_path: Path, name: str, *args: str) -> Path:
    """An engine's run written as nccl-tests JSON: measurements whose true parameters are known."""
    out = tmp_path / f"{name}.json"
    done = run_cli("perf", *args, "-J", str(out))
    assert done.returncode == 0, done.stderr
    return out


def held_out_medians(fit: EngineFit) -> tuple[float, float]:
    before, after = fit.medians(True)
    assert before is not None and after is not None
    return before, after


# --- what a pasted log says ------------------------------------------------------------------------

def test_the_pasted_log_states_version_network_nodes_and_settings():
    facts = log_facts(C01_LOG.read_text())
    # nccl-test-output-v2.22.3-1.log: "NCCL version 2.22.3+cuda12.2", "NET/OFI Selected Provider is efa",
    # "nNodes 2", and the settings of the launcher's nccl-test.yaml (NCCL_TOPO_FILE names their own file: left out).
    assert facts.version == "2.22.3" and facts.fabric == "efa" and facts.nodes == 2 and facts.channels == 16
    assert dict(facts.settings) == {"NCCL_BUFFSIZE": "8388608", "NCCL_NET_FORCE_FLUSH": "0",
                                    "NCCL_NVLSTREE_MAX_CHUNKSIZE": "524288", "NCCL_NVLS_CHUNKSIZE": "524288",
                                    "NCCL_P2P_NET_CHUNKSIZE": "524288"}
    assert facts.gpu_names == ("NVIDIA H100 80GB HBM3",)


def test_a_real_run_s_trace_is_one_measured_call_with_the_plan_it_ran(tmp_path):
    other = {"engine": "real", "bytes": 4194304, "collective": "all_reduce", "nranks": 2, "algorithm": "Ring",
             "protocol": "Simple", "nchannels": 4, "nthreads": 544, "time_us": 3471.7}
    trace = write(tmp_path, "trace.json", json.dumps({"traceEvents": [], "otherData": other}))
    (run,) = read_measured([str(trace)])
    assert (run.collective, run.nranks, run.points) == ("all_reduce", 2, ((4194304, 3471.7),))
    assert dict(run.facts.settings) == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}  # fitted as what it ran
    des = write(tmp_path, "des.json", json.dumps({"traceEvents": [], "otherData": {**other, "engine": "des"}}))
    with pytest.raises(api.UsageError, match="not of a real run"):
        read_measured([str(des)])


def test_a_log_whose_channels_are_not_the_model_s_is_said(tmp_path):
    # Rank 0's ring lines for 8 channels only, as a job that ran 8 would print them.
    lines = [line for line in C01_LOG.read_text().splitlines()
             if not re.search(r"NCCL INFO Channel (0[89]|1[0-5])/16 :", line)]
    log = write(tmp_path, "eight.log", "\n".join(lines))
    cal = api.calibrate_measured([log], system=str(C01_TOPO), gpu="h100", collective="all_reduce",
                                 engines=["nccl"], min_nbytes=MiB)
    assert cal.runs[0].facts.channels == 8
    assert any("NCCL ran 8 channels, the model plans 16" in note for note in cal.notes), cal.notes


# --- the done-means figures on C01 and C05 (NCCL's time model; the DES's are in docs/calibration.md) ----

def test_c01_fitted_on_every_other_size_predicts_the_rest_within_10_percent():
    cal = api.calibrate_measured([C01_LOG], system=str(C01_TOPO), gpu="h100", collective="all_reduce",
                                 engines=["nccl"], holdout=["alternate"], min_nbytes=MiB)
    fit = cal.fit_of("nccl")
    job = cal.jobs[0]
    # What the log states, taken: 2 nodes of 8, NCCL 2.22, EFA through aws-ofi-nccl.
    assert (job.nodes, job.nranks, job.spec.nccl_version, job.spec.fabric) == (2, 16, "2.22.3", "efa")
    assert len([p for p in fit.points if p.obs.held_out]) == 7 and len(fit.points) == 15
    before, after = held_out_medians(fit)
    assert after <= 10 and after <= before
    assert not fit.over_fitted


def test_a_whole_collective_held_out_is_predicted_from_the_others():
    cal = api.calibrate_measured([C05_LOG], system="dgx-h100", nccl_version="2.29", engines=["nccl"],
                                 holdout=["collective=all_gather"], min_nbytes=MiB)
    fit = cal.fit_of("nccl")
    held = {cal.runs[p.obs.run].collective for p in fit.points if p.obs.held_out}
    assert held == {"all_gather"}
    before, after = held_out_medians(fit)
    assert after <= 10 and after < before
    # NCCL's time model prices no point-to-point call: those tables are named, not fitted.
    assert not {cal.runs[p.obs.run].collective for p in fit.points} & {"sendrecv", "alltoall"}


# --- the fit recovers what made the measurements ---------------------------------------------------

def test_the_model_fit_recovers_the_constants_the_measurements_were_made_with(tmp_path):
    truth = tmp_path / "truth.toml"
    truth.write_text('[nccl]\n"bw.Ring/Simple" = 0.7\n"lat.Ring/LL" = 2.5\n"launch_us" = 0\n')
    made = measured_json(tmp_path, "ring", "all_gather", "--system", "dgx-h100", "--nodes", "2", "--calibration",
                         str(truth), "--env", "NCCL_ALGO=Ring", "-b", "4K", "-e", "1G", "-f", "4")
    cal = api.calibrate_measured([made], system="dgx-h100", nodes=2, env=["NCCL_ALGO=Ring"], engines=["nccl"],
                                 holdout=["alternate"])
    values = cal.fit_of("nccl").values()
    assert values["bw.Ring/Simple"] == pytest.approx(0.7, rel=0.02)
    assert values["lat.Ring/LL"] == pytest.approx(2.5, rel=0.05)
    assert held_out_medians(cal.fit_of("nccl"))[1] < 1


def test_the_des_fit_recovers_the_parameters_and_leaves_what_the_data_cannot_tell(tmp_path):
    made = measured_json(tmp_path, "des", "all_reduce", "--system", "dgx-h100", "--engine", "des", "--set",
                         "launch.scale=3", "--set", "nvlink.efficiency=0.8", "-b", "64K", "-e", "256M", "-f", "4")
    # On one node's rings the launch and the hop chain (NVLink step latency x its hops) both cost once per
    # call, so these sizes cannot tell them apart (the fit keeps one and leaves the other as indistinguishable);
    # given the step latency, the launch is what is left.
    cal = api.calibrate_measured([made], system="dgx-h100", engines=["des"], holdout=["alternate"],
                                 fixed={"cable.bw_gbps": 50, "step_lat.nvlink.scale": 1.0})
    fit = cal.fit_of("des")
    assert fit.values()["cable.bw_gbps"] == 50  # a value given is kept and written with the fit
    by_name = {p.name: p for p in fit.params}
    assert by_name["nvlink.efficiency"].fitted and by_name["nvlink.efficiency"].value == pytest.approx(0.8, rel=0.03)
    assert by_name["launch.scale"].fitted and by_name["launch.scale"].value == pytest.approx(3, rel=0.1)
    # One node: nothing crosses a NIC, so the network's parameters stay at NCCL's values, flagged.
    for name in ("net.efficiency", "net.latency_us", "proxy.overhead_us", "step_lat.net.scale"):
        assert not by_name[name].fitted and "not determined" in by_name[name].left_because
        assert by_name[name].value == by_name[name].default
    before, after = held_out_medians(fit)
    assert after < before / 3  # NCCL's values as a prior keep it from an exact match


# --- over-fitting, hold-out specs ------------------------------------------------------------------

def point(nbytes: int, held: bool, before: float, after: float) -> PointFit:
    return PointFit(Observation(0, nbytes, 100.0, held), before, after)


def test_better_on_what_it_saw_and_worse_on_what_it_did_not_is_over_fitted():
    over = EngineFit("des", (), (point(1, False, 120, 100), point(2, True, 105, 130)))
    fine = EngineFit("des", (), (point(1, False, 120, 100), point(2, True, 120, 101)))
    assert over.over_fitted and not fine.over_fitted


@pytest.mark.parametrize("table, needle", [
    ('[nccl]\n"bw.Rnig/LL" = 0.8\n', "unknown time-model constant 'bw.Rnig/LL'"),
    ('[nccl]\n"x.Ring/LL" = 0.8\n', "unknown time-model constant 'x.Ring/LL'"),
    ('[nccl]\n"bw.Ring/LL" = 9\n', "a number from 0.05 to 4"),
    ('[set]\n"net.efficiency" = 1.5\n', "at most 1.25"),
    ('[other]\nx = 1\n', "no [set] or [nccl] table"),
])
def test_a_calibration_file_out_of_its_ranges_is_named(tmp_path, table, needle):
    path = write(tmp_path, "cal.toml", table)
    done = run_cli("perf", "all_reduce", "--system", "dgx-h100", "--calibration", str(path))
    assert done.returncode == 2 and needle in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_holdout_specs():
    size = lambda t: api.parse_size(t, "--holdout")  # noqa: E731
    h = parse_holdout(["alternate", "size=2M,8M", "collective=allreduce", "nodes=4", "ranks=32"], size,
                      api.collective_name)
    assert h.alternate and h.sizes == {2 * MiB, 8 * MiB} and h.collectives == {"all_reduce"}
    assert h.nodes == {4} and h.ranks == {32}
    for bad in ("size=", "nodes=0", "nodes=x", "every=2", "alternate=1"):
        with pytest.raises(api.UsageError):
            parse_holdout([bad], size, api.collective_name)


# --- the calibration file, read by perf, validate and sweep -----------------------------------------

@pytest.fixture(scope="module")
def c01_calibration(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cal") / "cal.toml"
    done = run_cli("calibrate", str(C01_LOG), "--system", str(C01_TOPO), "--gpu", "h100", "--collective", "all_reduce",
                   "--engine", "nccl", "--holdout", "alternate", "-b", "1M", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "held-out sizes, median |busbw error|" in done.stdout
    return out


def test_the_file_holds_each_engine_s_table(c01_calibration):
    nccl = api.read_calibration(c01_calibration, "nccl")
    assert nccl and all(k.startswith(("bw.", "lat.", "launch_us")) for k in nccl)
    assert api.read_calibration(c01_calibration, "des") == {}  # only NCCL's time model was fitted
    # The DES asked to run with it says so, rather than run uncalibrated.
    done = run_cli("perf", "all_reduce", "--system", "dgx-h100", "--engine", "des", "--calibration",
                   str(c01_calibration))
    assert done.returncode == 2 and "no [set] table for the des engine" in done.stderr


def test_perf_prices_nccl_s_pick_with_the_calibrated_constants(c01_calibration, tmp_path):
    args = ("perf", "all_reduce", "--system", str(C01_TOPO), "--gpu", "h100", "--nodes", "2", "--fabric", "efa",
            "--nccl-version", "2.22", "-b", "1M", "-e", "4G", "-f", "4")
    plain = json.loads(Path(measured_json(tmp_path, "plain", *args[1:])).read_text())["results"]
    calibrated = json.loads(Path(measured_json(tmp_path, "cal", *args[1:], "--calibration",
                                               str(c01_calibration))).read_text())["results"]
    # The same pick at every size, another time: calibration changes the price, not NCCL's choice.
    assert [(r["size"], r["nicksim"]["plan"]["algorithm"]) for r in plain] == \
        [(r["size"], r["nicksim"]["plan"]["algorithm"]) for r in calibrated]
    assert all(a["out_of_place"]["time"] != b["out_of_place"]["time"] for a, b in zip(plain, calibrated))


def test_validate_and_sweep_read_the_file(c01_calibration, tmp_path):
    case = REPO / "validation" / "C01.toml"
    plain, cal = api.validate(case, ["nccl"]), api.validate(case, ["nccl"], c01_calibration)
    errs = [[abs(p.error_pct) for p in v.results["nccl"][0].points if p.nbytes >= MiB] for v in (plain, cal)]
    assert statistics.median(errs[1]) < statistics.median(errs[0])
    grid = tmp_path / "grid.toml"
    (tmp_path / "c.toml").write_text(c01_calibration.read_text())
    grid.write_text(f'[sweep]\nsystem = "{C01_TOPO}"\ngpu = "h100"\nnodes = 2\nfabric = "efa"\n'
                    f'nccl_version = "2.22"\nsizes = ["1M", "1G"]\ncalibration = ["", "c.toml"]\n')
    rows = api.sweep(api.read_grid(grid)).rows
    times = {(r["calibration"], r["nbytes"]): r["time_us"] for r in rows}
    assert times[("", MiB)] != times[("c.toml", MiB)]


# --- the tuner plugin's file -------------------------------------------------------------------------

def test_the_tuner_file_reads_back_as_the_calibrated_choices(tmp_path):
    tuner = tmp_path / "nccl_tuner.conf"
    done = run_cli("calibrate", str(C01_LOG), "--system", str(C01_TOPO), "--gpu", "h100", "--collective", "all_reduce",
                   "--engine", "nccl", "-b", "1M", "--tuner", str(tuner), "-o", str(tmp_path / "cal.toml"))
    assert done.returncode == 0, done.stderr
    lines = [line for line in tuner.read_text().splitlines() if not line.startswith("#")]
    assert lines[0] == TUNER_HEADER
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    assert rows and rows[0]["min_bytes"] == "0" and rows[-1]["max_bytes"] == str((1 << 64) - 1)
    names = {v: k for k, v in TUNER_NAMES["algorithm"].items()}
    protos = {v: k for k, v in TUNER_NAMES["protocol"].items()}
    job = api.load(str(C01_TOPO), gpu="h100", nodes=2, fabric="efa", nccl_version="2.22.3",
                   env=["NCCL_BUFFSIZE=8388608", "NCCL_NVLS_CHUNKSIZE=524288", "NCCL_NVLSTREE_MAX_CHUNKSIZE=524288",
                        "NCCL_NET_FORCE_FLUSH=0", "NCCL_P2P_NET_CHUNKSIZE=524288"])
    calibration = api.read_calibration(tmp_path / "cal.toml", "nccl")
    for row in rows:
        assert (row["collective_type"], row["nNodes"], row["nRanks"]) == ("allreduce", "2", "16")
        size = max(int(row["min_bytes"]), 8)
        # Every pair NCCL prices, forced in turn and timed with the calibrated constants: the fastest is the row's.
        times = {}
        for p in api.priced(job, api.call(job, "all_reduce", size)).rows:
            if p["time_us"] is None or p["time_us"] < 0:
                continue
            pair = (p["algorithm"], p["protocol"])
            forced = api.load(str(C01_TOPO), gpu="h100", nodes=2, fabric="efa", nccl_version="2.22.3",
                              params=api.settings([*(f"{k}={v}" for k, v in job.params.raw.items()),
                                                   f"NCCL_ALGO={pair[0]}", f"NCCL_PROTO={pair[1]}"]))
            r = api.engine("nccl", calibration=calibration).run(forced, api.call(forced, "all_reduce", size))
            if (r.algorithm, r.protocol) == pair:
                times[pair] = r.time_us
        assert min(times, key=times.get) == (names[row["algorithm"]], protos[row["protocol"]])


# --- bad input: one line, status 2 -------------------------------------------------------------------

def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


CSV_16 = "# collective=all_reduce nranks=16 dtype=float redop=sum\nsize_bytes,time_us\n1048576,100\n4194304,150\n"


@pytest.mark.parametrize("make, extra, needle", [
    (lambda d: write(d, "empty.log", "# nThread 1 nGpus 1\n"), (), "no nccl-tests results found"),
    (lambda d: write(d, "ranks.csv", CSV_16), ("--system", "dgx-h100", "--nodes", "1"),
     "the measurements have 16 ranks, the system has 8"),
    (lambda d: write(d, "gpu.log", C01_LOG.read_text().replace("H100 80GB HBM3", "A100-SXM4-80GB")),
     ("--system", str(C01_TOPO), "--gpu", "h100", "--collective", "all_reduce"), "ran on NVIDIA A100-SXM4-80GB"),
    (lambda d: write(d, "fast.csv", CSV_16.replace("1048576,100\n4194304,150", "268435456,300\n1073741824,1000\n"
                                                                               "4294967296,4000\n17179869184,16000")),
     ("--system", "dgx-h100", "--nodes", "2", "--engine", "nccl"), "does not fit"),
    (lambda d: write(d, "x.csv", CSV_16), ("--system", "dgx-h100", "--nodes", "2", "--holdout", "every=2"),
     "--holdout"),
    (lambda d: write(d, "y.csv", CSV_16), ("--system", "dgx-h100", "--nodes", "2", "--engine", "nccl", "--set",
                                           "net.latency_us=4"), "--set needs the DES"),
    (lambda d: Path("/nonexistent/run.log"), (), "no such file"),
])
def test_bad_calibration_input_is_one_line_and_status_2(tmp_path, make, extra, needle):
    done = run_cli("calibrate", str(make(tmp_path)), *extra)
    assert done.returncode == 2, done.stdout + done.stderr
    assert needle in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
