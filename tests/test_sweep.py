"""Grids of what-ifs (nicksim/sweep.py, `nicksim sweep`): the grid, local workers, a Dask cluster."""
import csv
import io
import json

import pytest

from nicksim.errors import UsageError
from nicksim.studies.sweep import ROW_FIELDS, read_grid, rows_csv, run_sweep

from conftest import run_cli

GRID = """
[sweep]
engine = ["model", "des"]
collective = "all_reduce"
sizes = ["64M", "1G"]
nodes = 2
hosts_per_leaf = 1
oversubscription = [1, 2]
[sweep.env]
NCCL_ALGO = ["Ring", "Tree"]
"""


def test_the_grid_is_the_product_of_every_list_in_file_order():
    points = read_grid(GRID, "g.toml")
    assert len(points) == 8
    assert [(p["engine"], p["oversubscription"], p["env"]["NCCL_ALGO"]) for p in points[:3]] == [
        ("model", 1, "Ring"), ("model", 1, "Tree"), ("model", 2, "Ring")]
    assert all(p["sizes"] == [64 << 20, 1 << 30] and p["nodes"] == 2 for p in points)
    assert [p["point"] for p in points] == list(range(8))


@pytest.mark.parametrize("text, where", [
    ("[sweep]\nnodez = 2\n", "nodez"),
    ("[sweep]\nnodes = 'two'\n", "nodes"),
    ("[sweep]\nnodes = []\n", "nodes"),
    ("[sweep]\nsizes = ['12Q']\n", "sizes"),
    ("[sweep]\nengine = 'fast'\n", "engine"),
    ("[sweep]\ncollective = 'all_reduse'\n", "all_reduse"),
    ("[other]\nnodes = 2\n", "[sweep]"),
    ("[sweep\n", "TOML"),
    ("[sweep]\nengine = 'des'\n[sweep.set]\n'nvlnk.bw_gbps' = 1\n", "nvlnk.bw_gbps"),
    ("[sweep]\nengine = 'des'\n[sweep.set]\n'nvlink.bw_gbps' = [100, -1]\n", "[sweep.set]"),
    ("[sweep]\nengine = 'des'\n[sweep.set]\n'nvlink.bw_gbps' = 'fast'\n", "nvlink.bw_gbps"),
    ("[sweep]\n[sweep.set]\n'nvlink.bw_gbps' = 100\n", "engine"),
])
def test_a_bad_grid_names_the_key(text, where):
    with pytest.raises(UsageError) as err:
        read_grid(text, "g.toml")
    assert where in err.value.line() and "g.toml" in err.value.line()


def _by_point(rows):
    return [(r["point"], r["nbytes"], r.get("time_us"), r.get("algorithm")) for r in rows]


def test_what_the_spine_does_to_ring_and_tree():
    rows = run_sweep([p for p in read_grid(GRID, "g.toml") if p["engine"] == "des"], workers=1)
    busbw = {(r["oversubscription"], r["env"], r["nbytes"]): r["busbw_gbps"] for r in rows}
    ring = busbw[(2, "NCCL_ALGO=Ring", 1 << 30)] / busbw[(1, "NCCL_ALGO=Ring", 1 << 30)]
    tree = busbw[(2, "NCCL_ALGO=Tree", 1 << 30)] / busbw[(1, "NCCL_ALGO=Tree", 1 << 30)]
    # The ring crosses between the nodes twice per channel, the tree once per direction: a 2:1 spine halves
    # the ring, which filled the NICs, and costs the tree much less.
    assert ring == pytest.approx(0.5, abs=0.05) and tree > 0.8


def test_local_workers_give_the_rows_one_process_gives():
    points = read_grid(GRID, "g.toml")[:4]
    seen = []
    serial = run_sweep(points, workers=1)
    parallel = run_sweep(points, workers=2, progress=lambda done, total: seen.append((done, total)))
    assert _by_point(parallel) == _by_point(serial)
    assert seen[-1] == (4, 4) and len(seen) == 4


def test_a_point_nicksim_cannot_answer_is_a_row_with_an_error():
    rows = run_sweep(read_grid("[sweep]\nsystem = ['dgx-h100', 'no-such-box']\nsizes = '1M'\n", "g.toml"))
    assert rows[0].get("error") is None and rows[0]["busbw_gbps"] > 0
    assert "no-such-box" in rows[1]["error"]


def test_sweep_on_a_local_dask_cluster(tmp_path):
    import distributed  # the dev extra installs dask[distributed]
    grid = tmp_path / "g.toml"
    grid.write_text(GRID, encoding="utf-8")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  protocol="tcp") as cluster:
        out = run_cli("sweep", str(grid), "--dask", cluster.scheduler_address, "-o", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""  # no progress drawn where stderr is not a terminal
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    local = run_sweep(read_grid(GRID, "g.toml"), workers=1)
    assert _by_point(rows) == _by_point(local)


def test_sweep_writes_csv_on_stdout(tmp_path):
    grid = tmp_path / "g.toml"
    grid.write_text("[sweep]\nsizes = ['1M', '1G']\nnodes = [1, 2]\n", encoding="utf-8")
    out = run_cli("sweep", str(grid), "-j", "1")
    assert out.returncode == 0, out.stderr
    table = list(csv.DictReader(io.StringIO(out.stdout)))
    assert tuple(table[0]) == ROW_FIELDS and len(table) == 4
    assert {r["nodes"] for r in table} == {"1", "2"} and all(float(r["busbw_gbps"]) > 0 for r in table)


def test_sweep_bad_input_is_one_line_and_status_2(tmp_path):
    grid = tmp_path / "g.toml"
    grid.write_text("[sweep]\nnodez = 2\n", encoding="utf-8")
    for args in ([str(grid)], [str(tmp_path / "missing.toml")], [str(grid), "-j", "0"]):
        out = run_cli("sweep", *args)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_rows_csv_leaves_missing_values_empty():
    text = rows_csv([{"point": 0, "nbytes": 8, "error": "x"}])
    assert text.splitlines()[1].startswith("0,") and text.rstrip().endswith(",x")


def test_a_set_axis_changes_the_fabric_the_des_runs_on():
    # One DGX H100 runs all_reduce through NVLS: halving every NVLink halves busbw at 1 GiB.
    grid = '[sweep]\nengine = "des"\nsizes = "1G"\n[sweep.set]\n"nvlink.bw_gbps" = [370.8, 185.4]\n'
    rows = run_sweep(read_grid(grid, "g.toml"))
    assert [r["set"] for r in rows] == ["nvlink.bw_gbps=370.8", "nvlink.bw_gbps=185.4"]
    assert rows[1]["busbw_gbps"] / rows[0]["busbw_gbps"] == pytest.approx(0.5, rel=0.05)


def test_a_grid_takes_every_system_option_a_validation_case_does():
    # `gpu` reaches the job: the catalog DGX H100's GPUs are H100, so H800 there is an error row
    # saying so, not an H100 answer under an H800 label.
    grid = '[sweep]\nsizes = "1G"\ngpu = ["h100", "h800"]\n'
    h100, h800 = run_sweep(read_grid(grid, "g.toml"))
    assert h100["gpu"] == "h100" and h100["busbw_gbps"] > 0 and not h100.get("error")
    assert h800["gpu"] == "h800" and "H800" in h800["error"] and "--gpu" in h800["error"]
