"""The dashboard, page by page, through Streamlit's AppTest: its widgets drive nicksim.api, every
page runs without an exception, and bad input (a broken topology XML, a garbage log, bad knobs or
sizes) shows one error line on the page. What a page shows is compared with what the API returns
for the same inputs."""
from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from nicksim import api

TIMEOUT_S = 240


def _app(page: str | None = None, **sidebar) -> AppTest:
    at = AppTest.from_file(str(api.DASHBOARD_APP), default_timeout=TIMEOUT_S)
    at.run()
    for key, value in sidebar.items():
        _by_key(at, key).set_value(value)
    if sidebar:
        at.run()
    if page:
        at.switch_page(f"pages/{page}.py")
        at.run()
    _no_exception(at)
    return at


def _by_key(at: AppTest, key: str):
    for kind in ("selectbox", "number_input", "text_area", "text_input", "radio"):
        for widget in getattr(at, kind):
            if widget.key == key:
                return widget
    raise KeyError(key)


def _no_exception(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def _errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def _widget(at: AppTest, kind: str, key: str):
    return next(w for w in getattr(at, kind) if w.key == key)


def test_system_page_shows_the_system_as_nccl_prints_it():
    at = _app()
    assert [t.value for t in at.title] == ["System"]
    printed = at.code[0].value
    assert printed == "\n".join(api.topology_lines(api.load("dgx-h100"), paths=True))
    assert not _errors(at)


def test_the_sidebar_drives_the_job_on_every_page():
    at = _app(nodes=2, nccl="2.23")
    job = api.load("dgx-h100", nodes=2, nccl_version="2.23")
    assert at.code[0].value == "\n".join(api.topology_lines(job, paths=True))
    assert "2 node(s), 16 ranks, NCCL 2.23" in at.caption[0].value
    assert any(s.value == "The fabric" for s in at.subheader)  # drawn only for several nodes
    at.switch_page("pages/plans.py")
    at.run()
    _no_exception(at)
    assert f"{job.channels.n_channels} channels" in at.caption[0].value
    assert _widget(at, "number_input", "nodes").value == 2  # kept across pages


def test_a_broken_topology_xml_is_one_error_on_the_page():
    at = _app(system="upload an NCCL topology XML")
    at.file_uploader[0].set_value(("mybox.xml", b"<system version=\"1\"><cpu numaid=\"0\"", "text/xml"))
    at.run()
    _no_exception(at)
    errors = _errors(at)
    assert len(errors) == 1 and "mybox.xml" in errors[0] and "valid" in errors[0], errors


def test_an_uploaded_topology_is_the_system(tmp_path):
    a100 = api.load("dgx-a100")
    at = _app(system="upload an NCCL topology XML")
    at.file_uploader[0].set_value(("a100.xml", api.topology_xml(a100).encode(), "text/xml"))
    at.run()
    _no_exception(at)
    assert not _errors(at)
    path = tmp_path / "a100.xml"
    path.write_text(api.topology_xml(a100))
    assert at.code[0].value == "\n".join(api.topology_lines(api.load(str(path)), paths=True))


def test_a_partial_vendor_file_is_completed_and_the_assumptions_listed():
    import re
    full = api.topology_xml(api.load("dgx-h100"))
    partial = re.sub(r"<gpu [^>]*>.*?</gpu>", "", full, flags=re.S)  # the PCI tree only, as vendors ship it
    at = _app(system="upload an NCCL topology XML")
    at.file_uploader[0].set_value(("vendor.xml", partial.encode(), "text/xml"))
    at.run()
    _by_key(at, "gpu").set_value("h100")
    at.run()
    _no_exception(at)
    assert not _errors(at)
    listed = "\n".join(m.value for m in at.markdown)
    assert "completed 8 GPU endpoint(s) as H100 SXM5" in listed and "NVLinks" in listed


def test_a_bad_knob_is_one_error_and_a_value_nccl_ignores_is_its_warning():
    at = _app(env="NCCL_ALGO")
    errors = _errors(at)
    assert len(errors) == 1 and "'NCCL_ALGO' is not KEY=VALUE" in errors[0], errors
    at = _app(env="NCCL_ALGO=Bogus")
    assert not _errors(at)
    assert [w.value for w in at.warning] == list(api.settings(["NCCL_ALGO=Bogus"]).warnings)


def test_plans_page_shows_nccls_choice_and_the_priced_alternatives():
    at = _app("plans")
    job = api.load("dgx-h100")
    for size in ("64M", "4K"):
        _widget(at, "text_input", "plan_size").set_value(size)
        at.run()
        _no_exception(at)
        plan = api.plan(job, api.call(job, "all_reduce", size))
        metrics = {m.label: m.value for m in at.metric}
        assert (metrics["algorithm"], metrics["protocol"], int(metrics["channels"]), int(metrics["threads"])) == \
            (plan.algorithm, plan.protocol, plan.n_channels, plan.n_threads)
        priced = at.dataframe[-1].value
        chosen = priced[priced["chosen"]]
        assert list(zip(chosen["algorithm"], chosen["protocol"])) == [(plan.algorithm, plan.protocol)]
        assert chosen["time_us"].iloc[0] == pytest.approx(plan.time_us)
    lines = api.search_lines(job, print_tuning=True)[1]
    assert any(c.value == "\n".join(lines) for c in at.code)


def test_plans_page_refuses_a_size_it_cannot_read():
    at = _app("plans")
    _widget(at, "text_input", "plan_size").set_value("12Q")
    at.run()
    _no_exception(at)
    assert len(_errors(at)) == 1 and "12Q" in _errors(at)[0]


def _perf_page(**values) -> AppTest:
    at = _app("performance")
    _widget(at, "text_input", "perf_min").set_value("1M")
    _widget(at, "text_input", "perf_max").set_value("16M")
    for key, value in values.items():
        _by_key(at, key).set_value(value)
    at.run()
    _no_exception(at)
    return at


def test_performance_page_puts_the_time_model_beside_the_des():
    at = _perf_page()
    job = api.load("dgx-h100")
    sizes = api.sizes("1M", "16M", 4)
    table = at.dataframe[0].value
    model = api.perf(job, "all_reduce", sizes).records()
    des = api.perf(job, "all_reduce", sizes, engine="des").records()
    assert list(table["size"]) == sizes
    assert list(table["nccl busbw_gbps"]) == pytest.approx([r["busbw_gbps"] for r in model])
    assert list(table["des busbw_gbps"]) == pytest.approx([r["busbw_gbps"] for r in des])
    links = at.dataframe[1].value
    assert len(links) > 0 and (links["load_pct"].diff().dropna() <= 1e-9).all()  # busiest first


def test_a_degraded_link_slows_the_des_and_not_the_time_model():
    at = _perf_page()
    plain = at.dataframe[0].value
    busiest = at.dataframe[1].value["link"].iloc[0]
    assert busiest in api.fabric_links(api.load("dgx-h100"))
    slowed = _perf_page(perf_link=busiest, perf_link_value=0.1).dataframe[0].value
    assert list(slowed["nccl busbw_gbps"]) == list(plain["nccl busbw_gbps"])
    assert (slowed["des busbw_gbps"] < plain["des busbw_gbps"]).all()


def test_garbage_measurements_are_one_error_and_the_curves_still_show():
    at = _perf_page(perf_measured_text="this is not nccl-tests output\n\x00\x01")
    errors = _errors(at)
    assert len(errors) == 1 and "pasted output" in errors[0], errors
    assert len(at.dataframe) >= 1


def test_hangs_page_replays_and_diagnoses_a_scenario():
    at = _app("hangs")
    _widget(at, "selectbox", "hang_scenario").set_value("straggler")
    at.run()
    _no_exception(at)
    text = "\n".join(c.value for c in at.code)
    assert "category: straggler" in text and "culprit ranks: 3" in text


def test_hangs_page_diagnoses_uploaded_logs_and_refuses_garbage(tmp_path):
    at = _app("hangs")
    at.radio[0].set_value("uploaded logs or Flight Recorder dumps")
    at.run()
    at.file_uploader[0].set_value([("rank0.log", b"\x00\xffnot a log at all\n" * 20, "text/plain")])
    at.run()
    _no_exception(at)
    errors = _errors(at)
    assert len(errors) == 1 and "rank0.log" in errors[0], errors
    replayed = api.replay("missing-group-end", tmp_path)
    logs = [p for p in replayed.files if p.endswith(".log")]
    at.file_uploader[0].set_value([(p.rsplit("/", 1)[-1], open(p, "rb").read(), "text/plain") for p in logs])
    at.run()
    _no_exception(at)
    assert not _errors(at)
    expected = api.diagnosis_lines(api.diagnose(logs))
    assert any(c.value == "\n".join(expected) for c in at.code)


def _measured_text(job, sizes) -> str:
    """nccl-tests' output as one process driving every GPU prints it (a `#  Rank` line per GPU),
    with the time model's rows."""
    lines: list[str] = []
    api.perf(job, "all_reduce", sizes, emit=lines.append)
    devices = [f"#  Rank {r:2d} Group  0 Pid  4242 on    node0 device {r:2d} [0x{r:02x}] NVIDIA H100 80GB HBM3"
               for r in range(job.nranks)]
    return "\n".join(lines[:2] + devices + lines[2:])


def test_calibration_page_fits_and_writes_the_files():
    job = api.load("dgx-h100")
    at = _app("calibration")
    _widget(at, "text_area", "cal_text").set_value(_measured_text(job, api.sizes("1M", "64M", 2)))
    at.run()
    _no_exception(at)
    assert not _errors(at)
    params, per_size = at.dataframe[0].value, at.dataframe[1].value
    assert set(params["engine"]) == {"nccl"} and "launch_us" in set(params["parameter"])
    # NCCL's own times, measured: nothing to correct, on the fitted sizes or the held-out ones.
    assert per_size["held_out"].sum() == 3 and per_size["error_after_pct"].abs().max() < 0.5
    assert at.get("download_button")[0].proto.label.startswith("calibration file")
    _widget(at, "text_input", "tuner_min").set_value("1M")
    _widget(at, "text_input", "tuner_max").set_value("4M")
    at.button(key="cal_tuner").click()
    at.run()
    _no_exception(at)
    tuner = at.dataframe[-1].value
    assert tuner["min_bytes"].iloc[0] == 0 and len(tuner) >= 1
    assert {tuple(x) for x in zip(tuner["algorithm"], tuner["protocol"])} <= {
        (r["algorithm"], r["protocol"]) for r in api.curves(job, "all_reduce", [1 << 20, 4 << 20]).records()}


def test_calibration_page_refuses_measurements_of_another_system():
    at = _app("calibration", nodes=2)
    _widget(at, "text_area", "cal_text").set_value(_measured_text(api.load("dgx-h100"), [1 << 20]))
    at.run()
    _no_exception(at)
    errors = _errors(at)
    assert len(errors) == 1 and "16 ranks" in errors[0], errors
