"""The NCCL_DEBUG lines NCCL prints for one job, rank by rank, from the core's results.

`init_lines(job, rank)` promises the lines ncclCommInitRank writes on `rank`, in NCCL's order, in
the wording of the job's release and with NCCL's subsystem flags for each: bootstrap interface,
the version, the network, Init START, the string settings read, affinity, NVLS support, the
communicator line, the graphs (GRAPH), NVLS heads, rings (rank 0), trees, the integer settings
read, the P2P chunk, the connections (before 2.22, or with cuMem off, when NCCL connects every ring
and tree during init), the tuning table (TUNING, rank 0), thread thresholds, channel counts, CC
(rank 0) and Init COMPLETE. `connect_lines(job, rank, algorithm)` gives the connections 2.22 and
later make at a call's first use of an algorithm (NCCL_RUNTIME_CONNECT), `call_lines` the per-call
COLL line, and `destroy_line` the last. Every line is (level, subsystem, text); logs.LogSink writes
them, and JobLogger drives a whole run.

A simulated rank has a made-up identity (host `node-NN`, a pid per rank): what it would print, not
a claim about a real process.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from ..constants import tuning_tables
from ..graph.connect import (format_channel_counts, format_channels, format_nvls_heads, nvls_heads, p2p_channels,
                             p2p_chunk_nbytes)
from ..graph.graphs import format_graph
from ..graph.transports import connection_lines, ring_links, tree_links
from ..graph.trees import dtree
from ..params import KNOBS, Params, debug_ranks, parse_nccl_int
from ..tuning.cost import format_thread_thresholds, format_tuning_table, thread_thresholds
from .logs import Identity, LogSink, debug_config

if TYPE_CHECKING:
    from ..calls import Call

__all__ = ["Line", "JobLogger", "job_logger", "search_lines", "rank_identity", "init_lines", "connect_lines", "call_lines", "destroy_line", "emit_lines",
           "comm_pointer", "runtime_connect", "setting_lines"]

Line = tuple[str, str, str]  # (level, subsystem, text)

# debug.cc reads NCCL_DEBUG* itself, without a line; NICKSIM_* are nicksim's own, TORCH_* PyTorch's.
_UNLOGGED = ("NCCL_DEBUG", "NICKSIM_", "TORCH_")

def _read_as_string(name: str) -> bool:
    """Whether NCCL reads `name` as a string (ncclGetEnv): its line has no trailing period, unlike an
    integer param's (param.cc "%s set by environment to %lld.")."""
    knob = KNOBS.get(name)
    return knob is not None and knob.kind != "int"


def runtime_connect(job) -> bool:
    """init.cc (2.22+): runtimeConn = cuMem in use && NCCL_RUNTIME_CONNECT (default 1): connections
    are made at an algorithm's first call instead of during init."""
    return job.system.rules.release.runtime_connect and job.params.get("NCCL_CUMEM_ENABLE") != 0


def rank_identity(job, rank: int) -> Identity:
    """The host, pid, thread and device a simulated rank's lines carry."""
    per_node = len(job.paths.node_system.gpus())
    node, local = divmod(rank, per_node)
    pid = 4100 + rank
    return Identity(f"node-{node:02d}", pid, pid, local)


def comm_pointer(rank: int, comm: int = 0) -> str:
    """A stable made-up ncclComm_t address for `rank`'s communicator number `comm`."""
    return f"0x55{0x5a0000 + 0x1000 * comm + rank:x}0"


def _bus_id(job, rank: int) -> str:
    per_node = len(job.paths.node_system.gpus())
    gpu = job.paths.node_system.gpu_by_rank(rank % per_node)
    busid = job.paths.node_system.nodes[gpu].gpu.busid
    digits = busid.replace(":", "").replace(".", "").lstrip("0")
    return digits or "0"


def _net_lines(job, rank: int) -> list[Line]:
    """The network the job's nodes use, as the net plugin and init.cc name it."""
    system = job.paths.node_system
    nets = [system.nodes[n].net for n in system.nets()]
    plugin = job.paths.net_plugin
    if job.nodes == 1 and not job.system.rules.release.one_node_net_lines:
        return []  # before 2.28 a one-node job never loads a network (topology without NICs)
    node = rank // len(system.gpus())
    oob = f"eth0:10.1.{node}.1<0>"
    lines: list[Line] = []
    if plugin in ("IB", "Socket") and nets:
        kind = "RoCE" if job.cluster.spec.fabric.name == "roce" else "IB"
        names = " ".join(f"[{i}]{n.name}:{n.port or 1}/{kind}" for i, n in enumerate(nets)) if plugin == "IB" \
            else " ".join(f"[{i}]eth{i}:10.{i}.{node}.1<0>" for i in range(len(nets)))
        tail = f" ; OOB {oob}" if plugin == "IB" else ""
        lines.append(("INFO", "INIT|NET", f"NET/{plugin} : Using {names}{tail}"))
    lines.append(("INFO", "INIT", f"Using network {plugin}"))
    return lines


def setting_lines(params, names: Iterable[str] | None = None) -> list[Line]:
    """`NAME set by environment to VALUE.` for every knob read from the environment or --env, or
    set there by the network plugin before NCCL read it (aws-ofi-nccl's setenv)."""
    lines = []
    for name in sorted(params.values) if names is None else names:
        source = params.sources.get(name, "")
        if name not in params.values or not (source in ("environment", "--env") or source.endswith(" plugin")):
            continue
        if name.startswith(_UNLOGGED):
            continue
        value = params.values[name]
        text = params.raw.get(name) or getattr(value, "text", None) or str(value)  # a plugin's value has no raw text
        if _read_as_string(name) or not isinstance(value, int):
            lines.append(("INFO", "ENV", f"{name} set by environment to {text}"))
        else:
            read = parse_nccl_int(params.raw[name]) if name in params.raw else None  # -2 stays -2, as printed
            lines.append(("INFO", "ENV", f"{name} set by environment to {value if read is None else read}."))
    return lines


def _socket_lines(interfaces: list[tuple[str, str]], ib_port: str | None = None) -> list[Line]:
    """A real rank's network: TCP sockets on the interfaces it found (net_socket.cc's line), or
    its IB port ("mlx5_0:1/IB") with the socket interface as its out-of-band (net_ib/init.cc)."""
    if ib_port:
        name, addr = interfaces[0]
        return [("INFO", "INIT|NET", f"NET/IB : Using [0]{ib_port} ; OOB {name}:{addr}<0>"),
                ("INFO", "INIT", "Using network IB")]
    names = " ".join(f"[{i}]{name}:{addr}<0>" for i, (name, addr) in enumerate(interfaces))
    return [("INFO", "INIT|NET", f"NET/Socket : Using {names}"), ("INFO", "INIT", "Using network Socket")]


def init_lines(job, rank: int, interfaces: list[tuple[str, str]] | None = None,
               ib_port: str | None = None) -> list[Line]:
    """What ncclCommInitRank logs on `rank` (see the module docstring). `interfaces` are a real
    rank's (name, address) pairs: its bootstrap and socket network then name them; `ib_port`
    the IB port its NET uses instead of sockets."""
    paths, graphs = job.paths, job.graphs
    version = job.system.rules.version
    release = job.system.rules.release
    per_node = len(paths.node_system.gpus())
    node, local = divmod(rank, per_node)
    nranks = job.nranks
    comm = comm_pointer(rank)
    boot = f"{interfaces[0][0]}:{interfaces[0][1]}" if interfaces else f"eth0:10.1.{node}.1"
    # bootstrap.cc: "Bootstrap : Using" under INIT to 2.22, BOOTSTRAP from 2.23, no space from 2.24
    lines: list[Line] = [("INFO", release.bootstrap_subsys, f"Bootstrap{release.bootstrap_colon} Using {boot}<0>")]
    lines.append(("VERSION", "ALL", f"NCCL version {version}"))  # JobLogger keeps it where NCCL prints it
    lines += _socket_lines(interfaces, ib_port) if interfaces else _net_lines(job, rank)
    start = _init_text(job, rank, "START")
    if start:
        lines.append(("INFO", "INIT", start))
    string_set = [n for n in sorted(job.params.values) if _read_as_string(n)]
    lines += setting_lines(job.params, string_set)
    affinity = _affinity(job, local)
    if affinity and not release.affinity_ranges:
        lines.append(("INFO", "INIT", f"Setting affinity for GPU {local} to {affinity}"))
    elif affinity:  # topo.cc 2.28: ranges, with the process's own (unpinned here: every CPU)
        ranges = _mask_ranges(affinity)
        lines.append(("INFO", "INIT", f"ncclTopoGetCpuAffinity: Affinity for GPU {local} is {ranges}. (GPU affinity "
                                      f"= {ranges} ; CPU affinity = {_mask_ranges(_all_cpus(job))})."))
    if "nvls" in graphs and graphs["nvls"].n_channels > 0:
        lines.append(("INFO", "INIT", f"NVLS multicast support is available on dev {local}"))
    mnnvl = " MNNVL 0" if release.init_mnnvl else ""
    lines.append(("INFO", "INIT", f"comm {comm} rank {rank} nRanks {nranks} nNodes {job.nodes} localRanks "
                                  f"{per_node} localRank {local}{mnnvl}"))
    for graph in graphs.values():
        lines += [("INFO", "GRAPH", text) for text in format_graph(paths, graph)]
    channels = job.channels_of(rank)
    heads = nvls_heads(graphs, job.nodes, per_node)
    lines += [("INFO", "INIT", text) for text in format_nvls_heads(heads, job.nodes, node)]
    lines += [("INFO", "INIT", text) for text in format_channels(channels, version.minor)]
    others = [n for n in sorted(job.params.values) if not _read_as_string(n)]
    lines += setting_lines(job.params, others)
    tables = tuning_tables(version)
    lines.append(("INFO", "INIT", f"P2P Chunksize set to {p2p_chunk_nbytes(paths, job.nodes, job.params)}"))
    if not runtime_connect(job):
        lines += connect_lines(job, rank, "Ring") + connect_lines(job, rank, "Tree")
    # init.cc: ncclTopoTuneModel (the TUNING table, rank 0), then the summary lines
    if rank == 0:
        lines += [("INFO", "TUNING", text) for text in format_tuning_table(job.comm.table)]
    lines.append(("INFO", "INIT", format_thread_thresholds(thread_thresholds(tables, channels.nranks, job.params))))
    p2p = p2p_channels(paths, channels.n_channels, job.nodes, job.params, rank)
    lines.append(("INFO", "INIT", format_channel_counts(version.minor, channels.n_channels, channels.nvls_channels,
                                                        p2p, job.collnet.enabled)))
    if rank == 0 and release.cc_line:  # init.cc devCommSetup; the multi-GPU CC field left in 2.24
        lines.append(("INFO", "INIT", f"{release.cc_line}, workFifoBytes {_WORK_FIFO_NBYTES}"))
    lines.append(("INFO", "INIT", _init_text(job, rank, "COMPLETE")))
    return lines


_WORK_FIFO_NBYTES = 1 << 20  # init.cc NCCL_WORK_FIFO_BYTES_DEFAULT (2.22-2.30)


def _init_text(job, rank: int, phase: str) -> str | None:
    """init.cc's Init START / COMPLETE line in the release's wording (2.18 has no START)."""
    style = job.system.rules.release.init_line_style
    per_node = len(job.paths.node_system.gpus())
    local = rank % per_node
    comm, bus = comm_pointer(rank), _bus_id(job, rank)
    if style == "2.18":
        return None if phase == "START" else (f"comm {comm} rank {rank} nranks {job.nranks} cudaDev {local} "
                                              f"busId {bus} commId {_COMM_ID} - Init COMPLETE")
    head = "comm" if style == "2.19" else "ncclCommInitRank comm"
    if style == "2.29" and phase == "START":
        head = f"[Rank {rank}] ncclCommInitRank comm"
    return (f"{head} {comm} rank {rank} nranks {job.nranks} cudaDev {local} nvmlDev {local} busId {bus} "
            f"commId {_COMM_ID} - Init {phase}")


_COMM_ID = "0x5d2e8a1f3c4b6d70"  # a made-up hash of the job's ncclUniqueId


def _mask_ranges(mask: str) -> str:
    """A hex cpumask ("ffff,00ff") as CPU ranges ("0-7,16-31")."""
    bits = int(mask.replace(",", ""), 16)
    ranges, cpu = [], 0
    while bits >> cpu:
        if bits >> cpu & 1:
            first = cpu
            while bits >> (cpu + 1) & 1:
                cpu += 1
            ranges.append(f"{first}-{cpu}" if cpu > first else str(first))
        cpu += 1
    return ",".join(ranges) or "empty"


def _all_cpus(job) -> str:
    system = job.paths.node_system
    total = 0
    for cpu in system.of_kind("CPU"):
        mask = system.nodes[cpu].cpu.affinity
        if mask:
            total |= int(mask.replace(",", ""), 16)
    return f"{total:x}"


def _affinity(job, local: int) -> str | None:
    """The CPU mask of the GPU's nearest CPU, as the topology gives it (NCCL prints it when set)."""
    system = job.paths.system  # the rank's view, whose node indices paths.path takes
    gpu = system.gpu_by_rank(local)
    best = None
    for cpu in system.of_kind("CPU"):
        path = job.paths.path(gpu, cpu)
        if path is None:
            continue
        if best is None or path.hops < best[0]:
            best = (path.hops, system.nodes[cpu].cpu.affinity)
    return best[1] if best and best[1] else None


def connect_lines(job, rank: int, algorithm: str) -> list[Line]:
    """The connection lines of `algorithm`'s channels on `rank` and NCCL's `Connected ...` line;
    algorithms whose connections nicksim does not print (NVLS, CollNet, PAT) give none."""
    paths, graphs = job.paths, job.graphs
    channels = job.channels_of(rank)
    if algorithm == "Ring":
        text = connection_lines(paths, graphs["ring"], ring_links(channels), rank, job.nodes)
        done = "Connected all rings"
        if job.system.rules.release.ring_pxn_gdr_summary:  # generic.cc: whether any ring send used PXN, all used GDR
            net = [t for t in text if " via NET/" in t]
            pxn = any("[send]" in t and "(" in t.split(" via NET/")[1].split("/GDRDMA")[0] for t in net)
            gdr = all("/GDRDMA" in t for t in net)
            done += f", use ring PXN {int(pxn)} GDR {int(gdr)}"
        return [("INFO", _subsys_of(t), t) for t in text] + [("INFO", "INIT", done)]
    if algorithm == "Tree":
        text = connection_lines(paths, graphs["tree"], tree_links(channels), rank, job.nodes)
        return [("INFO", _subsys_of(t), t) for t in text] + [("INFO", "INIT", "Connected all trees")]
    if algorithm in ("NVLS", "NVLSTree"):
        return _nvls_lines(job, rank)
    return []


def _nvls_lines(job, rank: int) -> list[Line]:
    """nvls.cc ncclNvlsBufferSetup's line and, across nodes, the NVLS tree's network connections
    (connect.cc connectNvls: head h of a node links to head h of its double-binary-tree
    neighbours, tree 0 on even channels, tree 1 on odd) and `Connected NVLS tree`."""
    per_node = len(job.paths.node_system.gpus())
    node, local = divmod(rank, per_node)
    heads = [h[0] for h in nvls_heads(job.graphs, 1, per_node)]
    if not heads:
        return []
    release = job.system.rules.release
    comm_state = job.comm
    head_rank = heads.index(local) if local in heads else -1
    buff = comm_state.nvls_chunk_nbytes * 8  # NCCL_STEPS slots of the NVLS chunk
    per_rank = comm_state.nvls_channels * 2 * buff
    ranks = f" nvlsRanks {per_node}" if release.nvls_ranks_in_buffer_line else ""
    lines: list[Line] = [("INFO", "INIT|NVLS", f"NVLS comm {comm_pointer(rank)} headRank {head_rank} nHeads "
                                               f"{len(heads)}{ranks} buffSize {buff} nvlsPerRankSize {per_rank} "
                                               f"nvlsTotalSize {per_rank * len(heads)}")]
    if job.nodes == 1 or head_rank < 0:
        return lines
    double = dtree(job.nodes, node)
    links = {}
    for c in range(comm_state.nvls_channels):
        tree = double.tree0 if c % 2 == 0 else double.tree1
        peers = {n * per_node + local for n in (tree.up, tree.down0, tree.down1) if n >= 0}
        links[c] = (peers, peers)
    text = connection_lines(job.paths, job.graphs["nvls"], links, rank, job.nodes)
    return lines + [("INFO", _subsys_of(t), t) for t in text] + [("INFO", "INIT", "Connected NVLS tree")]


def _subsys_of(connection: str) -> str:
    """The flags of a transport's connection line (p2p.cc, shm.cc, net.cc)."""
    if " via NET/" in connection:
        return "INIT|NET"
    return "INIT|SHM" if " via SHM/" in connection else "INIT|P2P"


_BUFFERS = 0x7f3a40000000  # made-up device addresses: send buffer, receive buffer a GiB above


def call_lines(call: Call, op_count: int, rank: int, in_place: bool = False, comm: int = 0) -> list[Line]:
    """enqueue.cc's per-call line (INFO, COLL): `AllReduce: opCount 0 sendbuff ... count ... datatype
    ... op ... root ... comm ... [nranks=N] stream ...`; alltoall and sendrecv are the Send and Recv
    calls nccl-tests groups, one pair per peer."""
    from ..calls import DTYPES, REDOPS  # the call's numbers as NCCL logs them
    send = _BUFFERS + (rank << 36)
    recv = send if in_place else send + (1 << 30)
    dtype = list(DTYPES).index(call.dtype)
    op = REDOPS.index(call.redop) if call.redop in REDOPS else 0
    stream = f"0x55{0x7b0000 + rank:x}0"
    tail = f"comm {comm_pointer(rank, comm)} [nranks={call.nranks}] stream {stream}"
    if call.info.p2p:
        if call.collective == "sendrecv":
            peers = [((rank + 1) % call.nranks, (rank - 1) % call.nranks)]
        else:
            peers = [(p, p) for p in range(call.nranks)]
        out = []
        for to, frm in peers:
            # collectives.cc ncclSend: the user's buffer travels in the recvbuff field
            out.append(("INFO", "COLL", f"Send: opCount {op_count:x} sendbuff (nil) recvbuff 0x{send:x} count "
                                        f"{call.count} datatype {dtype} op 0 root {to} {tail}"))
            out.append(("INFO", "COLL", f"Recv: opCount {op_count:x} sendbuff (nil) recvbuff 0x{recv:x} count "
                                        f"{call.count} datatype {dtype} op 0 root {frm} {tail}"))
        return out
    root = call.root if call.root >= 0 else 0
    return [("INFO", "COLL", f"{call.func}: opCount {op_count:x} sendbuff 0x{send:x} recvbuff 0x{recv:x} count "
                             f"{call.count} datatype {dtype} op {op} root {root} {tail}")]


def destroy_line(job, rank: int) -> Line:
    """init.cc commFree's last line (under the DESTROY flag from 2.30, which NCCL does not log by default)."""
    per_node = len(job.paths.node_system.gpus())
    subsys = job.system.rules.release.destroy_subsys
    return ("INFO", subsys, f"comm {comm_pointer(rank)} rank {rank} nranks {job.nranks} cudaDev {rank % per_node} "
                            f"busId {_bus_id(job, rank)} - Destroy COMPLETE")


def emit_lines(sink: LogSink, who: Identity, lines: Iterable[Line]) -> None:
    for level, subsys, text in lines:
        sink.emit(who, level, subsys, text)


class JobLogger:
    """One job's NCCL_DEBUG output over a run: init on every logged rank, then each call's lines on
    each logged rank, with 2.22+'s runtime connections before an algorithm's first call, and the
    communicator's destruction. Logged ranks are `ranks` (all by default); `warnings` are what
    reading the NCCL_DEBUG settings said."""

    def __init__(self, job, sink: LogSink, ranks: Iterable[int] | None = None,
                 who: dict[int, Identity] | None = None, warnings: tuple[str, ...] = ()):
        self.job, self.sink, self.warnings = job, sink, tuple(warnings)
        self.ranks = tuple(range(job.nranks) if ranks is None else (r for r in ranks if 0 <= r < job.nranks))
        self.op_count = 0
        self.connected: set[str] = set()
        # a real process names itself; a simulated rank gets rank_identity's made-up name
        self.who = {rank: (who or {}).get(rank) or rank_identity(job, rank) for rank in self.ranks}
        self.simulated = who is None

    @property
    def active(self) -> bool:
        return self.sink.config.enabled and bool(self.ranks)

    def init(self, interfaces: list[tuple[str, str]] | None = None, ib_port: str | None = None) -> None:
        if not self.active:
            return
        for rank in self.ranks:
            lines = init_lines(self.job, rank, interfaces, ib_port)
            emit_lines(self.sink, self.who[rank], [line for line in lines
                                                   if line[0] != "VERSION" or self._prints_version(rank)])

    def _prints_version(self, rank: int) -> bool:
        """init.cc showVersion: every rank at INFO from 2.22 (as an INFO line), else rank 0 (bare)."""
        return rank == 0 or self.sink.config.info_version

    def call(self, call: Call, algorithm: str | None, in_place: bool = False, decision: str | None = None) -> None:
        """One call on every logged rank: its COLL line, rank 0's TUNING decision line (`decision`),
        and, the first time an algorithm runs on 2.22+, its connections."""
        if not self.active:
            self.op_count += 1
            return
        for rank in self.ranks:
            emit_lines(self.sink, self.who[rank], call_lines(call, self.op_count, rank, in_place))
            if decision and rank == 0:
                self.sink.emit(self.who[rank], "INFO", "TUNING", decision)
        if runtime_connect(self.job) and algorithm and algorithm not in self.connected:
            self.connected.add(algorithm)
            for rank in self.ranks:
                # a simulated rank connects from NCCL's proxy thread; a real one from its own
                thread = self.who[rank].on_thread(self.who[rank].pid + 40) if self.simulated else self.who[rank]
                emit_lines(self.sink, thread, connect_lines(self.job, rank, algorithm))
        self.op_count += 1

    def destroy(self) -> None:
        if not self.active:
            return
        for rank in self.ranks:
            emit_lines(self.sink, self.who[rank], [destroy_line(self.job, rank)])


def job_logger(job, params: Params) -> JobLogger:
    """The NCCL_DEBUG output of a simulated job: the ranks NICKSIM_DEBUG_RANKS names (all by
    default), with the warnings reading NCCL_DEBUG* gave in `warnings`."""
    config = debug_config(params, job.system.rules.version.minor)
    return JobLogger(job, LogSink(config), debug_ranks(params, job.nranks), warnings=tuple(config.warnings))


def search_lines(job, print_tuning: bool = False) -> tuple[list[str], list[str]]:
    """(notes, lines) of `nicksim search`: NCCL's graph search lines for the job's rank
    (ncclTopoPrintGraph per graph), then what that rank prints at init as NCCL orders it: NVLS
    heads, rings and trees, the TUNING table (rank 0, where asked or NCCL_DEBUG_SUBSYS has
    TUNING), the P2P chunk, thread thresholds, channel counts and every ring and tree connection
    as NCCL sets them up eagerly. A note that applies to every graph is said once."""
    paths, graphs, spec = job.paths, job.graphs, job.spec
    notes = list(dict.fromkeys(note for graph in graphs.values() for note in graph.notes))
    lines = [text for graph in graphs.values() for text in format_graph(paths, graph)]
    if len(paths.system.gpus()) != len(paths.node_system.gpus()):
        notes.append(f"rank {spec.rank} sees {len(paths.system.gpus())} of the node's {len(paths.node_system.gpus())} "
                     "GPUs (NCCL splits the node into domains); channels across such domains are not modelled yet")
        return notes, lines
    channels, per_node = job.channels, len(paths.node_system.gpus())
    heads = nvls_heads(graphs, spec.nodes, per_node)
    lines += format_nvls_heads(heads, spec.nodes, spec.rank // per_node)
    lines += format_channels(channels, paths.system.rules.version.minor)
    tables = tuning_tables(paths.system.rules.version)
    subsystems = debug_config(job.params, tables.version.minor).subsystems  # NCCL_DEBUG_SUBSYS, as debug.cc reads it
    if (print_tuning or "TUNING" in subsystems) and spec.rank == 0:
        lines += format_tuning_table(job.comm.table)
    lines.append(f"P2P Chunksize set to {p2p_chunk_nbytes(paths, spec.nodes, job.params)}")
    lines.append(format_thread_thresholds(thread_thresholds(tables, channels.nranks, job.params)))
    p2p = p2p_channels(paths, channels.n_channels, spec.nodes, job.params, spec.rank)
    lines.append(format_channel_counts(tables.version.minor, channels.n_channels, channels.nvls_channels, p2p,
                                       job.collnet.enabled))
    # Connections as NCCL sets them up eagerly (NCCL_RUNTIME_CONNECT=0): rings, then trees.
    lines += (connection_lines(paths, graphs["ring"], ring_links(channels), spec.rank, spec.nodes)
              + ["Connected all rings"]
              + connection_lines(paths, graphs["tree"], tree_links(channels), spec.rank, spec.nodes)
              + ["Connected all trees"])
    return notes, lines
