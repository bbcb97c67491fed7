"""What every page shares: the system chosen in the sidebar, the job it makes (cached per input),
uploads saved where the API can read them, and one error line on the page for bad input.

Nothing here computes a number: the job and everything drawn come from nicksim.api.
"""
from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import streamlit as st

from nicksim import api

__all__ = ["page_job", "fail", "saved", "saved_text", "remembered", "show", "parse_size", "size_label", "UPLOAD"]

UPLOAD = "upload an NCCL topology XML"
_UPLOADS = Path(tempfile.gettempdir()) / "nicksim-dashboard"
_FABRIC_DEFAULT = "the system's own"


def fail(exc: api.NickSimError) -> None:
    """One line on the page, as the command line prints it, and the page stops there."""
    st.error(exc.line())
    st.stop()


def saved(name: str, data: bytes) -> Path:
    """An upload written to a folder of its own (by content), under its own file name, so that
    what the API says of it names the file the user gave."""
    folder = _UPLOADS / hashlib.sha256(data).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (Path(name).name or "upload")
    if not path.exists():
        path.write_bytes(data)
    return path


def saved_text(name: str, text: str) -> Path:
    return saved(name, text.encode("utf-8"))


def remembered(kind: str, key, compute, keep: int = 16):
    """`compute()`'s result for `key`, kept in this browser session (the last `keep` of each kind):
    for long work that draws its own progress bar, which st.cache_data cannot replay."""
    store = st.session_state.setdefault(f"_remembered_{kind}", {})
    if key in store:
        store[key] = store.pop(key)  # most recently used last
        return store[key]
    value = compute()
    store[key] = value
    while len(store) > keep:
        store.pop(next(iter(store)))
    return value


def show(figure) -> None:
    st.pyplot(figure, clear_figure=True)


def parse_size(text: str, where: str) -> int:
    """A size as nccl-tests' -b/-e take it ("64M"); bad text stops the page with one line."""
    try:
        return api.parse_size(text.strip(), where)
    except api.NickSimError as exc:
        fail(exc)


def size_label(nbytes: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift}{unit}"
    return str(nbytes)


@st.cache_resource(max_entries=24, show_spinner="NCCL's topology, paths and graph search")
def _job(system: str, gpu: str | None, nodes: int, nics_per_node: int | None, nic_gbps: float | None,
         fabric: str | None, oversubscription: float, hosts_per_leaf: int, nccl_version: str,
         env: tuple[str, ...]) -> api.Job:
    job = api.load(system, nodes=nodes, gpu=gpu, nics_per_node=nics_per_node, nic_gbps=nic_gbps, fabric=fabric,
                   oversubscription=oversubscription, hosts_per_leaf=hosts_per_leaf, nccl_version=nccl_version,
                   env=list(env))
    job.graphs, job.channels, job.comm  # searched once, here, where the spinner shows
    return job


# The sidebar's widgets by key, with their starting values. Every page draws the sidebar; the
# values live in session state under these keys, so they carry from page to page.
_SIDEBAR = {"system": api.DEFAULT_SYSTEM, "gpu": "(from the file)", "nodes": 1, "nics": 0, "nic_gbps": 0.0,
            "fabric": _FABRIC_DEFAULT, "oversubscription": 1.0, "hosts_per_leaf": 32,
            "nccl": api.DEFAULT_NCCL_VERSION, "env": ""}


def _keep_sidebar_values() -> None:
    """Streamlit forgets a widget's value on a page that does not draw it; writing each value back
    before the widgets are drawn keeps it (and gives each its starting value once)."""
    for key, start in _SIDEBAR.items():
        st.session_state[key] = st.session_state.get(key, start)


def _sidebar() -> api.Job:
    _keep_sidebar_values()
    bar = st.sidebar
    bar.header("System")
    choice = bar.selectbox("system", list(api.SYSTEMS) + [UPLOAD], key="system")
    gpu = None
    if choice == UPLOAD:
        upload = bar.file_uploader("topology XML (NCCL_TOPO_FILE or a vendor's partial file)", type=["xml"],
                                   key="topology_file")
        if upload is None:
            st.info("Upload a topology XML in the sidebar, or pick a catalog system.")
            st.stop()
        system = str(saved(upload.name, upload.getvalue()))
        model = bar.selectbox("GPU model for GPUs the file leaves out (--gpu)", ["(from the file)"] + list(api.GPU_MODELS),
                              key="gpu")
        gpu = None if model == "(from the file)" else model
    else:
        system = choice
    nodes = bar.number_input("nodes", min_value=1, max_value=4096, step=1, key="nodes")
    nics = bar.number_input("NICs per node (0: the system's)", min_value=0, max_value=64, step=1, key="nics")
    nic_gbps = bar.number_input("NIC speed, Gb/s (0: the system's)", min_value=0.0, max_value=3200.0, step=100.0,
                                key="nic_gbps")
    fabric = bar.selectbox("fabric", [_FABRIC_DEFAULT] + list(api.FABRICS), key="fabric")
    over = bar.number_input("spine oversubscription (x:1)", min_value=1.0, max_value=16.0, step=0.5,
                            key="oversubscription")
    per_leaf = bar.number_input("hosts per leaf", min_value=1, max_value=512, step=1, key="hosts_per_leaf")
    version = bar.selectbox("NCCL release", list(api.NCCL_VERSIONS), key="nccl")
    env_text = bar.text_area("knobs (NCCL_*=VALUE, one a line)", key="env",
                             help="as NCCL reads them, e.g. NCCL_ALGO=Ring or NCCL_MIN_NCHANNELS=8")
    env = tuple(line.strip() for line in env_text.splitlines() if line.strip() and not line.strip().startswith("#"))
    try:
        job = _job(system, gpu, int(nodes), int(nics) or None, float(nic_gbps) or None,
                   None if fabric == _FABRIC_DEFAULT else fabric, float(over), int(per_leaf), version, env)
    except api.NickSimError as exc:
        fail(exc)
    for warning in job.params.warnings:  # what NCCL would warn of and ignore
        st.warning(warning)
    return job


def page_job() -> api.Job:
    """The job the sidebar describes: every page draws the same sidebar, whose values carry from
    page to page."""
    return _sidebar()
