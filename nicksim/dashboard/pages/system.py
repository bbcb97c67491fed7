"""System: the node NCCL models (drawn, with its links' kinds and GB/s), the path-type matrix, the
cluster's fabric, what loading assumed, and NCCL's own print of the system."""
import streamlit as st

from nicksim import api
from nicksim.dashboard import common

__all__ = ()  # a page script: run by Streamlit, imported by nothing

job = common.page_job()
st.title("System")
st.caption(f"{job.system_name}: {job.spec.nodes} node(s), {job.nranks} ranks, NCCL {job.spec.nccl_version}")
notes = job.notes()
if notes:
    with st.expander(f"What loading the system assumed or noted ({len(notes)})", expanded=True):
        st.markdown("\n".join(f"- {note}" for note in notes))

st.subheader("The node")
common.show(api.figures.draw_graph(api.node_drawing(job)))

st.subheader("Paths")
common.show(api.figures.draw_path_matrix(api.path_matrix(job)))

if job.spec.nodes > 1:
    st.subheader("The fabric")
    shown = st.slider("nodes drawn", min_value=1, max_value=min(job.spec.nodes, 32), value=min(job.spec.nodes, 8),
                      key="fabric_nodes")
    common.show(api.figures.draw_graph(api.fabric_drawing(job, shown)))

st.subheader("As NCCL prints it (NCCL_DEBUG_SUBSYS=GRAPH)")
try:
    lines = api.topology_lines(job, paths=True)
except api.NickSimError as exc:
    common.fail(exc)
st.code("\n".join(lines), language=None)
st.download_button("NCCL_TOPO_DUMP_FILE of this node", data=api.topology_xml(job), file_name="topology.xml",
                   mime="application/xml")
