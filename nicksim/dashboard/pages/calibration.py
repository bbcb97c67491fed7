"""Calibration: measurements of the sidebar's system fit a DES parameter; the curves before and
after, the error at every candidate value, the calibration file `perf --calibration` reads, and
the fastest algorithm/protocol per size range as NCCL's example tuner plugin reads it."""
import streamlit as st

from nicksim import api
from nicksim.dashboard import common

__all__ = ()  # a page script: run by Streamlit, imported by nothing

job = common.page_job()
st.title("Calibration")
st.write(f"Measurements of this system ({job.system_name}, {job.nranks} ranks, as the sidebar sets it) fit one DES "
         "parameter; the fit is scored by the median |busbw error| over sizes of 1 MiB and more.")
key = (repr(job.spec), tuple(sorted(job.params.raw.items())))

left, right = st.columns(2)
collective = left.selectbox("collective measured", [c for c in api.COLLECTIVES if c != "sendrecv"], key="cal_collective")
pasted = left.text_area("nccl-tests output, as pasted", value="", height=150, key="cal_text")
uploaded = right.file_uploader("or its file (text or -J JSON)", key="cal_file")
fitted = api.fit_parameters()
name = right.selectbox("parameter to fit", fitted["names"], key="cal_name")
values_text = right.text_input("candidate values", value=" ".join(f"{v:g}" for v in fitted["values"]),
                               key="cal_values")
text = uploaded.getvalue().decode("utf-8", "replace") if uploaded is not None else pasted
if not text.strip():
    st.info("Paste or upload the nccl-tests output of a run on this system.")
    st.stop()
file_name = uploaded.name if uploaded is not None else "pasted.txt"
try:
    api.measured(text, collective, job.nranks, file_name)  # one line if the text holds no such table
    values = tuple(float(v) for v in values_text.replace(",", " ").split())
except ValueError:
    st.error(f"candidate values: '{values_text}' (valid: numbers above 0, separated by spaces)")
    st.stop()
except api.NickSimError as exc:
    common.fail(exc)
path = common.saved_text(file_name, text)
env = dict(job.params.raw)


@st.cache_data(max_entries=8, show_spinner="fitting: the DES at every candidate value")
def fitted_case(_job, key, path, collective, name, values, env):
    the_case = api.case(path, _job, collective, env=dict(env))
    fit = api.calibrate([the_case], name, values, jobs=1)
    calibration = {fit.name: fit.value}
    before = api.case_points(the_case, "des").records()
    after = api.case_points(the_case, "des", calibration).records()
    model = api.case_points(the_case, "nccl").records()
    return (api.fit_lines(fit), api.calibration_text(fit), calibration, list(fit.medians), fit.value, before, after,
            model)


try:
    lines, calibration_file, calibration, medians, chosen, before, after, model = fitted_case(
        job, key, str(path), collective, name, values, tuple(sorted(env.items())))
except api.NickSimError as exc:
    common.fail(exc)

measured = [{"nbytes": r["nbytes"], "busbw_gbps": r["measured_busbw_gbps"]} for r in before]
common.show(api.figures.draw_calibration(
    {"measured": measured, "DES before": before, f"DES after ({name} = {chosen:g})": after, "NCCL's model": model},
    title=f"{collective} on {job.system_name}, {job.nranks} ranks"))
c1, c2 = st.columns(2)
with c1:
    st.subheader("The parameter")
    st.dataframe([{"value": v, "median |error| %": m, "chosen": v == chosen} for v, m in medians], hide_index=True)
    st.download_button("calibration file (perf --calibration)", data=calibration_file,
                       file_name="calibration.toml", mime="application/toml")
with c2:
    st.subheader("Per size")
    st.dataframe([{"size": b["nbytes"], "measured GB/s": b["measured_busbw_gbps"], "before GB/s": b["busbw_gbps"],
                   "after GB/s": a["busbw_gbps"], "before error %": b["error_pct"], "after error %": a["error_pct"]}
                  for b, a in zip(before, after)], hide_index=True)
with st.expander("the fit as `nicksim calibrate` prints it"):
    st.code("\n".join(lines), language=None)

st.subheader("For NCCL's tuner plugin")
st.write("Every algorithm x protocol NCCL prices, forced in turn and run by the calibrated DES; the fastest per size "
         "range, beside NCCL's own pick, written as plugins/tuner/example's nccl_tuner.conf.")
t1, t2, t3 = st.columns(3)
tuner_sizes = (common.parse_size(t1.text_input("from", value="1K", key="tuner_min"), "from"),
               common.parse_size(t2.text_input("to", value="1G", key="tuner_max"), "to"),
               int(t3.number_input("factor", min_value=2, max_value=64, value=8, key="tuner_factor")))
try:
    sizes = tuple(api.sizes(*tuner_sizes))
except api.NickSimError as exc:
    common.fail(exc)
tuner_key = (key, collective, tuple(sorted(calibration.items())), sizes)


def fastest_pairs():
    bar = st.progress(0.0, text="tuner")
    table = api.tuner(job, collective, sizes, engine="des", overrides=calibration,
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
