"""The Python API: the README's example runs as written, results are tables, bad input is one error."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from nicksim import api

README = Path(__file__).resolve().parent.parent / "README.md"


def _readme_example() -> str:
    section = README.read_text().split("## Use it from Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_runs(capsys):
    exec(compile(_readme_example(), "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "busbw_gbps" in out and "DES busbw at 1 GiB, 2:1 spine:" in out and "primitives on channel 0" in out


def test_perf_results_are_records_and_frames():
    job = api.load("dgx-h100", env={"NCCL_ALGO": "Ring"})
    run = api.perf(job, "all_gather", sizes=[1 << 20, 1 << 24])
    records = run.records()
    assert [r["nbytes"] for r in records] == [1 << 20, 1 << 24]
    assert {r["algorithm"] for r in records} == {"Ring"} and all(r["busbw_gbps"] > 0 for r in records)
    frame = run.to_pandas()
    assert list(frame["nbytes"]) == [1 << 20, 1 << 24]
    assert run.json_doc()["nicksim"]["engine"] == "nccl"  # nccl-tests' -J schema, nicksim's own key


def test_every_engine_answers_through_one_interface():
    job = api.load("pcie-8x-rtx4090", gpus_per_node=2)
    call = api.call(job, "all_reduce", "1M")
    answers = {name: api.engine(name).run(job, call) for name in ("nccl", "des")}
    assert {r.estimate for r in answers.values()} == {"nccl", "des"}
    assert answers["nccl"].algorithm == answers["des"].algorithm
    assert api.engine("model").name == "nccl"  # the former name still answers


def test_plans_and_programs_from_one_builder():
    job = api.load("dgx-h100", nodes=2, env={"NCCL_ALGO": "NVLSTree"})
    plan = api.plan(job, api.call(job, "all_reduce", "64M"))
    assert plan.algorithm == "NVLSTree"
    programs = api.programs(job, plan)
    assert sorted(programs) == list(range(16)) and all(programs.values())
    api.check(job, plan)


def test_bad_input_raises_the_one_error_type():
    with pytest.raises(api.NickSimError) as err:
        api.load("dgx-h1000")
    assert "dgx-h1000" in err.value.line()
    with pytest.raises(api.NickSimError):
        api.engine("fluid")
    with pytest.raises(api.NickSimError):
        api.perf(api.load("dgx-h100"), "all_reduse")


def test_every_public_name_is_there_though_loaded_on_first_use():
    # the names api offers from other modules come on first use (PEP 562): dir() and `from nicksim.api
    # import X` see every one of __all__, and what a name is does not depend on how it was reached
    import subprocess
    import sys
    from nicksim.formats.report import NCCL_TESTS_LATEST
    from nicksim.job import Job
    from nicksim.topology.catalog import CATALOG
    listed = set(dir(api))
    for name in api.__all__:
        assert name == "figures" or name in listed, name  # figures: matplotlib, loaded only when asked for
        if name != "figures":
            namespace: dict = {}
            exec(f"from nicksim.api import {name}", namespace)
            assert namespace[name] is getattr(api, name), name
    assert api.Job is Job and api.NCCL_TESTS_LATEST == NCCL_TESTS_LATEST and api.SYSTEMS == tuple(CATALOG)
    assert isinstance(api.VERSION, str) and api.VERSION
    assert not hasattr(api, "no_such_name")  # an AttributeError, as for any module
    # importing the api loads neither the engines, the studies, the job nor what they stand on
    code = ("import sys; from nicksim import api; heavy = ('numpy', 'networkx', 'lxml', 'nicksim.job', "
            "'nicksim.engines', 'nicksim.studies', 'nicksim.graph', 'nicksim.topology', 'nicksim.model', "
            "'importlib.metadata'); print(sorted(m for m in sys.modules if m.startswith(heavy)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
