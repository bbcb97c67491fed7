"""Leave one source out (studies/loso.py): who published a case, and whether a value picked on the
other publishers' cases helps a publisher's own."""
import pytest

from conftest import REPO, run_cli
from nicksim.studies.loso import format_loso, leave_one_source_out, source_of
from nicksim.studies.validate import CaseResult, Point, load_case

MiB = 1 << 20


@pytest.mark.parametrize("source, publisher", [
    ("github.com/KeitaW/p5-nccl-test-2024-07-19 @ 1c78584 nccl-test-output.log (all_reduce_perf -b 8)",
     "github.com/KeitaW/p5-nccl-test-2024-07-19"),
    ("https://github.com/NVIDIA/nccl-tests/issues/309 (issue body by qoofyk)", "github.com/NVIDIA/nccl-tests#309"),
    ("github.com/NVIDIA/nccl/issues/1411 (2024-08-21: 2 H800 nodes)", "github.com/NVIDIA/nccl#1411"),
    ("blog.chlc.cc/p/rtx4090-gpudirect-p2p-unlocked (2025-02-07), transcribed", "blog.chlc.cc/p"),
    ("an nccl-tests note on a node named thanos", "an nccl-tests note on"),
])
def test_a_case_is_known_by_its_publisher(tmp_path, source, publisher):
    path = tmp_path / "c.toml"
    path.write_text(f'source = "{source}"\nmeasured = "x"\ncollective = "all_reduce"\n[system]\nsystem = "dgx-h100"\n')
    assert source_of(load_case(path)) == publisher


def _cases(tmp_path, sources):
    out = []
    for i, source in enumerate(sources):
        path = tmp_path / f"c{i}.toml"
        path.write_text(f'source = "{source}"\nmeasured = "x"\ncollective = "all_reduce"\n[system]\n'
                        'system = "dgx-h100"\n')
        out.append(load_case(path))
    return out


def test_the_others_pick_is_judged_on_the_source_left_out(tmp_path):
    # Sources a and b (two cases each) are best at 2; source c, one case, is best at 5 and worst at 2.
    cases = _cases(tmp_path, ["github.com/a/x", "github.com/a/x", "github.com/b/y", "github.com/b/y",
                              "github.com/c/z"])
    error = {("github.com/a/x", None): 10, ("github.com/a/x", 2.0): 1, ("github.com/a/x", 5.0): 20,
             ("github.com/b/y", None): 10, ("github.com/b/y", 2.0): 2, ("github.com/b/y", 5.0): 20,
             ("github.com/c/z", None): 10, ("github.com/c/z", 2.0): 30, ("github.com/c/z", 5.0): 3}

    def run(case, overrides):
        pct = error[(source_of(case), overrides.get("net.step_us"))]
        return CaseResult(case, "des", (Point(MiB, 10.0, 10.0 * (1 + pct / 100), "Ring", "Simple", 1),))
    study = leave_one_source_out(cases, "net.step_us", [2, 5], run)
    rows = {r.source: r for r in study.rows}
    assert rows["github.com/a/x"].n_cases == 2
    assert rows["github.com/a/x"].picked == 2.0 and rows["github.com/a/x"].held_out_pct == pytest.approx(1)
    # Held out, c sees the others' pick (2): worse than its own value, which is what the study is for.
    assert rows["github.com/c/z"].picked == 2.0
    assert rows["github.com/c/z"].held_out_pct == pytest.approx(30) and rows["github.com/c/z"].own_pct == pytest.approx(10)
    assert study.picked == 2.0
    assert "worse on 1" in format_loso(study)[-1]


def test_bad_studies_are_one_line(tmp_path):
    for spec, says in (("colour=1,2", "unknown engine parameter"), ("net.step_us", "NAME=V1,V2"),
                       ("net.step_us=-1", "net.step_us=-1")):
        out = run_cli("validate", str(tmp_path), "--loso", spec)
        assert out.returncode == 2 and says in out.stderr and out.stderr.count("\n") == 1, out.stderr


def test_validate_loso_runs_the_des_per_value(tmp_path):
    cases = tmp_path / "cases"
    cases.mkdir()
    for name in ("C19-reduce", "C05-n1-all_gather"):
        (cases / f"{name}.toml").write_text((REPO / "validation" / f"{name}.toml").read_text())
    out = run_cli("validate", str(cases), "--loso", "nvlink.efficiency=0.5,1")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("# leave one source out: nvlink.efficiency")
    assert {line.split()[0] for line in lines if line.startswith("  ")} == \
        {"github.com/Anthony-Hoo/Anthony-Hoo.github.io", "github.com/xxrjun/nccl-tests-cluster"}
    # Half of NVLink's bandwidth makes both cases worse: every source picks the engine's own value.
    assert "every source picks own" in lines[1]
