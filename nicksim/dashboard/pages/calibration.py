"""Calibration: measurements of the sidebar's system fit NCCL's time model and the DES jointly, as
`nicksim calibrate` does; the curves before and after, every parameter with its uncertainty or why
the data leave it, the error on the sizes held out, the calibration file, and the calibrated choice
per size range as NCCL's example tuner plugin reads it."""
import streamlit as st

from nicksim import api
from nicksim.dashboard import common

__all__ = ()  # a page script: run by Streamlit, imported by nothing

job = common.page_job()
st.title("Calibration")
st.write(f"Measurements of this system ({job.system_name}, {job.nranks} ranks, as the sidebar sets it) fit the "
         "engines' costs jointly; the sizes held out say whether the fit carries to what it did not see.")
key = (repr(job.spec), tuple(sorted(job.params.raw.items())))

left, right = st.columns(2)
collective = left.selectbox("collective, where the output names none", [c for c in api.COLLECTIVES],
                            key="cal_collective")
pasted = left.text_area("nccl-tests output, as pasted", value="", height=150, key="cal_text")
uploaded = right.file_uploader("or its file (text or -J JSON)", key="cal_file")
engines = right.multiselect("engines to fit", ["nccl", "des"], default=["nccl"], key="cal_engines")
holdout = right.selectbox("held out of the fit", ["alternate", "none"], key="cal_holdout",
                          help="alternate: every other size, from the smallest fitted")
min_size = right.text_input("fit sizes from", value="1M", key="cal_min")
text = uploaded.getvalue().decode("utf-8", "replace") if uploaded is not None else pasted
if not text.strip():
    st.info("Paste or upload the nccl-tests output of a run on this system.")
    st.stop()
if not engines:
    st.info("Choose an engine to fit.")
    st.stop()
path = common.saved_text(uploaded.name if uploaded is not None else "pasted.txt", text)


@st.cache_data(max_entries=8, show_spinner="fitting")
def fitted(_job, key, path, collective, engines, holdout, min_nbytes):
    cal = api.calibrate_measured([path], job=_job, collective=collective, engines=engines,
                                 holdout=[holdout] if holdout != "none" else [], min_nbytes=min_nbytes)
    return (api.calibration_lines(cal), api.calibration_file_text(cal), api.calibration_points(cal).records(),
            api.calibration_parameters(cal).records(), {f.engine: f.values() for f in cal.fits},
            [f.engine for f in cal.fits if f.over_fitted])


try:
    lines, calibration_file, points, params, values, over = fitted(
        job, key, str(path), collective, tuple(engines), holdout, common.parse_size(min_size, "fit sizes from"))
except api.NickSimError as exc:
    common.fail(exc)

runs = list(dict.fromkeys(p["source"] for p in points))
named = {p["source"]: f"{p['collective']}, {p['nranks']} ranks" for p in points}
series = {}
for run in runs:  # a curve per measured table: a file may hold several collectives
    tag = f" {named[run]}" if len(runs) > 1 else ""
    first = [p for p in points if p["source"] == run and p["engine"] == engines[0]]
    series["measured" + tag] = [{"nbytes": p["nbytes"], "busbw_gbps": p["measured_busbw_gbps"]} for p in first]
    for engine in engines:
        mine = [p for p in points if p["source"] == run and p["engine"] == engine]
        for when in ("before", "after"):
            series[f"{engine} {when}{tag}"] = [{"nbytes": p["nbytes"], "busbw_gbps": p[f"{when}_busbw_gbps"]}
                                               for p in mine]
common.show(api.figures.draw_calibration(series, title=f"{job.system_name}, {job.nranks} ranks"))
for line in lines:
    if ": held-out sizes" in line or ": fitted sizes" in line:
        st.write(line.lstrip("# "))
for engine in over:
    st.warning(f"the {engine} fit is over-fitted: better on the sizes it saw, worse on those held out")
c1, c2 = st.columns(2)
with c1:
    st.subheader("Parameters")
    st.dataframe(params, hide_index=True)
    st.download_button("calibration file (perf --calibration)", data=calibration_file,
                       file_name="calibration.toml", mime="application/toml")
with c2:
    st.subheader("Per size")
    st.dataframe([{k: p[k] for k in ("engine", "nbytes", "held_out", "measured_busbw_gbps", "before_busbw_gbps",
                                     "after_busbw_gbps", "error_before_pct", "error_after_pct", "algorithm",
                                     "protocol")} for p in points], hide_index=True)
with st.expander("the fit as `nicksim calibrate` prints it"):
    st.code("\n".join(lines), language=None)

st.subheader("For NCCL's tuner plugin")
tuner_engine = "nccl" if "nccl" in values else "des"
st.write(f"Every algorithm x protocol NCCL prices, forced in turn and timed by the calibrated {tuner_engine} engine; "
         "the fastest per size range, beside NCCL's own pick, written as plugins/tuner/example's nccl_tuner.conf.")
t1, t2, t3 = st.columns(3)
tuner_sizes = (common.parse_size(t1.text_input("from", value="1K", key="tuner_min"), "from"),
               common.parse_size(t2.text_input("to", value="1G", key="tuner_max"), "to"),
               int(t3.number_input("factor", min_value=2, max_value=64, value=8, key="tuner_factor")))
try:
    sizes = tuple(api.sizes(*tuner_sizes))
except api.NickSimError as exc:
    common.fail(exc)
tuner_collective = points[0]["collective"]
tuner_key = (key, tuner_collective, tuner_engine, tuple(sorted(values[tuner_engine].items())), sizes)


def fastest_pairs():
    bar = st.progress(0.0, text="tuner")
    options = {"calibration": values["nccl"]} if tuner_engine == "nccl" else {"overrides": values["des"]}
    table = api.tuner(job, tuner_collective, sizes, engine=tuner_engine, **options,
                      progress=lambda done, total: bar.progress(done / total, text=f"pair {done} of {total}"))
    bar.empty()
    return table


if st.button("find the fastest pair per size", key="cal_tuner") or \
        tuner_key in st.session_state.get("_remembered_tuner", {}):
    try:
        table = common.remembered("tuner", tuner_key, fastest_pairs)
    except api.NickSimError as exc:
        common.fail(exc)
    st.dataframe(table.to_pandas(), hide_index=True)
    st.download_button("nccl_tuner.conf", data=api.tuner_csv(table), file_name="nccl_tuner.conf", mime="text/csv")
