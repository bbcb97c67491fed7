"""Plans: NCCL's rings per channel, the double binary tree over the nodes, the NVLS and CollNet
heads, the lines NCCL prints of them and its TUNING table; for one call, what NCCL chose and the
priced alternatives behind the choice."""
import streamlit as st

from nicksim import api
from nicksim.dashboard import common

__all__ = ()  # a page script: run by Streamlit, imported by nothing

job = common.page_job()
st.title("Plans")
try:
    notes, lines = api.search_lines(job, print_tuning=True)
except api.NickSimError as exc:
    common.fail(exc)
per_node = len(job.paths.node_system.gpus())
channels = job.channels.n_channels
st.caption(f"{job.system_name}: {channels} channels, {per_node} GPUs per node, {job.nodes} node(s)")

rings_tab, trees_tab, heads_tab, lines_tab = st.tabs(["Rings", "Trees", "NVLS and CollNet heads", "NCCL's lines"])
with rings_tab:
    shown = st.slider("channels drawn", min_value=1, max_value=channels, value=min(channels, 8), key="rings_shown")
    common.show(api.figures.draw_rings(api.ring_orders(job), per_node, job.nodes, shown))
with trees_tab:
    if job.nodes > 1:
        st.write("NCCL's double binary tree: the first half of the channels use one tree, the second half its "
                 "mirror (each node a leaf in one and an inner node in the other).")
        left, right = st.columns(2)
        with left:
            common.show(api.figures.draw_graph(api.tree_drawing(job, 0)))
        with right:
            common.show(api.figures.draw_graph(api.tree_drawing(job, channels // 2)))
    else:
        st.info("One node: the tree is a chain through the node's GPUs (set nodes in the sidebar to see the "
                "double binary tree across nodes).")
with heads_tab:
    common.show(api.figures.draw_heads(api.heads(job)))
with lines_tab:
    for note in notes:
        st.caption(note)
    st.code("\n".join(lines), language=None)

st.subheader("One call")
left, mid, right = st.columns(3)
collective = left.selectbox("collective", [c for c in api.COLLECTIVES if c not in ("sendrecv", "alltoall")],
                            key="plan_collective")
size_text = mid.text_input("size (nccl-tests' size column)", value="64M", key="plan_size")
dtype = right.selectbox("type", ["float", "half", "bfloat16", "double", "int32", "int8"], key="plan_dtype")
nbytes = common.parse_size(size_text, "size")
try:
    the_call = api.call(job, collective, nbytes, dtype=dtype)
    plan = api.plan(job, the_call)
    alternatives = api.priced(job, the_call)
except api.NickSimError as exc:
    common.fail(exc)
cols = st.columns(5)
cols[0].metric("algorithm", plan.algorithm)
cols[1].metric("protocol", plan.protocol)
cols[2].metric("channels", plan.n_channels)
cols[3].metric("threads", plan.n_threads)
cols[4].metric("estimated time", f"{plan.time_us:.1f} us")
st.write(f"Chunking: {plan.step_nbytes} bytes a step, {plan.chunk_steps} steps a chunk, {plan.slice_steps} a "
         f"slice; each channel's part:")
st.dataframe([{"channel": p.channel, "offset": p.offset, "count": p.count, "chunk_nbytes": p.chunk_nbytes}
              for p in plan.parts], hide_index=True, height=200)
st.write("Why: every algorithm x protocol NCCL prices for this call (the cheapest is kept; no time: "
         "NCCL cannot run the pair here).")
st.dataframe(alternatives.to_pandas(), hide_index=True)
