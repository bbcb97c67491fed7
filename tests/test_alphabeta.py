"""The alpha-beta demo: ring vs double binary tree times, the crossover, edge cases, input checks, print."""
from __future__ import annotations

import itertools
import math

import pytest

from nicksim.studies.alphabeta import (DEFAULT_SIZES_NBYTES, SCENARIOS, CostLine, alphabeta_table, format_alphabeta,
                                       human_size, meeting_nbytes, ring_line, scenario_tables, tree_depth, tree_line)
from nicksim.errors import UsageError

# Hand-computed cases. Units: B in GB/s = 1e3 bytes/us, a and T in us, m in bytes.
#   ring = 2(p-1)/p * m/(B*1e3) + 2(p-1)*a      tree = 2*d*(m/(2*B*1e3) + a), d = ceil(log2 p)
HAND = [
    # p=8, B=100, a=1, m=1e6: ring = 1.75 * 10 + 14 = 17.5 + 14 = 31.5; d=3: tree = 6 * (5 + 1) = 36.
    (8, 100.0, 1.0, 1_000_000, 31.5, 36.0),
    # p=4, B=10, a=2, m=1000: ring = 1.5 * 0.1 + 12 = 12.15; d=2: tree = 4 * (0.05 + 2) = 8.2.
    (4, 10.0, 2.0, 1000, 12.15, 8.2),
    # p=4, B=10, a=2, m=0: ring = 2*3*2 = 12; tree = 2*2*2 = 8.
    (4, 10.0, 2.0, 0, 12.0, 8.0),
    # p=64, B=50, a=14, m=1 MiB = 1048576: m/B = 20.97152 us; ring = 1.96875 * 20.97152 + 2*63*14
    #   = 41.28768 + 1764 = 1805.28768; d=6: tree = 12 * (10.48576 + 14) = 12 * 24.48576 = 293.82912.
    (64, 50.0, 14.0, 1 << 20, 1805.28768, 293.82912),
    # p=3, B=10, a=1, m=30000: ring = 4/3 * 3 + 4 = 8; d=2: tree = 4 * (1.5 + 1) = 10.
    (3, 10.0, 1.0, 30_000, 8.0, 10.0),
    # p=2, B=10, a=1, m=30000: ring = 1 * 3 + 2 = 5; d=1: tree = 2 * (1.5 + 1) = 5 (the same line).
    (2, 10.0, 1.0, 30_000, 5.0, 5.0),
    # p=1: nothing is sent, both 0 whatever m and a.
    (1, 10.0, 5.0, 30_000, 0.0, 0.0),
]


@pytest.mark.parametrize("p, bw, lat, m, ring_us, tree_us", HAND)
def test_formulas_against_hand_computed_values(p, bw, lat, m, ring_us, tree_us):
    assert ring_line(p, bw, lat).time_us(m) == pytest.approx(ring_us, rel=1e-12, abs=1e-12)
    assert tree_line(p, bw, lat).time_us(m) == pytest.approx(tree_us, rel=1e-12, abs=1e-12)
    row = alphabeta_table(p, bw, lat, [m]).rows[0]
    assert row.nbytes == m
    assert row.ring_us == pytest.approx(ring_us, rel=1e-12, abs=1e-12)
    assert row.tree_us == pytest.approx(tree_us, rel=1e-12, abs=1e-12)
    expected = "tree" if tree_us < ring_us else "ring" if ring_us < tree_us else "tie"
    assert row.winner == expected


@pytest.mark.parametrize("p, d", [(1, 0), (2, 1), (3, 2), (4, 2), (5, 3), (8, 3), (9, 4), (64, 6),
                                  (1023, 10), (1024, 10), (1025, 11)])
def test_tree_depth_is_ceil_log2(p, d):
    assert tree_depth(p) == d


# Crossovers by hand: m* = 2*a*B*1e3*(p-1-d) / (d - 2(p-1)/p).
HAND_CROSSOVERS = [
    # p=8, B=100, a=1: 2*1e5*4 / (3 - 1.75) = 8e5 / 1.25 = 640000 (ring = tree = 25.2 us there).
    (8, 100.0, 1.0, 640_000.0),
    # p=4, B=10, a=2: 2*2*1e4*1 / (2 - 1.5) = 4e4 / 0.5 = 80000 (both 24 us).
    (4, 10.0, 2.0, 80_000.0),
    # p=64, B=50, a=14: 1.4e6*57 / (6 - 1.96875) = 7.98e7 / 4.03125.
    (64, 50.0, 14.0, 79_800_000 / 4.03125),
    # p=1024, B=50, a=14: 1.4e6*1013 / (10 - 1023/512) = 1.4e6*1013*512 / 4097.
    (1024, 50.0, 14.0, 1.4e6 * 1013 * 512 / 4097),
]


@pytest.mark.parametrize("p, bw, lat, expected", HAND_CROSSOVERS)
def test_crossover_closed_form(p, bw, lat, expected):
    table = alphabeta_table(p, bw, lat, [])
    assert table.crossover_nbytes == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("p, bw, lat", [(4, 10.0, 2.0), (8, 100.0, 1.0), (5, 25.0, 0.7), (64, 50.0, 14.0),
                                        (1000, 12.5, 3.0), (1024, 50.0, 14.0)]
                         + [v[:3] for v in SCENARIOS.values()])
def test_crossover_equal_times_and_the_winner_flips(p, bw, lat):
    ring, tree = ring_line(p, bw, lat), tree_line(p, bw, lat)
    m = alphabeta_table(p, bw, lat, []).crossover_nbytes
    assert m is not None and m > 0
    assert ring.time_us(m) == pytest.approx(tree.time_us(m), rel=1e-9)
    below, above = math.floor(m) - 1, math.ceil(m) + 1
    rows = alphabeta_table(p, bw, lat, [0, below, above, 100 * above]).rows
    assert [r.winner for r in rows] == ["tree", "tree", "ring", "ring"]


def test_p1_no_communication():
    table = alphabeta_table(1, 50.0, 14.0, [0, 8, 1 << 30])
    assert all(r.ring_us == 0 and r.tree_us == 0 and r.winner == "tie" for r in table.rows)
    assert table.crossover_nbytes is None
    assert table.tree_depth == 0
    assert "p=1: no communication" in format_alphabeta(table)[-1]


def test_p2_ring_and_tree_are_one_line():
    assert ring_line(2, 50.0, 14.0) == tree_line(2, 50.0, 14.0) == CostLine(28.0, 1 / 50e3)
    table = alphabeta_table(2, 50.0, 14.0, DEFAULT_SIZES_NBYTES)
    assert all(r.ring_us == r.tree_us and r.winner == "tie" for r in table.rows)
    assert table.crossover_nbytes is None
    assert "same line" in format_alphabeta(table)[-1]


@pytest.mark.parametrize("p, lat", [(3, 1.0), (8, 0.0), (1024, 0.0)])
def test_ring_never_slower_no_crossover(p, lat):
    # p=3 (p-1 == d) or a=0: the lines meet at m=0 only; the ring wins at every m > 0.
    table = alphabeta_table(p, 10.0, lat, [0, 8, 1 << 20])
    assert table.crossover_nbytes is None
    assert [r.winner for r in table.rows] == ["tie", "ring", "ring"]
    assert "ring is never slower" in format_alphabeta(table)[-1]


def test_meeting_parallel_and_negative_lines():
    assert meeting_nbytes(CostLine(1.0, 2e-5), CostLine(3.0, 2e-5)) is None   # parallel, apart
    assert meeting_nbytes(CostLine(3.0, 2e-5), CostLine(3.0, 2e-5)) is None   # the same line
    assert meeting_nbytes(CostLine(5.0, 1e-5), CostLine(1.0, 1e-6)) is None   # meet at m = -4/9e-6 < 0
    assert meeting_nbytes(CostLine(5.0, 1e-5), CostLine(5.0, 2e-5)) is None   # meet at m = 0
    assert meeting_nbytes(CostLine(1.0, 2e-5), CostLine(5.0, 1e-5)) == pytest.approx(4e5)  # either order
    assert meeting_nbytes(CostLine(5.0, 1e-5), CostLine(1.0, 2e-5)) == pytest.approx(4e5)


@pytest.mark.parametrize("args, where", [
    ((0, 50.0, 14.0, [8]), "--p"),
    ((-4, 50.0, 14.0, [8]), "--p"),
    ((8.0, 50.0, 14.0, [8]), "--p"),
    ((True, 50.0, 14.0, [8]), "--p"),
    (("8", 50.0, 14.0, [8]), "--p"),
    ((8, 0, 14.0, [8]), "--bw"),
    ((8, -1.0, 14.0, [8]), "--bw"),
    ((8, math.nan, 14.0, [8]), "--bw"),
    ((8, math.inf, 14.0, [8]), "--bw"),
    ((8, "50", 14.0, [8]), "--bw"),
    ((8, 50.0, -0.5, [8]), "--lat"),
    ((8, 50.0, math.nan, [8]), "--lat"),
    ((8, 50.0, math.inf, [8]), "--lat"),
    ((8, 50.0, 14.0, [8, -1]), "--sizes"),
    ((8, 50.0, 14.0, [1.5]), "--sizes"),
    ((8, 50.0, 14.0, ["8"]), "--sizes"),
])
def test_bad_inputs_raise_usage_error(args, where):
    with pytest.raises(UsageError) as info:
        alphabeta_table(*args)
    assert info.value.where == where and info.value.valid
    assert info.value.line().startswith(f"{where}: ")


def test_bad_inputs_to_the_lines():
    for fn in (ring_line, tree_line):
        with pytest.raises(UsageError, match="--p"):
            fn(0, 50.0, 1.0)
    with pytest.raises(UsageError, match="--p"):
        tree_depth(0)


def test_zero_latency_and_zero_sizes_are_valid():
    table = alphabeta_table(8, 50.0, 0.0, [0])
    assert table.rows[0] == (0, 0.0, 0.0, "tie")
    assert format_alphabeta(table)[-2].split()[2:] == ["0.00", "0.00", "-", "tie"]  # no ratio for 0/0


@pytest.mark.parametrize("nbytes, text", [(0, "0 B"), (8, "8 B"), (1000, "1000 B"), (1024, "1 KiB"),
                                          (65536, "64 KiB"), (256 << 20, "256 MiB"), (8 << 30, "8 GiB"),
                                          (1536, "1.5 KiB"), (7_833_600, "7.47 MiB"), (1 << 50, "1 PiB")])
def test_human_size(nbytes, text):
    assert human_size(nbytes) == text


def test_format_has_formulas_rows_and_crossover():
    sizes = [8, 64 << 10, 1_000_000, 256 << 20]
    table = alphabeta_table(8, 100.0, 1.0, sizes, title="demo")
    lines = format_alphabeta(table)
    header = [line for line in lines if line.startswith("#")]
    rows = [line for line in lines if line.startswith("  ")]
    assert lines[0] == "# demo"
    assert any("2(p-1)/p * m/B + 2(p-1)*a" in line for line in header)
    assert any("2*d*(m/(2B) + a)" in line for line in header)
    assert any("p=8" in line and "B=100 GB/s" in line and "a=1 us" in line and "d=ceil(log2 p)=3" in line
               for line in header)
    assert len(rows) == len(sizes) and len(lines) == len(header) + len(sizes) + 1
    assert rows[0].split()[:2] == ["8", "B"] and rows[1].split()[:2] == ["64", "KiB"]
    assert rows[3].split()[:2] == ["256", "MiB"]
    # 1e6 bytes: ring 31.50, tree 36.00, ring/tree 0.875, ring wins.
    assert rows[2].split()[2:] == ["31.50", "36.00", "0.875", "ring"]
    assert rows[0].split()[-1] == "tree"
    assert lines[-1] == "crossover m* = 640000 B (625 KiB): the tree is faster below, the ring above"
    assert len({len(row.rstrip().rsplit(" ", 1)[0]) for row in rows}) == 1  # fixed width up to the winner


def test_scenarios_and_default_sweep():
    assert len(DEFAULT_SIZES_NBYTES) == 31
    assert DEFAULT_SIZES_NBYTES[0] == 8 and DEFAULT_SIZES_NBYTES[-1] == 8 << 30
    assert all(b == 2 * a for a, b in itertools.pairwise(DEFAULT_SIZES_NBYTES))
    assert [v[0] for v in SCENARIOS.values()] == [8, 64, 1024]
    with pytest.raises(TypeError):
        SCENARIOS["x"] = (2, 1.0, 1.0, "")  # read-only
    tables = scenario_tables()
    assert list(tables) == list(SCENARIOS)
    # m* = 2*a*B*1e3*(p-1-d) / (d - 2(p-1)/p) with the scenario values:
    expected = {
        "nvlink-h100x8": 2 * 3.4 * 360e3 * 4 / 1.25,      # 7,833,600 B = 7.47 MiB
        "ib-64-nodes": 2 * 14 * 50e3 * 57 / 4.03125,     # 19,795,349 B = 18.88 MiB
        "ib-1024-nodes": 1.4e6 * 1013 * 512 / 4097,      # 177,231,731 B = 169.02 MiB
    }
    for name, table in tables.items():
        assert table.title.startswith(name + ": ")
        assert len(table.rows) == 31
        assert table.crossover_nbytes == pytest.approx(expected[name], rel=1e-12)
        winners = [r.winner for r in table.rows]
        flip = winners.index("ring")
        assert set(winners[:flip]) == {"tree"} and set(winners[flip:]) == {"ring"}
        assert table.rows[flip - 1].nbytes < table.crossover_nbytes < table.rows[flip].nbytes
        lines = format_alphabeta(table)
        assert lines[-1].startswith(f"crossover m* = {table.crossover_nbytes:.0f} B (")
    assert [row.nbytes for row in scenario_tables([8, 16])["ib-64-nodes"].rows] == [8, 16]
