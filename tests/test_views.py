"""What the pictures show (studies/views.py through nicksim.api) agrees with the core it is drawn
from; the figures draw every value they are given; the tuner file and the dashboard's command."""
from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from nicksim import api


@pytest.fixture(scope="module")
def h100():
    return api.load("dgx-h100")


@pytest.fixture(scope="module")
def h100x4():
    return api.load("dgx-h100", nodes=4)


def test_node_drawing_has_every_device_and_link_of_the_node(h100):
    system = h100.paths.node_system
    drawing = api.node_drawing(h100)
    names = [v.name for v in drawing.vertices]
    assert len(names) == len(set(names))
    assert {f"GPU{system.nodes[g].gpu.rank}" for g in system.gpus()} <= set(names)
    assert {f"NET{system.nodes[n].net.dev}" for n in system.nets()} <= set(names)
    nvlinks = [e for e in drawing.edges if e.kind == "NVL"]
    assert len(nvlinks) == len(system.gpus())  # each GPU to the NVSwitch
    gpu_nvl = {l.bw_gbps for g in system.gpus() for l in system.nodes[system.device_of(g)].links if l.kind == "NVL"}
    assert {e.bw_gbps for e in nvlinks} == gpu_nvl
    cpu = [v for v in drawing.vertices if v.kind == "CPU"]
    gpus = [v for v in drawing.vertices if v.kind == "GPU"]
    assert min(v.y for v in cpu) > max(v.y for v in gpus)  # CPUs above the GPUs


def test_node_drawing_names_are_unique_across_the_hosts_of_an_nvlink_domain():
    drawing = api.node_drawing(api.load("gb200-nvl72"))
    names = [v.name for v in drawing.vertices]
    assert len(names) == len(set(names)) and sum(v.kind == "GPU" for v in drawing.vertices) == 72
    assert {e.a for e in drawing.edges} | {e.b for e in drawing.edges} <= set(names)


def test_path_matrix_is_the_path_table(h100):
    matrix = api.path_matrix(h100)
    s = h100.paths.system
    gpus = sorted(s.gpus(), key=lambda g: s.nodes[g].gpu.rank)
    for i, a in enumerate(gpus):
        for j, b in enumerate(gpus):
            want = "X" if a == b else h100.paths.path(a, b).type
            assert matrix.types[i][j] == want
    assert matrix.rows[:8] == tuple(f"GPU{r}" for r in range(8)) and "NET0" in matrix.cols


def test_fabric_drawing_shows_leaves_spines_and_each_nodes_nics(h100x4):
    drawing = api.fabric_drawing(h100x4)
    kinds = [v.kind for v in drawing.vertices]
    assert kinds.count("NIC") == 4 * 8 and kinds.count("leaf") == h100x4.cluster.leaves
    assert kinds.count("spine") == h100x4.cluster.spines
    assert len(api.fabric_drawing(h100x4, max_nodes=2).vertices) < len(drawing.vertices)


def test_ring_orders_visit_every_gpu_of_the_node_once(h100x4):
    orders = api.ring_orders(h100x4)
    assert len(orders) == h100x4.channels.n_channels
    for order, ring in zip(orders, h100x4.channels.rings):
        assert sorted(order) == list(range(8))
        assert order == tuple(r for r in ring if r < 8)


def test_the_two_trees_span_every_node_and_differ(h100x4):
    half = h100x4.channels.n_channels // 2
    trees = [api.tree_drawing(h100x4, 0), api.tree_drawing(h100x4, half)]
    for tree in trees:
        assert len(tree.edges) == 4 - 1
        assert {e.a for e in tree.edges} | {e.b for e in tree.edges} == {f"node{n}" for n in range(4)}
    roots = [next(v.name for v in t.vertices if v.y == 0) for t in trees]
    assert roots[0] != roots[1]
    with pytest.raises(api.UsageError):
        api.tree_drawing(h100x4, 999)


def test_priced_marks_nccls_choice_the_cheapest_pair(h100x4):
    for size in ("4K", "1M", "256M"):
        call = api.call(h100x4, "all_reduce", size)
        plan = api.plan(h100x4, call)
        rows = api.priced(h100x4, call).records()
        chosen = [r for r in rows if r["chosen"]]
        assert [(r["algorithm"], r["protocol"]) for r in chosen] == [(plan.algorithm, plan.protocol)]
        runnable = [r["time_us"] for r in rows if r["time_us"] is not None and not r["backup"]]
        assert chosen[0]["time_us"] == min(runnable) == pytest.approx(plan.time_us)


def test_curves_have_one_choice_per_size(h100):
    sizes = api.sizes("1K", "1G", 8)
    rows = api.curves(h100, "all_reduce", sizes).records()
    assert sorted({r["nbytes"] for r in rows}) == sizes
    for size in sizes:
        assert sum(r["chosen"] for r in rows if r["nbytes"] == size) == 1
    assert api.curves(h100, "sendrecv", sizes).records() == []


def test_tuner_by_the_time_model_is_nccls_own_choice(h100):
    sizes = api.sizes("1K", "1G", 8)
    table = api.tuner(h100, "all_reduce", sizes, engine="nccl")
    rows = table.records()
    assert rows[0]["min_bytes"] == 0 and rows[-1]["max_bytes"] == (1 << 64) - 1
    for a, b in zip(rows, rows[1:]):
        assert b["min_bytes"] == a["max_bytes"] + 1
    for size in sizes:
        row = next(r for r in rows if r["min_bytes"] <= size <= r["max_bytes"])
        plan = api.plan(h100, api.call(h100, "all_reduce", size))
        assert (row["algorithm"], row["protocol"]) == (plan.algorithm, plan.protocol)
    text = api.tuner_csv(table).splitlines()
    assert text[1] == "collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff"
    fields = [line.split(",") for line in text[2:]]
    assert len(fields) == len(rows) and all(f[0] == "allreduce" and len(f) == 10 for f in fields)
    assert {f[3] for f in fields} <= {"tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"}
    assert {f[4] for f in fields} <= {"ll", "ll128", "simple"} and {f[7] for f in fields} == {"8"}


def test_tuner_refuses_what_has_no_tuner_entry(h100):
    with pytest.raises(api.UsageError):
        api.tuner(h100, "sendrecv", [1 << 20], engine="nccl")


def test_measured_reads_a_table_and_refuses_text_without_one():
    text = ("# collective=all_reduce nranks=8 dtype=float redop=sum\nsize_bytes,time_us,algbw_GBps,busbw_GBps\n"
            "1048576,30.0,34.95,61.17\n")
    rows = api.measured(text, "all_reduce", 8).records()
    assert rows == [{"nbytes": 1048576, "time_us": 30.0, "busbw_gbps": 61.17, "in_place_busbw_gbps": None}]
    with pytest.raises(api.UsageError, match="no all_reduce table for 16 ranks"):
        api.measured(text, "all_reduce", 16)
    with pytest.raises(api.UsageError):
        api.measured("hello\nworld\n", "all_reduce", 8)


def test_replay_waits_lead_to_the_culprit(tmp_path):
    replay = api.replay("straggler", tmp_path)
    edges = api.waits(replay)
    waits_on = {e.waiter: e.waited for e in edges}
    assert set(waits_on) == {0, 1, 2}
    for start in waits_on:  # follow the chain: it ends at the straggler
        rank, seen = start, set()
        while rank in waits_on and rank not in seen:
            seen.add(rank)
            rank = waits_on[rank]
        assert rank == 3
    spans = api.replay_timeline(replay, ranks=[0]).records()
    assert spans and {s["rank"] for s in spans} == {0}


def test_diagnose_strictly_refuses_files_with_nothing_of_nccls(tmp_path):
    garbage = tmp_path / "rank0.log"
    garbage.write_bytes(b"\x00\x01 not a log\n" * 10)
    with pytest.raises(api.UsageError, match="rank0.log"):
        api.diagnose([garbage], strict=True)
    assert api.diagnose([garbage]).category == "unknown"
    replay = api.replay("missing-group-end", tmp_path / "r")
    assert api.diagnose([f for f in replay.files if f.endswith(".log")], strict=True).category == "stuck-peer"


def test_figures_draw_what_they_are_given(h100x4):
    drawing = api.node_drawing(h100x4)
    fig = api.figures.draw_graph(drawing)
    assert len(fig.axes[0].lines) == len(drawing.edges)
    sizes = api.sizes("1M", "64M", 4)
    curves = api.curves(h100x4, "all_reduce", sizes).records()
    fig = api.figures.draw_curves(curves, {"nccl": api.perf(h100x4, "all_reduce", sizes).records()})
    pairs = {(r["algorithm"], r["protocol"]) for r in curves}
    assert len(fig.axes[0].lines) == len(pairs) + 1
    fig = api.figures.draw_rings(api.ring_orders(h100x4), 8, 4, max_channels=6)
    assert len(fig.axes) == 6
    rows = [{"rank": 0, "channel": c, "lane": f"channel {c} ring", "op": "send", "start_us": 0.0, "dur_us": 1.0}
            for c in range(100)]
    fig = api.figures.draw_timeline(rows, max_lanes=10)
    assert len(fig.axes[0].patches) == 10 and "first 10 of 100 lanes" in fig.axes[0].get_title()


def test_dashboard_command_refuses_a_taken_port():
    with socket.socket() as taken:
        taken.bind(("localhost", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(api.UsageError, match=f"cannot listen on localhost:{port}"):
            api.dashboard_command("localhost", port)
        done = subprocess.run([sys.executable, "-m", "nicksim", "dashboard", "--port", str(port)],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--host/--port" in done.stderr
    command = api.dashboard_command("localhost", port)
    assert command[2:4] == ["streamlit", "run"] and command[4] == str(api.DASHBOARD_APP)
    assert command[command.index("--server.headless") + 1] == "true"
