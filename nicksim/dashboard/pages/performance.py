"""Performance: busbw and time over sizes for every algorithm x protocol NCCL prices (its choice
marked), NCCL's time model and the DES side by side, measured rows overlaid, what-ifs (NVLink
bandwidth, a failed or degraded link, a straggler) for the DES, its busiest links, and the
timeline of one call."""
import streamlit as st

from nicksim import api
from nicksim.dashboard import common

__all__ = ()  # a page script: run by Streamlit, imported by nothing

job = common.page_job()
st.title("Performance")
key = (repr(job.spec), tuple(sorted(job.params.raw.items())))


@st.cache_data(max_entries=32, show_spinner=False)
def model_rows(_job, key, collective, sizes):
    return api.curves(_job, collective, sizes).records(), api.perf(_job, collective, sizes).records()


def des_rows(job, collective, sizes, overrides, faults, stragglers):
    bar = st.progress(0.0, text="DES")
    done = []

    def emit(line):
        if line.strip() and not line.startswith("#"):
            done.append(line)
            bar.progress(min(1.0, len(done) / len(sizes)), text=f"DES: {len(done)} of {len(sizes)} sizes")
    run = api.perf(job, collective, sizes, engine="des", emit=emit, overrides=dict(overrides), faults=list(faults),
                   stragglers=list(stragglers))
    bar.empty()
    biggest = run.results[-1] if run.results else None
    links = api.link_table(biggest).records() if biggest is not None else []
    hang = list(run.hang.lines()) if run.hang is not None else []
    return run.records(), links, hang


@st.cache_data(max_entries=16, show_spinner="the DES runs one call with a trace")
def traced(_job, key, collective, nbytes, overrides, faults, stragglers, ranks):
    engine = api.engine("des", overrides=dict(overrides), faults=list(faults), stragglers=list(stragglers),
                        trace=True)
    result = engine.run(_job, api.call(_job, collective, nbytes))
    return api.timeline(result, ranks=ranks).records(), result.algorithm, result.protocol, result.time_us


left, mid, right, far = st.columns(4)
collective = left.selectbox("collective", [c for c in api.COLLECTIVES if c != "sendrecv"], key="perf_collective")
low = common.parse_size(mid.text_input("-b (min size)", value="1K", key="perf_min"), "-b")
high = common.parse_size(right.text_input("-e (max size)", value="1G", key="perf_max"), "-e")
factor = far.number_input("-f (factor)", min_value=2, max_value=64, value=4, step=1, key="perf_factor")
try:
    sizes = tuple(api.sizes(low, high, int(factor)))
except api.NickSimError as exc:
    common.fail(exc)

st.subheader("What-if for the DES")
use_des = st.toggle("run the discrete-event simulation too", value=True, key="perf_des")
w1, w2, w3 = st.columns(3)
nvlink = w1.number_input("NVLink bandwidth per link, GB/s (0: the system's)", min_value=0.0, value=0.0, step=10.0,
                         key="perf_nvlink")
links = ("(none)",) + api.fabric_links(job)
link = w2.selectbox("link to fail or degrade", links, key="perf_link")
mode = w2.radio("what happens to it", ["degraded", "down"], horizontal=True, key="perf_link_mode")
factor_or_at = w2.number_input("capacity kept (degraded) or time it fails, us (down)", min_value=0.0, value=0.5,
                               step=0.1, key="perf_link_value")
straggler_rank = w3.number_input("straggler rank (-1: none)", min_value=-1, max_value=job.nranks - 1, value=-1,
                                 key="perf_straggler")
straggler_us = w3.number_input("its delay, us", min_value=0.0, value=100.0, step=50.0, key="perf_straggler_us")
overrides = (("nvlink.bw_gbps", float(nvlink)),) if nvlink > 0 else ()
faults = ()
if link != "(none)":
    faults = (f"degrade:{link}:{factor_or_at:g}",) if mode == "degraded" else (f"link-down:{link}@{factor_or_at:g}",)
stragglers = (f"{int(straggler_rank)}:{straggler_us:g}",) if straggler_rank >= 0 else ()

st.subheader("Measured (optional)")
m1, m2 = st.columns(2)
pasted = m1.text_area("nccl-tests output, as pasted", value="", height=120, key="perf_measured_text")
uploaded = m2.file_uploader("or its file (text or -J JSON)", key="perf_measured_file")
measured = []
text = uploaded.getvalue().decode("utf-8", "replace") if uploaded is not None else pasted
if text.strip():
    try:
        measured = api.measured(text, collective, job.nranks, uploaded.name if uploaded else "pasted output").records()
    except api.NickSimError as exc:
        st.error(exc.line())

try:
    curves, model = model_rows(job, key, collective, sizes)
    runs = {"nccl": model}
    links_rows, hang = [], []
    if use_des:
        des, links_rows, hang = common.remembered(
            "des", (key, collective, sizes, overrides, faults, stragglers),
            lambda: des_rows(job, collective, sizes, overrides, faults, stragglers))
        runs["des"] = des
except api.NickSimError as exc:
    common.fail(exc)

value = st.radio("plot", ["busbw_gbps", "time_us"], horizontal=True, key="perf_value",
                 format_func=lambda v: "bus bandwidth" if v == "busbw_gbps" else "time")
common.show(api.figures.draw_curves(curves, runs, measured, value))
for line in hang:
    st.warning(line)
table = [{"size": r["nbytes"], **{f"{name} {col}": row[col] for name, rs in runs.items()
                                   for row in rs if row["nbytes"] == r["nbytes"]
                                   for col in ("algorithm", "protocol", "time_us", "busbw_gbps")}}
         for r in model]
st.dataframe(table, hide_index=True)

if use_des:
    st.subheader(f"Busiest links at {common.size_label(sizes[-1])} (DES)")
    st.dataframe(links_rows, hide_index=True)
    st.subheader("One call as a timeline (DES)")
    pick = st.select_slider("size", options=list(sizes), value=sizes[len(sizes) // 2],
                            format_func=common.size_label, key="perf_trace_size")
    shown = st.multiselect("ranks shown", list(range(job.nranks)), default=list(range(min(job.nranks, 4))),
                           key="perf_trace_ranks")
    try:
        spans, algorithm, protocol, time_us = traced(job, key, collective, pick, overrides, faults, stragglers,
                                                     tuple(shown))
    except api.NickSimError as exc:
        common.fail(exc)
    common.show(api.figures.draw_timeline(spans, title=f"{collective} {common.size_label(pick)}: {algorithm}/"
                                                       f"{protocol}, {time_us:.1f} us"))
