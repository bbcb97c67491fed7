"""`perf --plot` and `sweep --plot`: what the pictures hold, the files they write, and one clear line
where a picture cannot be drawn (a format nicksim does not write, matplotlib missing)."""
import subprocess
import sys

import pytest

from nicksim import api

from conftest import REPO, run_cli

SIZES = ["-b", "1K", "-e", "64M", "-f", "4"]

GRID = """
[sweep]
engine = "nccl"
collective = "all_reduce"
sizes = ["1M", "16M", "256M"]
nodes = [1, 2]
[sweep.env]
NCCL_ALGO = ["Ring", "Tree"]
"""


def _offsets(ax) -> set[tuple[float, float]]:
    """Every point the scatter layers of `ax` draw."""
    return {(float(x), float(y)) for c in ax.collections for x, y in c.get_offsets()}


def test_draw_perf_holds_the_run_its_choices_and_the_measured_rows():
    job = api.load("dgx-h100")
    run = api.perf(job, "all_reduce", api.sizes("1K", "1G", 4)).records()
    measured = [{"nbytes": r["nbytes"], "busbw_gbps": r["busbw_gbps"] / 2, "time_us": r["time_us"] * 2}
                for r in run[::2]]
    fig = api.figures.draw_perf({"nccl": run}, measured)
    bw, time = fig.axes
    assert [tuple(line.get_xydata()[k]) for line in bw.lines for k in range(len(run))] == \
        [(r["nbytes"], r["busbw_gbps"]) for r in run]
    assert [y for _, y in time.lines[0].get_xydata()] == [r["time_us"] for r in run]
    assert bw.get_xscale() == "log" and time.get_yscale() == "log"
    # one marker per algorithm/protocol NCCL chose, each point of the run marked, the measured ones too
    pairs = {f"{r['algorithm']}/{r['protocol']}" for r in run}
    assert len(pairs) >= 2, "the sizes span more than one choice"
    marker_legend = fig.legends[-1]
    assert {t.get_text() for t in marker_legend.get_texts()} == pairs
    assert {(r["nbytes"], r["busbw_gbps"]) for r in run} | {(m["nbytes"], m["busbw_gbps"]) for m in measured} == \
        _offsets(bw)
    assert {t.get_text() for t in fig.legends[0].get_texts()} == {"engine nccl", "measured"}


def test_sweep_series_are_named_by_the_options_that_vary():
    rows = [{"point": 0, "engine": "des", "nodes": 2, "env": "NCCL_ALGO=Ring NCCL_PROTO=Simple", "set": "",
             "nbytes": 1 << 20, "busbw_gbps": 1.0},
            {"point": 0, "engine": "des", "nodes": 2, "env": "NCCL_ALGO=Ring NCCL_PROTO=Simple", "set": "",
             "nbytes": 1 << 10, "busbw_gbps": 0.5},
            {"point": 1, "engine": "des", "nodes": 4, "env": "NCCL_ALGO=Tree NCCL_PROTO=Simple", "set": "",
             "nbytes": 1 << 20, "busbw_gbps": 2.0},
            {"point": 1, "engine": "des", "nodes": 4, "env": "NCCL_ALGO=Tree NCCL_PROTO=Simple", "set": "",
             "nbytes": 1 << 30, "error": "not modelled"},
            {"point": 2, "engine": "des", "nodes": 8, "env": "NCCL_ALGO=Ring NCCL_PROTO=Simple", "set": "",
             "nbytes": 1 << 20, "error": "not modelled"}]
    series = api.sweep_series(rows)
    assert list(series) == ["nodes=2 NCCL_ALGO=Ring", "nodes=4 NCCL_ALGO=Tree"]  # point 2 has no row left
    assert [r["nbytes"] for r in series["nodes=2 NCCL_ALGO=Ring"]] == [1 << 10, 1 << 20]  # in size order
    assert [r["busbw_gbps"] for r in series["nodes=4 NCCL_ALGO=Tree"]] == [2.0]


def test_draw_sweep_draws_a_line_per_point_or_a_bar_per_point_of_one_size():
    series = {"a": [{"nbytes": 1 << 20, "busbw_gbps": 10.0, "algorithm": "Ring", "protocol": "LL"},
                    {"nbytes": 1 << 30, "busbw_gbps": 90.0, "algorithm": "Ring", "protocol": "Simple"}],
              "b": [{"nbytes": 1 << 20, "busbw_gbps": 20.0, "algorithm": "Tree", "protocol": "LL"},
                    {"nbytes": 1 << 30, "busbw_gbps": 80.0, "algorithm": "Tree", "protocol": "Simple"}]}
    fig = api.figures.draw_sweep(series)
    ax = fig.axes[0]
    assert [[tuple(p) for p in line.get_xydata()] for line in ax.lines] == \
        [[(1 << 20, 10.0), (1 << 30, 90.0)], [(1 << 20, 20.0), (1 << 30, 80.0)]]
    assert {t.get_text() for t in fig.legends[0].get_texts()} == {"a", "b"}
    assert {t.get_text() for t in fig.legends[1].get_texts()} == {"Ring/LL", "Ring/Simple", "Tree/LL", "Tree/Simple"}
    one_size = {name: rows[1:] for name, rows in series.items()}
    fig = api.figures.draw_sweep(one_size)
    assert [p.get_width() for p in fig.axes[0].patches] == [90.0, 80.0]


def test_perf_plot_writes_a_png_and_prints_what_it_prints_without(tmp_path):
    png = tmp_path / "perf.png"
    plain = run_cli("perf", "all_reduce", *SIZES)
    drawn = run_cli("perf", "all_reduce", *SIZES, "--plot", str(png))
    assert drawn.returncode == 0, drawn.stderr
    assert drawn.stdout == plain.stdout
    from matplotlib.image import imread
    height, width, _ = imread(png).shape
    assert width > 600 and height > 400


def test_perf_plot_overlays_compare_and_writes_svg_by_extension(tmp_path):
    measured = tmp_path / "measured.txt"
    measured.write_text(run_cli("perf", "all_reduce", "-b", "1M", "-e", "64M", "-f", "4").stdout)
    svg = tmp_path / "perf.svg"
    result = run_cli("perf", "all_reduce", *SIZES, "--engine", "des", "--compare", str(measured), "--plot", str(svg))
    assert result.returncode == 0, result.stderr
    text = svg.read_text()
    assert text.startswith("<?xml") and "<svg" in text
    assert "measured" in text and "engine des" in text  # the legend's words, kept as text


def test_sweep_plot_writes_a_png(tmp_path):
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    png = tmp_path / "sweep.png"
    result = run_cli("sweep", str(grid), "-j", "1", "--plot", str(png))
    assert result.returncode == 0, result.stderr
    assert png.read_bytes().startswith(b"\x89PNG")
    assert result.stdout.count("\n") == 1 + 4 * 3  # the CSV as before: a header, then a row per point and size


def test_a_picture_format_nicksim_does_not_write_is_one_line_before_the_work(tmp_path):
    result = run_cli("perf", "all_reduce", *SIZES, "--plot", str(tmp_path / "perf.jpg"))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "--plot" in result.stderr and ".svg" in result.stderr
    assert result.stdout == ""


def _without_matplotlib(*argv: str) -> subprocess.CompletedProcess:
    """`nicksim ARGV` where matplotlib cannot be imported."""
    code = ("import sys; sys.modules['matplotlib'] = None; from nicksim.cli import main; "
            f"sys.exit(main({list(argv)!r}))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)


@pytest.mark.parametrize("argv", [
    ("perf", "all_reduce", "-b", "1K", "-e", "4K", "--plot", "{tmp}/p.png"),
    ("sweep", "{grid}", "--plot", "{tmp}/s.png"),
    ("validate", "--plots", "{tmp}/plots"),
])
def test_drawing_without_matplotlib_is_one_line_saying_how_to_get_it(tmp_path, argv):
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    result = _without_matplotlib(*(a.format(tmp=tmp_path, grid=grid) for a in argv))
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "matplotlib is not installed" in result.stderr and "pip install 'nicksim[plot]'" in result.stderr
    assert result.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.toml"]  # nothing written


def test_a_run_that_draws_nothing_needs_no_matplotlib():
    result = _without_matplotlib("perf", "all_reduce", "-b", "1K", "-e", "4K")
    assert result.returncode == 0, result.stderr
    assert "Avg bus bandwidth" in result.stdout


def test_the_readme_pictures_come_from_the_commands_it_shows(tmp_path):
    text = (REPO / "README.md").read_text().replace("\\\n", " ")
    commands = [line.split() for line in text.splitlines()
                if line.startswith("nicksim ") and "--plot docs/img/" in line]
    assert [argv[1] for argv in commands] == ["perf", "sweep"]
    from matplotlib.image import imread
    for argv in commands:
        at = argv.index("--plot") + 1
        shown = REPO / argv[at]
        argv[at] = str(tmp_path / shown.name)
        if "-o" in argv:  # the table goes here, not into the checkout
            argv[argv.index("-o") + 1] = str(tmp_path / "table.csv")
        result = run_cli(*argv[1:])
        assert result.returncode == 0, result.stderr
        assert imread(tmp_path / shown.name).shape == imread(shown).shape
