"""Hangs: replay a hang the DES knows, or upload what a hung job left (NCCL_DEBUG logs, PyTorch
watchdog lines, Flight Recorder dumps); the per-rank timeline with the blocked ranks marked, who
waits for whom, and the diagnosis with its evidence and next steps."""
import tempfile

import streamlit as st

from nicksim import api
from nicksim.dashboard import common

__all__ = ()  # a page script: run by Streamlit, imported by nothing

job = common.page_job()
st.title("Hangs")


@st.cache_data(max_entries=16, show_spinner="replaying on the DES")
def replayed(name):
    folder = tempfile.mkdtemp(prefix=f"nicksim-{name}-")
    replay = api.replay(name, folder)
    files = {path: open(path, encoding="utf-8", errors="replace").read() for path in replay.files
             if not path.endswith("trace.json")}
    return (replay.scenario.title, replay.scenario.story, [(s.rank, s.state, s.index) for s in replay.standing],
            list(replay.hang_lines), api.replay_timeline(replay).records(), api.waits(replay),
            api.diagnosis_lines(replay.diagnosis), list(replay.diagnosis.culprit_ranks), files)


def show_diagnosis(lines, edges, nranks, culprits):
    left, right = st.columns([3, 2])
    with left:
        st.subheader("Diagnosis")
        st.code("\n".join(lines), language=None)
    with right:
        st.subheader("Who waits for whom")
        common.show(api.figures.draw_waits(edges, nranks, culprits))


source = st.radio("from", ["a scenario replayed on the DES", "uploaded logs or Flight Recorder dumps"],
                  horizontal=True, key="hang_source")
if source.startswith("a scenario"):
    scenarios = api.scenarios()
    name = st.selectbox("scenario", list(scenarios), key="hang_scenario",
                        format_func=lambda n: f"{n}: {scenarios[n].title}")
    try:
        title, story, standing, hang_lines, spans, edges, lines, culprits, files = replayed(name)
    except api.NickSimError as exc:
        common.fail(exc)
    st.write(story)
    st.dataframe([{"rank": r, "state": state, "call": index} for r, state, index in standing], hide_index=True,
                 height=min(300, 40 + 35 * len(standing)))
    blocked = [r for r, state, _ in standing if state in ("started", "scheduled")]
    if spans:
        common.show(api.figures.draw_timeline(spans, blocked, title=f"{name}: per-rank timeline up to the hang"))
    if hang_lines:
        st.code("\n".join(hang_lines), language=None)
    show_diagnosis(lines, edges, len(standing), culprits)
    with st.expander("what each rank would have written"):
        pick = st.selectbox("file", list(files), key="hang_file")
        st.code(files[pick][-20000:], language=None)
else:
    uploads = st.file_uploader("logs (rank*.log, NCCL_DEBUG output), nccl_trace_rank_* dumps", accept_multiple_files=True,
                               key="hang_uploads")
    if not uploads:
        st.info("Upload every rank's log and dump you have; the diagnosis weighs them together.")
        st.stop()
    paths = [common.saved(u.name, u.getvalue()) for u in uploads]
    with_job = st.checkbox(f"the job ran on the sidebar's system ({job.system_name}, {job.nranks} ranks): say where "
                           "each blocked rank waits", value=False, key="hang_with_job")
    try:
        diagnosis = api.diagnose(paths, job if with_job else None, strict=True)
    except api.NickSimError as exc:
        common.fail(exc)
    show_diagnosis(api.diagnosis_lines(diagnosis), api.waits(diagnosis), None, diagnosis.culprit_ranks)
