"""Pictures of what studies/views.py computes, as matplotlib Figures (the Agg backend: no screen).

Each function takes the values a view returns and draws them, nothing else: the dashboard shows
these figures, a notebook can show or save the same ones. Link kinds keep one colour everywhere
(LINK_COLOURS).
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402  (after the backend is chosen)
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from .views import Drawing, Heads, PathMatrix, WaitEdge  # noqa: E402

__all__ = ["LINK_COLOURS", "draw_graph", "draw_path_matrix", "draw_rings", "draw_heads", "draw_curves",
           "draw_timeline", "draw_waits", "draw_calibration", "draw_perf", "draw_sweep"]

# One colour per link kind (NCCL's names), used by every picture.
LINK_COLOURS = {"NVL": "#2ca02c", "C2C": "#9467bd", "PCI": "#1f77b4", "SYS": "#d62728", "NET": "#ff7f0e",
                "LOC": "#7f7f7f"}
_KIND_COLOURS = {"GPU": "#76b900", "NVS": "#2ca02c", "PCI": "#aec7e8", "CPU": "#c5b0d5", "NIC": "#ffbb78",
                 "NET": "#ff7f0e", "leaf": "#c7c7c7", "spine": "#8c8c8c", "node": "#76b900"}
_PATH_ORDER = ("X", "LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS", "-")


def _figure(width: float, height: float) -> tuple[Figure, object]:
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return fig, fig.add_subplot()


def draw_graph(drawing: Drawing, labels: bool = True) -> Figure:
    """Vertices coloured by kind, edges by link kind, each edge labelled with its GB/s where known."""
    xs = [v.x for v in drawing.vertices] or [0.0]
    ys = [v.y for v in drawing.vertices] or [0.0]
    many = len(drawing.vertices) > 60
    fig, ax = _figure(min(12.0, 3 + 0.6 * (max(xs) - min(xs) + 1)), min(8.0, 1.5 + 1.0 * (max(ys) - min(ys) + 1)))
    at = {v.name: (v.x, v.y) for v in drawing.vertices}
    drawing_nics = sum(v.kind == "NIC" for v in drawing.vertices)
    drawn_kinds = set()
    for e in drawing.edges:
        (x0, y0), (x1, y1) = at[e.a], at[e.b]
        colour = LINK_COLOURS.get(e.kind, "#333333")
        ax.plot([x0, x1], [y0, y1], color=colour, linewidth=1.0 if many else 1.6, alpha=0.7, zorder=1,
                label=e.kind if e.kind not in drawn_kinds else None)
        drawn_kinds.add(e.kind)
        if labels and e.bw_gbps > 0 and not many:
            ax.text((x0 + x1) / 2, (y0 + y1) / 2, f"{e.bw_gbps:g}", fontsize=7, color=colour, ha="center",
                    va="center", bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8})
    for v in drawing.vertices:
        ax.scatter([v.x], [v.y], s=120 if many else 500, color=_KIND_COLOURS.get(v.kind, "#dddddd"),
                   edgecolors="black", linewidths=0.6, zorder=2, marker="s" if v.kind in ("GPU", "node") else "o")
        if not many or v.kind in ("GPU", "NVS", "spine"):
            crowded = v.kind == "NIC" and drawing_nics > 16
            ax.text(v.x, v.y - (0.12 if crowded else 0), v.name.replace("/", "\n", 1), fontsize=5 if crowded else 7,
                    ha="center", va="top" if crowded else "center", rotation=90 if crowded else 0, zorder=3)
    if drawn_kinds:
        ax.legend(title="link (GB/s)", loc="upper right", fontsize=8)
    ax.set_title(drawing.title, fontsize=10)
    ax.set_axis_off()
    ax.margins(0.08)
    return fig


def draw_path_matrix(matrix: PathMatrix) -> Figure:
    """The path types as a heatmap (closer is greener), each cell labelled with type and GB/s."""
    n = len(matrix.rows)
    fig, ax = _figure(2 + 0.6 * len(matrix.cols), 1.5 + 0.45 * n)
    codes = [[_PATH_ORDER.index(t) if t in _PATH_ORDER else len(_PATH_ORDER) for t in row] for row in matrix.types]
    ax.imshow(codes, cmap="RdYlGn_r", vmin=0, vmax=len(_PATH_ORDER), aspect="auto")
    small = n > 24
    if not small:
        for i, row in enumerate(matrix.types):
            for j, t in enumerate(row):
                bw = matrix.bw_gbps[i][j]
                ax.text(j, i, t if t == "X" else f"{t}\n{bw:g}", ha="center", va="center", fontsize=6)
    ax.set_xticks(range(len(matrix.cols)), matrix.cols, rotation=90, fontsize=7)
    ax.set_yticks(range(n), matrix.rows, fontsize=7)
    ax.set_title("path type and bottleneck GB/s, row to column", fontsize=10)
    return fig


def _circle(count: int) -> list[tuple[float, float]]:
    return [(math.sin(2 * math.pi * k / count), math.cos(2 * math.pi * k / count)) for k in range(count)]


def _circle_axes(ax, title: str, reach: float, fontsize: int) -> None:
    """Square axes around a unit circle of ranks, with room for labels out to `reach`."""
    ax.set_title(title, fontsize=fontsize)
    ax.set_xlim(-reach, reach)
    ax.set_ylim(-reach, reach)
    ax.set_aspect("equal")
    ax.set_axis_off()


def draw_rings(orders: Sequence[Sequence[int]], per_node: int, nodes: int = 1, max_channels: int = 16) -> Figure:
    """One small picture per channel: the node's GPUs on a circle, arrows in the ring's order; where
    the ring leaves the node (several nodes) the last GPU's arrow goes out, marked NET."""
    shown = list(orders)[:max_channels]
    cols = min(4, max(1, len(shown)))
    rows = max(1, math.ceil(len(shown) / cols))
    fig = Figure(figsize=(3.0 * cols, 3.0 * rows), dpi=100, layout="constrained")
    spots = _circle(per_node)
    for c, order in enumerate(shown):
        ax = fig.add_subplot(rows, cols, c + 1)
        for r, (x, y) in enumerate(spots):
            ax.scatter([x], [y], s=260, color=_KIND_COLOURS["GPU"], edgecolors="black", linewidths=0.5, zorder=2)
            ax.text(x, y, str(r), ha="center", va="center", fontsize=7, zorder=3)
        hops = list(zip(order, order[1:])) + ([(order[-1], order[0])] if nodes == 1 and len(order) > 1 else [])
        for a, b in hops:
            (x0, y0), (x1, y1) = spots[a], spots[b]
            ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                        arrowprops={"arrowstyle": "->", "color": LINK_COLOURS["NVL"], "shrinkA": 8, "shrinkB": 8})
        if nodes > 1 and order:
            for r, label, colour in ((order[0], "in", "#1f77b4"), (order[-1], "out", LINK_COLOURS["NET"])):
                x, y = spots[r]
                ax.annotate(f"NET {label}", xy=(x, y), xytext=(x * 1.55, y * 1.55), fontsize=6, color=colour,
                            arrowprops={"arrowstyle": "-", "color": colour})
        _circle_axes(ax, f"channel {c}", 1.8, 8)
    return fig


def draw_heads(found: Heads) -> Figure:
    """The node's GPUs on a circle, NVLS heads and CollNet heads marked with their order."""
    fig, ax = _figure(4.5, 4.5)
    spots = _circle(found.per_node)
    for r, (x, y) in enumerate(spots):
        nvls = r in found.nvls
        collnet = r in found.collnet
        colour = "#d62728" if collnet else "#ff7f0e" if nvls else _KIND_COLOURS["GPU"]
        ax.scatter([x], [y], s=300, color=colour, edgecolors="black", linewidths=0.5)
        ax.text(x, y, str(r), ha="center", va="center", fontsize=7)
        tags = ([f"NVLS head {found.nvls.index(r)}"] if nvls else []) + \
            ([f"CollNet head {found.collnet.index(r)}"] if collnet else [])
        if tags and found.per_node <= 16:
            ax.text(x * 1.45, y * 1.45, "\n".join(tags), ha="center", va="center", fontsize=6)
    what = [f"{len(found.nvls)} NVLS head(s)" if found.nvls else "no NVLS",
            f"{len(found.collnet)} CollNet head(s)" if found.collnet else "no CollNet"]
    _circle_axes(ax, ", ".join(what), 1.9, 9)
    return fig


def _size_label(nbytes: float) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):g}{unit}"
    return f"{nbytes:g}"


def _size_axis(ax, sizes: Sequence[float]) -> None:
    ax.set_xscale("log", base=2)
    if sizes:
        ticks = sorted(set(sizes))[:: max(1, len(set(sizes)) // 10)]
        ax.set_xticks(ticks, [_size_label(s) for s in ticks], fontsize=7)
    ax.set_xlabel("size (bytes)")


def draw_curves(curves: Sequence[Mapping], runs: Mapping[str, Sequence[Mapping]] = {},
                measured: Sequence[Mapping] = (), value: str = "busbw_gbps") -> Figure:
    """NCCL's time model per algorithm x protocol over sizes (thin), its choice marked (dots), the
    engines' runs (thick) and the measured rows (black crosses); `value` busbw_gbps or time_us."""
    fig, ax = _figure(9, 4.8)
    pairs: dict[tuple[str, str], list] = {}
    for row in curves:
        pairs.setdefault((row["algorithm"], row["protocol"]), []).append(row)
    for (algorithm, protocol), rows in pairs.items():
        ax.plot([r["nbytes"] for r in rows], [r[value] for r in rows], linewidth=0.9, alpha=0.6,
                label=f"{algorithm}/{protocol}")
    chosen = [r for r in curves if r["chosen"]]
    if chosen:
        ax.scatter([r["nbytes"] for r in chosen], [r[value] for r in chosen], s=18, color="black", zorder=3,
                   label="NCCL's choice")
    for name, rows in runs.items():
        ax.plot([r["nbytes"] for r in rows], [r[value] for r in rows], linewidth=2.4, marker="o", markersize=3,
                label=f"engine {name}")
    if measured:
        have = [r for r in measured if r.get(value) is not None]
        ax.scatter([r["nbytes"] for r in have], [r[value] for r in have], marker="x", s=40, color="black",
                   zorder=4, label="measured")
    sizes = [r["nbytes"] for r in curves] + [r["nbytes"] for rows in runs.values() for r in rows]
    _size_axis(ax, sizes)
    if value == "time_us":
        ax.set_yscale("log")
    ax.set_ylabel("bus bandwidth (GB/s)" if value == "busbw_gbps" else "time (us)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return fig


def draw_timeline(rows: Sequence[Mapping], blocked_ranks: Sequence[int] = (), title: str = "",
                  max_lanes: int = 64) -> Figure:
    """A lane per rank, channel and stream (the first `max_lanes`); a bar per primitive; the lanes
    of blocked ranks red."""
    order = {(r["rank"], r["lane"]): (r["rank"], r.get("channel", -1), r["lane"]) for r in rows}
    every = sorted(order, key=order.get)  # by rank, then channel as a number
    lanes: list[tuple[int, str]] = every[:max_lanes]
    index = {lane: k for k, lane in enumerate(lanes)}
    rows = [r for r in rows if (r["rank"], r["lane"]) in index]
    if len(every) > len(lanes):
        title = f"{title or 'per-rank timeline'} (first {len(lanes)} of {len(every)} lanes)"
    fig, ax = _figure(10, min(1.5 + 0.16 * max(len(lanes), 4), 12.0))
    blocked = set(blocked_ranks)
    ops = sorted({r["op"] for r in rows})
    palette = matplotlib.colormaps["tab10"]
    colour = {op: palette(k % 10) for k, op in enumerate(ops)}
    for row in rows:
        y = index[(row["rank"], row["lane"])]
        ax.barh(y, row["dur_us"], left=row["start_us"], height=0.8, color=colour[row["op"]],
                edgecolor="#d62728" if row["rank"] in blocked else "none")
    if lanes:
        step = max(1, len(lanes) // 40)
        ax.set_yticks(range(0, len(lanes), step),
                      [f"rank {r} {lane}" for r, lane in lanes[::step]], fontsize=6)
        for k, (r, _) in enumerate(lanes):
            if r in blocked:
                ax.axhspan(k - 0.5, k + 0.5, color="#d62728", alpha=0.08)
    ax.invert_yaxis()
    ax.set_xlabel("time (us)")
    handles = [Patch(color=colour[op], label=op) for op in ops[:12]]
    if blocked:
        handles.append(Patch(color="#d62728", alpha=0.3, label="blocked rank"))
    if handles:
        ax.legend(handles=handles, fontsize=7, loc="lower right")
    ax.set_title(title or "per-rank timeline", fontsize=10)
    return fig


def draw_waits(edges: Sequence[WaitEdge], nranks: int | None = None, culprits: Sequence[int] = ()) -> Figure:
    """The ranks on a circle (`nranks`, else as many as the edges and culprits name), an arrow from
    each waiting rank to the rank it waits on; culprits red."""
    if nranks is None:
        nranks = 1 + max([e.waiter for e in edges] + [e.waited for e in edges] + list(culprits) + [0])
    fig, ax = _figure(5, 5)
    spots = _circle(max(nranks, 1))
    bad = set(culprits)
    for r, (x, y) in enumerate(spots):
        ax.scatter([x], [y], s=360, color="#d62728" if r in bad else "#c7c7c7", edgecolors="black",
                   linewidths=0.5, zorder=2)
        ax.text(x, y, str(r), ha="center", va="center", fontsize=8, zorder=3)
    for e in edges:
        if e.waiter < len(spots) and e.waited < len(spots):
            (x0, y0), (x1, y1) = spots[e.waiter], spots[e.waited]
            ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                        arrowprops={"arrowstyle": "->", "color": "#444444", "shrinkA": 10, "shrinkB": 10})
    _circle_axes(ax, "waits for (arrow: waiting rank -> the rank it waits on)", 1.4, 9)
    return fig


def draw_calibration(points: Mapping[str, Sequence[Mapping]], title: str = "") -> Figure:
    """Measured and predicted bus bandwidth over sizes, one line per series ("measured", "before",
    "after", ...): records with nbytes and busbw_gbps. Series named "measured ..." are points, not
    lines (black where there is one)."""
    fig, ax = _figure(8, 4.2)
    for name, rows in points.items():
        style = {"marker": "x", "linestyle": "none", "markersize": 7} if name.startswith("measured") \
            else {"marker": "o", "markersize": 3}
        if name == "measured":
            style["color"] = "black"
        ax.plot([r["nbytes"] for r in rows], [r["busbw_gbps"] for r in rows], label=name, **style)
    _size_axis(ax, [r["nbytes"] for rows in points.values() for r in rows])
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    return fig


# One marker per algorithm/protocol pair, given out in the order the pairs first appear in a picture.
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h", "*", "p")


def _pair(row: Mapping) -> str:
    algorithm, protocol = row.get("algorithm"), row.get("protocol")
    return f"{algorithm}/{protocol}" if algorithm and protocol else str(algorithm or protocol or "?")


def _marked(ax, rows: Sequence[Mapping], value: str, colour, label: str | None, markers: dict[str, str]) -> None:
    """A line through `rows` (nbytes, `value`) in `colour`, each point marked by its algorithm/protocol."""
    have = [r for r in rows if r.get(value) is not None]
    ax.plot([r["nbytes"] for r in have], [r[value] for r in have], color=colour, linewidth=1.6, label=label, zorder=2)
    for pair in dict.fromkeys(_pair(r) for r in have):
        marker = markers.setdefault(pair, _MARKERS[len(markers) % len(_MARKERS)])
        points = [r for r in have if _pair(r) == pair]
        ax.scatter([r["nbytes"] for r in points], [r[value] for r in points], marker=marker, s=34, color=colour,
                   edgecolors="black", linewidths=0.5, zorder=3)


def _legends(fig, handles: list, markers: dict[str, str], title: str) -> None:
    """The series' colours (under `title`), then the algorithm/protocol markers, right of the axes."""
    if handles:
        fig.legend(handles=handles, loc="outside right upper", fontsize=7, title=title, title_fontsize=8)
    if markers:
        fig.legend(handles=[Line2D([], [], marker=m, linestyle="none", color="#bbbbbb", markeredgecolor="black",
                                   markersize=6, label=pair) for pair, m in markers.items()],
                   loc="outside right lower", fontsize=7, title="algorithm/protocol", title_fontsize=8)


def _colours(count: int) -> list:
    palette = matplotlib.colormaps["tab10" if count <= 10 else "tab20"]
    return [palette(k % palette.N) for k in range(count)]


def draw_perf(runs: Mapping[str, Sequence[Mapping]], measured: Sequence[Mapping] = (), title: str = "") -> Figure:
    """Bus bandwidth (above) and time (below, log scale) over sizes on a log2 axis: a line per
    engine's run (records with nbytes, busbw_gbps, time_us, algorithm, protocol), each point
    marked by the algorithm/protocol it ran; measured records as black crosses."""
    fig = Figure(figsize=(10, 7), dpi=100, layout="constrained")
    bw, time = fig.subplots(2, 1, sharex=True)
    markers: dict[str, str] = {}
    handles = []
    for colour, (name, rows) in zip(_colours(len(runs)), runs.items()):
        _marked(bw, rows, "busbw_gbps", colour, None, markers)
        _marked(time, rows, "time_us", colour, None, markers)
        handles.append(Line2D([], [], color=colour, linewidth=1.6, label=f"engine {name}"))
    if measured:
        for ax, value in ((bw, "busbw_gbps"), (time, "time_us")):
            have = [r for r in measured if r.get(value) is not None]
            ax.scatter([r["nbytes"] for r in have], [r[value] for r in have], marker="x", s=40, color="black",
                       zorder=4)
        handles.append(Line2D([], [], marker="x", linestyle="none", color="black", label="measured"))
    sizes = [r["nbytes"] for rows in runs.values() for r in rows] + [r["nbytes"] for r in measured]
    _size_axis(time, sizes)
    time.set_yscale("log")
    bw.set_ylabel("bus bandwidth (GB/s)")
    time.set_ylabel("time (us)")
    for ax in (bw, time):
        ax.grid(True, alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    _legends(fig, handles, markers, "run")
    return fig


def draw_sweep(series: Mapping[str, Sequence[Mapping]], title: str = "", value: str = "busbw_gbps") -> Figure:
    """A sweep's series (studies.views.sweep_series) over sizes on a log2 axis: a line per series,
    each point marked by the algorithm/protocol it ran; where every series has one and the same
    size, a bar per series instead, labelled with its algorithm/protocol. `value` busbw_gbps or
    time_us."""
    what = "bus bandwidth (GB/s)" if value == "busbw_gbps" else "time (us)"
    sizes = {r["nbytes"] for rows in series.values() for r in rows}
    colours = _colours(len(series))
    if len(sizes) == 1:
        fig, ax = _figure(9, 1.5 + 0.35 * max(len(series), 2))
        names = list(series)
        values = [series[name][0].get(value) or 0.0 for name in names]
        ax.barh(range(len(names)), values, color=colours)
        for k, name in enumerate(names):
            ax.text(values[k], k, f" {values[k]:.1f} {_pair(series[name][0])}", va="center", fontsize=7)
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(f"{what} at {_size_label(next(iter(sizes)))}B")
        ax.margins(x=0.25)
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_title(title, fontsize=10)
        return fig
    fig, ax = _figure(10, 5)
    markers: dict[str, str] = {}
    handles = []
    for colour, (name, rows) in zip(colours, series.items()):
        _marked(ax, rows, value, colour, None, markers)
        handles.append(Line2D([], [], color=colour, linewidth=1.6, label=name))
    _size_axis(ax, sorted(sizes))
    if value == "time_us":
        ax.set_yscale("log")
    ax.set_ylabel(what)
    ax.grid(True, alpha=0.3)
    ax.set_title(title, fontsize=10)
    _legends(fig, handles, markers, "grid point")
    return fig
