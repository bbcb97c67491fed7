"""The graph cache (graph/cache.py): a second search of a system is read back, and is exactly the search."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import nicksim.graph.cache as cache_module
from nicksim.graph.cache import cache_folder, cached_search_graphs, search_key
from nicksim.graph.search import search_graphs
from nicksim.params import read_params

from conftest import REPO, build


def _no_search(*_args, **_kwargs):
    raise AssertionError("searched, though the cache holds this search")


@pytest.mark.parametrize("system,nodes,env", [
    ("dgx-h100", 1, {}), ("dgx-h100", 2, {}), ("dgx-a100", 1, {}), ("dgx-h100", 2, {"NCCL_CROSS_NIC": "0"}),
    ("dgx-h100", 2, {"NCCL_COLLNET_ENABLE": "1"}),
])
def test_the_second_search_is_read_back_and_equals_the_search(system, nodes, env, tmp_path, monkeypatch):
    _, paths = build(system, env=env, nodes=nodes)
    params = read_params(env)
    searched = search_graphs(paths, params)
    assert cached_search_graphs(paths, params, str(tmp_path)) == searched
    monkeypatch.setattr(cache_module, "search_graphs", _no_search)
    assert cached_search_graphs(paths, params, str(tmp_path)) == searched


def test_a_knob_the_search_reads_is_part_of_the_entry(tmp_path, monkeypatch):
    # NCCL_NVLS_ENABLE=0 drops the NVLS graph (transport/nvls.cc ncclNvlsInit); the paths are the same
    _, paths = build("dgx-h100", nodes=2)
    folder = str(tmp_path)
    with_nvls = cached_search_graphs(paths, read_params({}), folder)
    without = cached_search_graphs(paths, read_params({"NCCL_NVLS_ENABLE": "0"}), folder)
    assert "nvls" in with_nvls and "nvls" not in without
    monkeypatch.setattr(cache_module, "search_graphs", _no_search)
    assert cached_search_graphs(paths, read_params({"NCCL_NVLS_ENABLE": "0"}), folder) == without
    assert cached_search_graphs(paths, read_params({}), folder) == with_nvls
    # a knob the search never reads shares the entry
    assert cached_search_graphs(paths, read_params({"NCCL_ALGO": "Ring"}), folder) == with_nvls


def test_more_nodes_of_one_node_share_its_entry(tmp_path, monkeypatch):
    # Two and three nodes of dgx-h100: the same node as the search sees it (rank count aside), so the
    # same graphs, and the second is read back without a search.
    _, two = build("dgx-h100", nodes=2)
    _, three = build("dgx-h100", nodes=3)
    assert two.nranks != three.nranks and search_key(two) == search_key(three)
    params = read_params({})
    searched = search_graphs(three, params)
    assert search_graphs(two, params) == searched
    cached_search_graphs(two, params, str(tmp_path))
    monkeypatch.setattr(cache_module, "search_graphs", _no_search)
    assert cached_search_graphs(three, params, str(tmp_path)) == searched


def test_other_paths_are_another_entry(tmp_path):
    _, one = build("dgx-h100", nodes=1)
    _, two = build("dgx-h100", nodes=2)
    assert search_key(one) != search_key(two)
    params = read_params({})
    assert cached_search_graphs(one, params, str(tmp_path))["ring"].n_channels == 12
    assert cached_search_graphs(two, params, str(tmp_path))["ring"].n_channels == 8
    assert len(list(tmp_path.glob("graphs-*.json"))) == 2


@pytest.mark.parametrize("damage", ["not json {", "[{\"reads\": 3}]", "{}", ""])
def test_a_damaged_entry_is_searched_again_and_replaced(damage, tmp_path):
    _, paths = build("dgx-h100", nodes=2)
    params = read_params({})
    (tmp_path / f"graphs-{search_key(paths)}.json").write_text(damage)
    assert cached_search_graphs(paths, params, str(tmp_path)) == search_graphs(paths, params)
    entries = json.loads((tmp_path / f"graphs-{search_key(paths)}.json").read_text())
    assert any(isinstance(e, dict) and "ring" in e.get("graphs", {}) for e in entries)


def test_a_folder_that_cannot_be_written_still_searches(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    _, paths = build("dgx-h100", nodes=2)
    params = read_params({})
    assert cached_search_graphs(paths, params, str(blocker / "cache")) == search_graphs(paths, params)


def test_a_graph_file_is_never_cached(tmp_path):
    _, paths = build("dgx-h100", nodes=2)
    graph_file = tmp_path / "graph.xml"
    graph_file.write_text('<graphs version="1"></graphs>')
    params = read_params({"NCCL_GRAPH_FILE": str(graph_file)})
    cached_search_graphs(paths, params, str(tmp_path / "cache"))
    assert not (tmp_path / "cache").exists()


def test_where_the_cache_is():
    assert cache_folder(read_params({})) is None  # an API call with no environment writes nothing
    assert cache_folder(read_params({"HOME": "/home/u"})) == "/home/u/.cache/nicksim"
    assert cache_folder(read_params({"HOME": "/home/u", "XDG_CACHE_HOME": "/c"})) == "/c/nicksim"
    assert cache_folder(read_params({"HOME": "/home/u", "NICKSIM_CACHE": "/x"})) == "/x"
    assert cache_folder(read_params({"HOME": "/home/u", "NICKSIM_CACHE": "off"})) is None


def test_the_key_is_the_same_in_every_process():
    # str hashes differ per process (PYTHONHASHSEED): the key must not depend on them
    code = ("import sys; sys.path.insert(0, 'tests'); from conftest import build; "
            "from nicksim.graph.cache import search_key; print(search_key(build('dgx-h100', nodes=2)[1]), search_key(build('gb200-nvl72')[1]))")
    keys = {subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(keys) == 1 and len(next(iter(keys)).split()) == 2


def test_the_cli_keeps_the_search_and_prints_the_same(tmp_path):
    from conftest import run_cli
    env = {"NICKSIM_CACHE": str(tmp_path), "NCCL_DEBUG": "INFO"}
    first = run_cli("search", "--system", "dgx-h100", "--nodes", "2", env=env)
    again = run_cli("search", "--system", "dgx-h100", "--nodes", "2", env=env)
    assert first.returncode == again.returncode == 0
    assert first.stdout == again.stdout and "nChannels" in first.stdout
    assert len(list(tmp_path.glob("graphs-*.json"))) == 1


# What a second `nicksim search` must not load: the search itself (and the NumPy its float32 arithmetic
# needs), the engines and what they run on, the studies, perf's formats, the pictures, networkx (the
# fabric graph is built on first use) and the installed version's metadata.
_NOT_FOR_A_CACHED_SEARCH = ("nicksim.graph.search", "numpy", "networkx", "nicksim.engines", "nicksim.model",
                            "nicksim.realhw", "nicksim.plan", "nicksim.studies", "nicksim.forensics",
                            "nicksim.scenarios", "nicksim.formats.report", "nicksim.formats.trace",
                            "nicksim.tuning.choose", "nicksim.topology.detect", "simpy", "numba", "matplotlib",
                            "tqdm", "importlib.metadata")


def test_a_cached_search_loads_only_what_it_prints(tmp_path):
    # `python -m nicksim search` as a user runs it, twice: the second is answered from the cache and
    # imports what printing the answer takes, no more (what is loaded, not how long it takes)
    code = ("import runpy, sys\n"
            "out = sys.argv.pop(1)\n"
            "sys.argv[0] = 'nicksim'\n"
            "try:\n"
            "    runpy.run_module('nicksim', run_name='__main__', alter_sys=True)\n"
            "except SystemExit as done:\n"
            "    assert not done.code, done.code\n"
            "open(out, 'w').write('\\n'.join(sorted(sys.modules)))\n")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "NICKSIM_"))},
           "NICKSIM_CACHE": str(tmp_path / "cache")}

    def loaded(*args: str) -> set[str]:
        out = tmp_path / "modules.txt"
        subprocess.run([sys.executable, "-c", code, str(out), "search", *args], cwd=REPO, env=env,
                       capture_output=True, text=True, check=True)
        return set(out.read_text().split())

    for args in (("--system", "dgx-h100"), ("--system", "dgx-b200", "--nodes", "2")):
        first = loaded(*args)
        assert "nicksim.graph.search" in first and "numpy" in first  # the first one searched
        again = loaded(*args)
        assert {"nicksim.graph.cache", "nicksim.formats.joblog"} <= again
        heavy = sorted(m for m in again if m.startswith(_NOT_FOR_A_CACHED_SEARCH))
        assert not heavy, f"a cached search of {' '.join(args)} loaded {heavy}"
