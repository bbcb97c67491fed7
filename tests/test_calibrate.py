"""`nicksim calibrate`: a DES parameter fitted to measured runs, and the error it leaves on sources left out."""
from pathlib import Path

import pytest

from conftest import run_cli
from nicksim.studies.calibrate import calibration_text, fit, format_fit, source_of
from nicksim.studies.validate import find_cases, read_calibration

MiB = 1 << 20


def des_measured(tmp_path: Path, collective: str, scale: float) -> Path:
    """A DES run of one DGX H100 at step_lat.scale=`scale`, written as nccl-tests JSON: measurements
    whose true scale is known."""
    out_json = tmp_path / f"{collective}.json"
    out = run_cli("perf", collective, "--system", "dgx-h100", "--engine", "des", "--set", f"step_lat.scale={scale}",
                  "-b", "1M", "-e", "64M", "-f", "4", "-J", str(out_json))
    assert out.returncode == 0, out.stderr
    return out_json


def case_file(tmp_path: Path, collective: str, measured: Path) -> Path:
    path = tmp_path / f"{collective}.toml"
    path.write_text(f'measured = "{measured.name}"\ncollective = "{collective}"\n[system]\nsystem = "dgx-h100"\n')
    return path


def test_the_fit_recovers_the_scale_the_measurements_were_made_with(tmp_path):
    for coll in ("all_reduce", "all_gather"):
        case_file(tmp_path, coll, des_measured(tmp_path, coll, 2.8))
    cases = find_cases(tmp_path)
    assert sorted(source_of(c) for c in cases) == ["all_gather.json", "all_reduce.json"]
    f = fit(cases, "step_lat.scale", (1.0, 2.8, 5.6))
    assert f.value == 2.8
    assert f.median_at(2.8) < 0.01
    assert f.median_at(1.0) > 1 and f.median_at(5.6) > 1  # the scale shows at these sizes, both ways
    # Each source left out: the other alone picks 2.8 too, and 2.8 fits the one left out.
    assert [(h.source, h.value) for h in f.held_out] == [("all_gather.json", 2.8), ("all_reduce.json", 2.8)]
    assert f.held_out_median_pct < 0.01
    text = calibration_text(f)
    assert "held out" in text and "chosen" in text
    (tmp_path / "cal.toml").write_text(text)
    assert read_calibration(tmp_path / "cal.toml") == {"step_lat.scale": 2.8}


def test_perf_reads_a_calibration_file_as_it_reads_set(tmp_path):
    cal = tmp_path / "cal.toml"
    cal.write_text('[set]\n"step_lat.scale" = 4\n')
    args = ("perf", "all_reduce", "--system", "dgx-h100", "--engine", "des", "-b", "8M", "-e", "8M")
    by_file = run_cli(*args, "--calibration", str(cal))
    by_set = run_cli(*args, "--set", "step_lat.scale=4")
    plain = run_cli(*args)
    assert by_file.returncode == by_set.returncode == plain.returncode == 0
    rows = [[line for line in out.stdout.splitlines() if line.strip().startswith("8388608")] for out in
            (by_file, by_set, plain)]
    assert rows[0] == rows[1] and rows[0] != rows[2]
    # --set wins over the file
    both = run_cli(*args, "--calibration", str(cal), "--set", "step_lat.scale=1")
    assert [line for line in both.stdout.splitlines() if line.strip().startswith("8388608")] == rows[2]


@pytest.mark.parametrize("argv, needle", [
    (("perf", "all_reduce", "--system", "dgx-h100", "--engine", "real", "--calibration", "x.toml"),
     "--calibration is for the nccl and DES engines"),
    (("calibrate", "/nonexistent/cases"), "no such file or folder"),
    (("calibrate", "--values", "1,-2"), "every value must be above 0"),
    (("calibrate", "--fit", "nvlink.bw_gbps"), "invalid choice"),
])
def test_bad_calibration_input_is_one_line_and_status_2(argv, needle):
    out = run_cli(*argv)
    assert out.returncode == 2
    assert needle in out.stderr and "Traceback" not in out.stderr


def test_cases_the_des_cannot_run_are_named_not_fitted(tmp_path):
    case_file(tmp_path, "all_reduce", des_measured(tmp_path, "all_reduce", 1.0))
    (tmp_path / "gone.toml").write_text('measured = "gone.json"\ncollective = "all_reduce"\n[system]\nsystem = "dgx-h100"\n')
    f = fit(find_cases(tmp_path), "step_lat.scale", (1.0, 2.0))
    assert f.cases == ("all_reduce",) and f.value == 1.0
    assert f.skipped and f.skipped[0][0] == "gone" and "no such file" in f.skipped[0][1]
    assert f.held_out == ()  # one source: nothing to hold out
    assert any("not used: gone" in line for line in format_fit(f))
