"""`nicksim hang list | replay`: every scenario replayed on the DES, its files written, and its
own diagnosis coming back out of them."""
from __future__ import annotations

import json
import pickle

import pytest

from conftest import run_cli
from nicksim.calls import Call
from nicksim.forensics.diagnose import diagnose
from nicksim.forensics.read import read_evidence
from nicksim.job import JobSpec, load_job
from nicksim.model.engine import des_setup, simulate_sequences
from nicksim.params import read_params
from nicksim.scenarios import SCENARIOS, replay


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_replay_is_diagnosed_as_its_own_category_with_its_culprits(name, tmp_path):
    scenario = SCENARIOS[name]
    done = replay(scenario, tmp_path)
    assert done.diagnosis.category == scenario.expect, done.diagnosis.why
    assert set(done.diagnosis.culprit_ranks) == set(scenario.culprits), done.diagnosis.why
    names = {p.name for p in tmp_path.iterdir()}
    if scenario.torn_lines:  # an nccl-tests run that completed with wrong data
        assert names == {"all_reduce_perf.out"}
        return
    assert {f"rank{r}.log" for r in range(scenario.nranks)} <= names
    if scenario.init_failure is None:  # the communicator came up: the DES ran, the dumps and trace exist
        assert done.hang_lines and done.hang_lines[0].startswith("hang:")
        assert {f"nccl_trace_rank_{r}.json" for r in range(scenario.nranks)} <= names
        assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]


def test_replay_from_the_command_line_and_diagnose_its_files(tmp_path):
    out = tmp_path / "out"
    result = run_cli("hang", "replay", "rank-divergence", "--out", str(out), "--json", str(tmp_path / "r.json"))
    assert result.returncode == 0, result.stderr
    assert "category: rank-divergence" in result.stdout
    logs = sorted(str(p) for p in out.iterdir() if p.name != "trace.json")
    again = run_cli("hang", "diagnose", *logs, "--json", str(tmp_path / "d.json"))
    assert again.returncode == 0, again.stderr
    replayed, diagnosed = (json.loads((tmp_path / f).read_text()) for f in ("r.json", "d.json"))
    assert replayed["scenario"] == "rank-divergence"
    assert diagnosed["category"] == replayed["category"] == "rank-divergence"
    assert diagnosed["culprit_ranks"] == replayed["culprit_ranks"] == [2]


def test_forcing_ll128_where_nccl_enables_it_itself_is_no_scenario(tmp_path):
    from dataclasses import replace as changed
    from nicksim.errors import UsageError
    on_nvlink = changed(SCENARIOS["ll128-unsupported"], nodes=1, gpus_per_node=8, fabric=None)
    with pytest.raises(UsageError, match="enables LL128"):
        replay(on_nvlink, tmp_path)


def test_a_known_system_names_the_channel_and_peer_each_blocked_rank_waits_on(tmp_path):
    replay(SCENARIOS["straggler"], tmp_path)
    files = sorted(str(p) for p in tmp_path.iterdir() if p.name != "trace.json")
    result = run_cli("hang", "diagnose", *files, "--system", "dgx-h100", "--gpus-per-node", "4", "--nccl-version",
                     "2.27", "--json", str(tmp_path / "d.json"))
    assert result.returncode == 0, result.stderr
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["category"] == "straggler" and doc["culprit_ranks"] == [3]
    waits = {line.split(":")[0]: line for line in doc["waits"]}
    # The ring's order on this box: rank 0 receives from rank 3, which never joined; the others wait behind it.
    assert "waits for data from rank 3" in waits["rank 0"]
    assert all("waits for" in waits[f"rank {r}"] for r in (1, 2))
    assert any(line.startswith("not in the call") and line.endswith("rank(s) 3") for line in doc["waits"])
    without = run_cli("hang", "diagnose", *files, "--json", str(tmp_path / "plain.json"))
    assert json.loads((tmp_path / "plain.json").read_text())["waits"] == [] and without.returncode == 0


def test_the_list_names_every_scenario():
    result = run_cli("hang", "list")
    assert result.returncode == 0
    assert [line.split()[0] for line in result.stdout.splitlines()] == list(SCENARIOS)


def test_logs_alone_without_the_dumps_still_name_the_divergence(tmp_path):
    replay(SCENARIOS["rank-divergence"], tmp_path)
    found = diagnose(read_evidence(sorted(tmp_path.glob("rank*.log"))))
    assert found.category == "rank-divergence" and found.culprit_ranks == (2,)


def test_a_pickled_dump_is_read_and_a_hostile_one_is_not_run(tmp_path):
    replay(SCENARIOS["missing-group-end"], tmp_path)
    for rank in range(4):  # PyTorch writes pickles; the JSON form carries the same fields
        dump = json.loads((tmp_path / f"nccl_trace_rank_{rank}.json").read_text())
        dump["entries"] = [dict(e, process_group=tuple(e["process_group"])) for e in dump["entries"]]
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump))
    found = diagnose(read_evidence(sorted(tmp_path.glob("nccl_trace_rank_?"))))
    assert found.category == "stuck-peer" and found.culprit_ranks == (1,)

    class Hostile:
        def __reduce__(self):
            return (open, (str(tmp_path / "pwned"), "w"))

    (tmp_path / "nccl_trace_rank_9").write_bytes(pickle.dumps({"entries": [Hostile()]}))
    read_evidence([tmp_path / "nccl_trace_rank_9"])
    assert not (tmp_path / "pwned").exists()


def test_communicators_keep_their_connections_apart():
    # Two all_reduces called in opposite orders: on one communicator the ranks' FIFOs simply carry
    # both (NCCL's connections are per peer, not per call), on two they deadlock.
    job = load_job(JobSpec(system="dgx-h100", gpus_per_node=4, nccl_version="2.27"), read_params({}))
    big, small = Call("all_reduce", 1 << 20, "float", "sum", -1, 4), Call("all_reduce", 4096, "float", "sum", -1, 4)
    calls = {r: [small, big] if r == 3 else [big, small] for r in range(4)}
    setup = des_setup(job, timeout_us=1e5)
    assert simulate_sequences(setup, calls).hang is None
    comms = {r: [2, 1] if r == 3 else [1, 2] for r in range(4)}
    hung = simulate_sequences(setup, calls, comms).hang
    assert hung is not None and {b.rank for b in hung.blocked} == {0, 1, 2, 3}
