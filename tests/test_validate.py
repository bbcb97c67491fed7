"""`nicksim validate`: cases, errors by size band, the report, and the project's accuracy baseline."""
import json
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import REPO, run_cli
from nicksim.studies.validate import find_cases, load_case, report_tail, run_case, summary

MiB = 1 << 20


def write_case(folder: Path, measured: str, name: str = "case", **extra) -> Path:
    lines = [f'measured = "{measured}"', 'collective = "all_reduce"']
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items() if not isinstance(v, dict)]
    lines += ["[system]", 'system = "dgx-h100"']
    for table, values in ((k, v) for k, v in extra.items() if isinstance(v, dict)):
        lines.append(f"[{table}]")
        lines += [f'"{k}" = {json.dumps(v)}' for k, v in values.items()]
    path = folder / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def model_output(tmp_path: Path, scale: float = 1.0) -> Path:
    """nicksim's own nccl-tests table for one DGX H100, its times stretched by `scale`."""
    out = run_cli("perf", "all_reduce", "--system", "dgx-h100", "-b", "16K", "-e", "1G", "-f", "4", "-J",
                  str(tmp_path / "run.json"))
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "run.json").read_text())
    for row in doc["results"]:
        for side in ("out_of_place", "in_place"):
            row[side]["time"] *= scale
            row[side]["alg_bw"] /= scale
            row[side]["bus_bw"] /= scale
    path = tmp_path / "measured.json"
    path.write_text(json.dumps(doc))
    return path


def test_an_engine_against_its_own_output_has_no_error(tmp_path):
    measured = model_output(tmp_path)
    result = run_case(load_case(write_case(tmp_path, measured.name)), "model")
    assert result.error is None and len(result.points) == 9  # 16K, 64K, ... 1G
    assert max(abs(p.error_pct) for p in result.points) < 1e-6


def test_errors_are_predicted_over_measured_and_banded(tmp_path):
    # Measured 25% slower than the model everywhere: the model is 25% fast in every band.
    result = run_case(load_case(write_case(tmp_path, model_output(tmp_path, scale=1.25).name)), "model")
    assert all(p.error_pct == pytest.approx(25.0, abs=0.2) for p in result.points)
    assert {band for band in ("<64K", "64K-16M", "16M-256M", ">=256M") if result.scored(band)} == \
        {"<64K", "64K-16M", "16M-256M", ">=256M"}
    assert len(result.scored()) == 6  # 1M .. 1G count for the targets (>= 1 MiB)
    s = summary([result])
    assert s["median_pct"] == pytest.approx(25.0, abs=0.2) and s["meeting_targets"] == []
    # With a second case 56.25% off, the geometric mean of |error| is sqrt(25 x 56.25) = 37.5%,
    # the arithmetic mean (and here the median) 40.6%.
    other = run_case(load_case(write_case(tmp_path, model_output(tmp_path, scale=1.5625).name)), "model")
    s = summary([result, other])
    assert s["geomean_pct"] == pytest.approx(37.5, abs=0.3) and s["mean_pct"] == pytest.approx(40.6, abs=0.3)
    assert s["geomean_every_size_pct"] == pytest.approx(37.5, abs=0.3)


def test_the_median_over_cases_counts_each_case_once(tmp_path):
    # One case 25% off at its 6 sizes >= 1 MiB, two 56.25% off at 2 sizes each: pooled, the 6 sizes of the first
    # outvote the other two cases (median 25%); over cases, each case's median counts once (56.25%).
    many = run_case(load_case(write_case(tmp_path, model_output(tmp_path, scale=1.25).name)), "model")
    few = run_case(load_case(write_case(tmp_path, model_output(tmp_path, scale=1.5625).name)), "model")
    few = replace(few, points=tuple(p for p in few.points if p.nbytes >= 1 << 20)[:2])
    s = summary([many, few, few])
    assert s["median_pct"] == pytest.approx(25.0, abs=0.2)
    assert s["case_median_pct"] == pytest.approx(56.25, abs=0.3)
    assert "# over cases: the median of each case's median |error| 56." in "\n".join(report_tail([many, few, few]))


def test_known_choices_are_checked(tmp_path):
    measured = model_output(tmp_path)
    case = load_case(write_case(tmp_path, measured.name, expect={"1G": "NVLS", "16K": "Tree/LL"}))
    points = {p.nbytes: p for p in run_case(case, "model").points}
    assert points[1 << 30].expected_ok is True
    assert points[16 << 10].expected_ok is (points[16 << 10].algorithm == "Tree" and points[16 << 10].protocol == "LL")
    out = run_cli("validate", str(tmp_path / "case.toml"))
    assert "NCCL's known choices matched" in out.stdout


def test_a_case_without_its_measurements_is_reported_not_run_and_fails(tmp_path):
    write_case(tmp_path, "nowhere.csv")
    out = run_cli("validate", str(tmp_path))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "1 case(s) did not run" in out.stderr
    assert "not run: " in out.stdout and "nowhere.csv: no such file" in out.stdout and "0 of 1 cases ran" in out.stdout


@pytest.mark.parametrize("text, complaint", [
    ('measured = "x"\ncollective = "all_reduce"\n[system]\nsystem = "dgx-h100"\ncolour = 1\n', "unknown key 'colour'"),
    ('collective = "all_reduce"\n[system]\nsystem = "dgx-h100"\n', "no 'rows' or 'measured'"),
    ('measured = "x"\ncollective = "allreduce_fast"\n[system]\nsystem = "dgx-h100"\n', "collective"),
    ('measured = "x"\ncollective = "all_reduce"\n[system]\nsystem = "dgx-h100"\nnodes = "two"\n', "nodes"),
    ('measured = "x"\ncollective = "all_reduce"\n[system]\nnodes = 2\n', "names no system"),
    ('measured = "x"\ncollective = [\n', "not TOML"),
    ('measured = "x"\ncollective = "all_reduce"\nexpect = 3\n[system]\nsystem = "dgx-h100"\n', "[expect]"),
    ('measured = "x"\ncollective = "all_reduce"\nngpus = 0\n[system]\nsystem = "dgx-h100"\n', "ngpus = 0"),
    ('measured = "x"\ncollective = "all_reduce"\nngpus = "8"\n[system]\nsystem = "dgx-h100"\n', "ngpus"),
])
def test_a_bad_case_file_is_one_line_naming_it(tmp_path, text, complaint):
    (tmp_path / "bad.toml").write_text(text)
    out = run_cli("validate", str(tmp_path / "bad.toml"))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "bad.toml" in out.stderr and complaint in out.stderr


def test_an_empty_or_missing_folder_is_an_error(tmp_path):
    assert "no case files" in run_cli("validate", str(tmp_path)).stderr
    assert run_cli("validate", str(tmp_path / "nope")).returncode == 2


def test_json_and_plots_come_out(tmp_path):
    measured = model_output(tmp_path, scale=0.9)
    write_case(tmp_path, measured.name)
    out = run_cli("validate", str(tmp_path / "case.toml"), "-J", str(tmp_path / "v.json"), "--plots",
                  str(tmp_path / "plots"))
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "v.json").read_text())["engines"][0]
    assert doc["engine"] == "nccl" and doc["cases"][0]["median_pct"] == pytest.approx(10.0, abs=1e-6)
    assert (tmp_path / "plots" / "case.png").read_bytes()[:4] == b"\x89PNG"


def test_a_calibration_sets_the_des_parameters(tmp_path):
    measured = model_output(tmp_path)
    write_case(tmp_path, measured.name)
    (tmp_path / "half.toml").write_text('[set]\n"nvlink.bw_gbps" = 185.4\n')
    base = ["validate", str(tmp_path / "case.toml"), "--engine", "des", "-J"]
    assert run_cli(*base, str(tmp_path / "a.json")).returncode == 0
    out = run_cli(*base, str(tmp_path / "b.json"), "--calibration", str(tmp_path / "half.toml"))
    assert out.returncode == 0, out.stderr
    last = [json.loads((tmp_path / f).read_text())["engines"][0]["cases"][0]["points"][-1]["predicted_busbw_gbps"]
            for f in ("a.json", "b.json")]
    assert last[1] == pytest.approx(last[0] / 2, rel=0.05)  # 1 GiB NVLS: the NVLink ports bind
    (tmp_path / "bad.toml").write_text('[set]\n"cta.speed" = 1\n')
    bad = run_cli("validate", str(tmp_path / "case.toml"), "--engine", "des", "--calibration", str(tmp_path / "bad.toml"))
    assert bad.returncode == 2 and "cta.speed" in bad.stderr
    model_only = run_cli("validate", str(tmp_path / "case.toml"), "--calibration", str(tmp_path / "half.toml"))
    assert model_only.returncode == 2 and "--engine des" in model_only.stderr


def _project_cases():
    """The default run's cases and those set aside in validation/large (the DES takes minutes)."""
    return find_cases(REPO / "validation") + find_cases(REPO / "validation" / "large")


def test_every_project_case_names_a_source_and_a_system():
    cases = _project_cases()
    assert len(cases) >= 40
    for case in cases:
        assert case.source and case.title and case.spec.system, case.path


def test_the_cases_come_from_many_publishers():
    from nicksim.studies.loso import source_of
    assert len({source_of(case) for case in _project_cases()}) >= 16


def test_every_project_case_carries_its_rows_and_names_a_built_in_system():
    # A clone has nothing beside it: the measured numbers are in the case, the system in the catalog.
    from nicksim.topology.catalog import CATALOG
    for case in _project_cases():
        assert case.measured is None and case.rows, case.path
        assert case.spec.system in CATALOG, (case.path, case.spec.system)
        assert "shared" not in Path(case.path).read_text(), case.path


def test_cases_validate_from_any_folder(tmp_path):
    for name in ("C01", "C19-all_reduce"):
        (tmp_path / f"{name}.toml").write_text((REPO / "validation" / f"{name}.toml").read_text())
    out = run_cli("validate", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "# overall: 2 of 2 cases ran" in out.stdout and "not run" not in out.stdout


ROWS = """# collective=all_reduce nranks=8 dtype=float redop=sum
size_bytes,time_us,algbw_GBps,busbw_GBps
{rows}"""


def test_inline_rows_are_read_as_a_file_would_be(tmp_path):
    measured = model_output(tmp_path)
    from_file = run_case(load_case(write_case(tmp_path, measured.name)), "model")
    rows = "\n".join(f"{p.nbytes},1,1,{p.measured_busbw_gbps!r}" for p in from_file.points)
    path = tmp_path / "inline.toml"
    path.write_text(write_case(tmp_path, measured.name).read_text().replace(
        f'measured = "{measured.name}"', 'rows = """\n' + ROWS.format(rows=rows) + '\n"""'))
    inline = run_case(load_case(path), "model")
    assert inline.error is None
    assert [(p.nbytes, p.measured_busbw_gbps, p.predicted_busbw_gbps) for p in inline.points] == \
        [(p.nbytes, p.measured_busbw_gbps, p.predicted_busbw_gbps) for p in from_file.points]


@pytest.mark.parametrize("head,rows,says", [
    ("", None, "no 'rows' or 'measured'"),
    ('measured = "m.log"', "1048576,10,100,175", "both 'rows' and 'measured'"),
    ("", "8,10,0,0\n16,10,0,0", "nothing to compare"),
    ("", "not,a,row", "rows"),
])
def test_a_case_with_nothing_to_compare_is_an_error(tmp_path, head, rows, says):
    lines = [head, 'collective = "all_reduce"']
    if rows is not None:
        lines.append('rows = """\n' + ROWS.format(rows=rows) + '\n"""')
    (tmp_path / "bad.toml").write_text("\n".join(lines + ["[system]", 'system = "dgx-h100"']) + "\n")
    out = run_cli("validate", str(tmp_path / "bad.toml"))
    assert out.returncode == 2 and says in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


# The committed report (docs/validation/report.json, from `nicksim validate --engine nccl --engine des -J`) is the
# baseline: no case's |error| at a size >= 1 MiB may grow by more than 2 points, so neither can the
# median over them all. Checked case by case, so the cases run side by side. The DES leaves out
# point-to-point calls on more than 16 ranks here (C05's 80-rank alltoall and sendrecv take 9 and 6 s
# of CPU even run by one node for all, test_translation.py): the report has them.
def _in_test(engine, collective, nranks):
    return engine == "nccl" or collective not in ("alltoall", "sendrecv") or nranks <= 16


def _baseline_cases():
    docs = json.loads((REPO / "docs" / "validation" / "report.json").read_text())["engines"]
    return [(doc["engine"], case) for doc in docs for case in doc["cases"]
            if case["error"] is None and _in_test(doc["engine"], case["collective"], case["nranks"])]


def test_the_baseline_covers_both_engines_and_every_case():
    cases = _baseline_cases()
    assert {engine for engine, _ in cases} == {"nccl", "des"}
    assert len([c for engine, c in cases if engine == "nccl"]) >= 20


@pytest.mark.parametrize("engine,baseline", _baseline_cases(), ids=lambda v: v if isinstance(v, str) else v["name"])
def test_no_error_grows_over_the_committed_report(engine, baseline):
    (case,) = [c for c in find_cases(REPO / "validation") if c.name == baseline["name"]]
    result = run_case(case, engine)
    assert result.error is None, result.error
    before = {p["nbytes"]: abs(p["error_pct"]) for p in baseline["points"] if p["nbytes"] >= MiB}
    now = {p.nbytes: abs(p.error_pct) for p in result.points if p.nbytes >= MiB}
    assert now.keys() == before.keys()
    grown = {n: (round(before[n], 1), round(now[n], 1)) for n in now if now[n] > before[n] + 2.0}
    assert not grown, f"|error| % (committed, now) by size: {grown}"
