"""Fuzzing every reader and every setting: whatever comes in, the answer is a result or one
NickSimError (which the command line prints as one line and exit status 2), never another
exception. Each property runs a bounded number of examples with a deadline, so the suite's time
stays bounded; `INPUTS` is how many inputs one run tries in all."""
from __future__ import annotations

import copy
import json
import math

import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

from nicksim import api
from nicksim.constants.knobs import KNOB_TABLE
from nicksim.errors import NickSimError
from nicksim.formats.report import read_results
from nicksim.job import JobSpec, load_job
from nicksim.params import read_params
from nicksim.studies.perf import parse_size
from nicksim.studies.sweep import read_grid

EXAMPLES = {"small": 150, "dumps": 150, "jobs": 25}
INPUTS = 5 * EXAMPLES["small"] + 2 * EXAMPLES["dumps"] + EXAMPLES["jobs"]
# No shrinking: a failure is reported as found, and the time a run takes stays bounded.
PHASES = (Phase.explicit, Phase.generate)
FAST = settings(max_examples=EXAMPLES["small"], deadline=2000, derandomize=True, phases=PHASES,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def survives(action):
    """Run `action`; a NickSimError is a fine answer to bad input, any other exception is a defect."""
    try:
        return action()
    except NickSimError as err:
        line = err.line()
        assert line and "\n" not in line.strip(), line
        return None


# --- what people type ----------------------------------------------------------------------------

SIZE_TEXT = st.one_of(st.text(max_size=12), st.from_regex(r"-?[0-9]{0,25}(\.[0-9]{0,4})?(e[0-9]{1,4})?[KMGTkmgtB]?",
                                                          fullmatch=True),
                      st.sampled_from(["inf", "-inf", "nan", "1e400", "99999999999999999999T", "0x10", " 8M "]))


@FAST
@given(SIZE_TEXT)
def test_any_size_text_is_a_size_or_one_error(text):
    size = survives(lambda: parse_size(text, "-b"))
    assert size is None or (isinstance(size, int) and size >= 0)


KNOB_VALUE = st.one_of(st.integers(-2 ** 70, 2 ** 70).map(str), st.floats(allow_nan=True).map(str),
                       st.text(max_size=10), st.sampled_from(["-1", "-2", "0", "1", "Ring", "LL128", "^Tree", "=x"]))


@FAST
@given(st.sampled_from(sorted(KNOB_TABLE)), KNOB_VALUE)
def test_any_value_of_any_knob_is_read_or_refused_in_one_line(name, value):
    survives(lambda: read_params({}, [f"{name}={value}"]))


@settings(max_examples=EXAMPLES["jobs"], deadline=None, derandomize=True, phases=PHASES)
@given(st.sampled_from(sorted(k for k in KNOB_TABLE if k.startswith("NCCL_"))), KNOB_VALUE,
       st.sampled_from(["all_reduce", "all_gather", "broadcast", "alltoall"]), st.integers(0, 1 << 34))
def test_a_job_with_any_knob_value_plans_or_refuses(name, value, collective, nbytes):
    def plan():
        job = load_job(JobSpec(system="dgx-h100", nodes=1, gpus_per_node=8), read_params({}, [f"{name}={value}"]))
        the_call = api.call(job, collective, nbytes)
        the_plan = api.plan(job, the_call)
        # A collective with bytes to move has channels (point-to-point plans are records without them).
        assert the_plan.algorithm == "P2P" or the_plan.n_channels >= (1 if the_call.nbytes else 0)
    survives(plan)


# --- files people give ----------------------------------------------------------------------------

TOML_VALUE = st.one_of(st.integers(-10 ** 12, 10 ** 12), st.floats(allow_nan=True, allow_infinity=True),
                       st.text(max_size=8), st.booleans(), st.lists(st.integers(-5, 10 ** 6), max_size=3))
GRID_KEYS = ["engine", "collective", "sizes", "dtype", "system", "nodes", "gpus_per_node", "fabric", "nic_gbps",
             "oversubscription", "switch_lat_us", "nccl_version", "nics_per_node", "hosts_per_leaf"]


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    return json.dumps(value)


@FAST
@given(st.dictionaries(st.sampled_from(GRID_KEYS + ["bogus"]), TOML_VALUE, max_size=4))
def test_any_grid_is_read_or_refused_and_its_points_answer_or_say_why(table):
    text = "[sweep]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in table.items())
    points = survives(lambda: read_grid(text, "grid.toml")) or []
    assert isinstance(points, list)


@FAST
@given(st.dictionaries(st.text(max_size=12), TOML_VALUE, max_size=3))
def test_any_calibration_file_is_read_or_refused(tmp_path_factory, values):
    path = tmp_path_factory.mktemp("cal") / "cal.toml"
    path.write_text("[set]\n" + "".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in values.items()))
    survives(lambda: api.read_calibration(path))


NCCL_TESTS_LINE = st.one_of(
    st.text(max_size=60),
    st.sampled_from(["# Collective test starting: all_reduce_perf", "#  Rank  0 Group  0 Pid 1 on h device  0",
                     "# nThread 1 nGpus 8 minBytes 8 maxBytes 128 step: 2(factor)", "# Avg bus bandwidth    : 1.2"]),
    st.lists(st.one_of(st.integers(-9, 10 ** 12).map(str), st.sampled_from(["float", "sum", "-1", "N/A", "nan"])),
             min_size=3, max_size=13).map(lambda cells: "  ".join(cells)),
)


@FAST
@given(st.lists(NCCL_TESTS_LINE, max_size=12))
def test_any_nccl_tests_output_is_read_or_refused(lines):
    survives(lambda: read_results("\n".join(lines), "measured.txt"))


# --- what a hung job leaves behind -------------------------------------------------------------------

def _dump(rank: int) -> dict:
    """A Flight Recorder dump of PyTorch's JSON form (pg_status values are strings there)."""
    entry = {"record_id": 0, "pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": 12,
             "p2p_seq_id": 0, "op_id": 12, "profiling_name": "nccl:all_reduce", "time_created_ns": 1,
             "input_sizes": [[1024]], "input_dtypes": ["Float"], "output_sizes": [[1024]],
             "output_dtypes": ["Float"], "state": "scheduled" if rank == 3 else "started", "retired": False,
             "timeout_ms": 600000, "is_p2p": False, "frames": []}
    return {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
            "pg_status": {"0": {"last_enqueued_collective": "12", "last_started_collective": "12",
                                "last_completed_collective": "11"}}, "entries": [entry]}


RAS = {"nccl_version": "2.29.1", "communicators": [{
    "hash": "0x1f", "size": 4, "ranks_count": 3, "missing_ranks_count": 1,
    "ranks": [{"rank": r, "collective_counts": {"AllReduce": 40}} for r in (0, 1, 3)],
    "missing_ranks": [{"rank": 2, "status": {"unresponsive": True, "considered_dead": False}}]}]}
ODD = st.one_of(st.none(), st.integers(-3, 2 ** 40), st.floats(allow_nan=True), st.text(max_size=5), st.booleans(),
                st.just([]), st.just({}), st.just([[1, "x"]]), st.just({"0": "1"}))


def _places(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _places(value, prefix + (key,))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            yield from _places(value, prefix + (index,))


@st.composite
def damaged(draw, doc):
    """`doc` with up to three fields deleted or replaced by values of the wrong kind."""
    doc = copy.deepcopy(doc)
    places = list(_places(doc))[1:]
    for _ in range(draw(st.integers(1, 3))):
        place = draw(st.sampled_from(places))
        parent = doc
        try:
            for key in place[:-1]:
                parent = parent[key]
            if draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(place[-1], None)
            else:
                parent[place[-1]] = draw(ODD)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier change removed the way there
    return doc


@settings(max_examples=EXAMPLES["dumps"], deadline=5000, derandomize=True, phases=PHASES,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.builds(_dump, st.just(0)), damaged(_dump(1)), damaged(_dump(3))),
                min_size=1, max_size=4))
def test_damaged_flight_recorder_dumps_are_diagnosed_or_refused(tmp_path_factory, dumps):
    folder = tmp_path_factory.mktemp("fr")
    paths = []
    for rank, dump in enumerate(dumps):
        path = folder / f"nccl_trace_rank_{rank}"
        path.write_text(json.dumps(dump))
        paths.append(path)
    found = survives(lambda: api.diagnose(paths))
    assert found is None or found.category


@settings(max_examples=EXAMPLES["dumps"], deadline=5000, derandomize=True, phases=PHASES,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(damaged(RAS))
def test_damaged_ras_dumps_are_diagnosed_or_refused(tmp_path_factory, doc):
    path = tmp_path_factory.mktemp("ras") / "ras.json"
    path.write_text(json.dumps(doc))
    found = survives(lambda: api.diagnose([path]))
    assert found is None or found.category


@pytest.mark.parametrize("cut", [1, 7, 100, -3])
def test_a_truncated_dump_is_read_as_text(tmp_path, cut):
    path = tmp_path / "nccl_trace_rank_0"
    path.write_text(json.dumps(_dump(0))[:cut])
    assert survives(lambda: api.diagnose([path])) is not None
