"""The DES engine's parameters: what a CTA, a step and the NVLink switch cost, per hardware generation.

`des_params(tables, sm)` promises the defaults for a GPU of compute capability `sm` under the NCCL
release whose tables are given, every one taken from a number NCCL itself states (tuning.cc of
that release unless said otherwise), so that the DES and NCCL's formula start from the same
hardware facts and differ only where the fabric makes them differ:

- `cta_bw_gbps`: what one channel's CTA moves per second: the top of the search's intra-node speed
  ladder (search.cc speedArrayIntra[0]), the most NCCL ever expects of one channel (40 GB/s before
  Hopper, 60 on Hopper, 90 on Blackwell from 2.25; the same in every release that has the ladder);
- `step_lat_us(hw, algorithm, protocol)`: the latency of one step over one hop, hwLat (NVLink, PCI,
  NET rows), NCCL's "per step" term of its time model (a ring's or tree's hops within a node pay it
  as one chain per call, engine.py chain_us; docs/des.md, "The hop chain");
- `launch_us(algorithm, protocol)`: kernel launch and the call's fixed cost, baseLat (the Ring row
  where an algorithm's own is zero: NCCL folds NVLS and CollNet start-up into hwLat instead);
- `nvls_efficiency`: the share of an NVLink port that NVSwitch multicast and in-switch reduction
  traffic gets (nvlsEfficiency, 2.28.9-2.30.7: Hopper 0.85, Blackwell 0.74: a property of the
  switch generation, so it applies to every release);
- `net_overhead_us`: what a rank's proxy thread spends on each network step, shared by all the
  rank's channels: the sender's posting it, the receiver's taking it (tuning.cc getNetOverhead,
  "network post overhead": NCCL_NET_OVERHEAD, else 2 us on AMD x86 hosts and 1 us elsewhere).
  NCCL's formula charges it once per step (3x for Simple), as latency; the DES charges it at both
  ends of every step and lets the pipeline show what it costs;
- `net_latency_us`: the network plugin's own latency (ncclNetProperties.latency: 0 from NCCL's IB and
  socket transports, 75 us from aws-ofi-nccl on EFA), which NCCL adds to every network step of its
  model (graph latencyInter, twice for Simple: the send and the flush after the receive); the DES
  adds it to each network step the same way;
- `net_step_us`: what each network step costs its connection, whatever its size, one step after
  the other (the proxy's post, completion and flush, the flag round trips): 128 KiB / 14 GB/s =
  9.4 us, the figure behind the 14 GB/s NCCL expects of one point-to-point channel at its default
  128 KiB network chunk (paths.cc 2.29, NCCL_P2P_PER_CHANNEL_NET_BW); NVIDIA/nccl#2409 measures
  10-12 us per step and connection on RoCE. A point-to-point connection moves at most its step
  size per net_step_us: one 128 KiB chunk, 14 GB/s a channel. A collective's Simple steps are
  charged `net_step_coll_us`, 0 by default: no published figure states it, and charged the same
  9.4 us it helped only the cluster it was first checked on (docs/validation.md, "leave one
  source out"); calibration can still fit it;
- `ll_max_bw_gbps`: the most data a rank moves with LL, llMaxBws (by GPU generation, node count and,
  across nodes, CPU vendor, as NCCL indexes it): LL's flag polling, not the links, bounds it;
- the protocols' wire cost: LL sends 16 bytes per 8 of data (half of every line is flag), LL128
  128 per 120, Simple what it carries.

The fabric itself can be changed for a run as well: `nvlink.bw_gbps`, `pcie.bw_gbps`, `c2c.bw_gbps`,
`cpu.bw_gbps`, `net.bw_gbps` and `cable.bw_gbps` set the bandwidth of every link of that kind, per
direction, as `nicksim topo --links` prints it (NCCL's plan stays the one for the machine as
described; the DES moves the bytes over the links as changed).

What calibration fits besides: `nvlink.efficiency`, `pcie.efficiency` and `net.efficiency` (the
share of every link of that kind's bandwidth that data gets, 1 as described), and
`step_lat.nvlink.scale`, `step_lat.pcie.scale` and `step_lat.net.scale` (hwLat of that hardware row
times the scale, on top of `step_lat.scale`), so a fit can tell a slow NIC from slow NVLink.

`with_overrides(params, {"cta.bw_gbps": 30})` gives the same set with named values replaced
(calibration and `--set` use it); `PARAM_NAMES` lists what can be set.
"""
from __future__ import annotations

import math

from dataclasses import dataclass, replace

from ..constants.rules import rules
from ..constants.topo_rules import NET_STEP_US
from ..constants.tuning_tables import TuningTables
from ..errors import UsageError
from ..graph.search import search_ladder

__all__ = ["DesParams", "des_params", "with_overrides", "check_override", "PARAM_NAMES", "LINK_KINDS", "SET_NAMES",
           "LINK_EFFICIENCIES", "HW_LAT_SCALES", "EFFICIENCY_MAX", "wire_nbytes"]

_NVLS_EFFICIENCY = {90: 0.85, 100: 0.74}  # tuning.cc nvlsEfficiency (2.28.9-2.30.7), Hopper / Blackwell
_WIRE = {"LL": 2.0, "LL128": 128 / 120, "Simple": 1.0}  # bytes on the wire per data byte


def wire_nbytes(protocol: str, nbytes: float) -> float:
    """Bytes a protocol puts on the wire to carry `nbytes` of data."""
    return nbytes * _WIRE[protocol]


@dataclass(frozen=True)
class DesParams:
    """One parameter set of the DES engine (see the module docstring for where each comes from).
    `step_lat_scale` and `launch_scale` multiply NCCL's latencies; calibration fits them."""

    tables: TuningTables
    cta_bw_gbps: float
    nvls_efficiency: float
    step_lat_scale: float = 1.0
    launch_scale: float = 1.0
    max_chunks: int = 64
    # A ring longer than this many steps per loop runs them in blocks of k (engine.coarse_steps):
    # close, not exact (docs/des.md); 0 runs every step.
    max_steps: int = 128
    # Beyond this many node classes each channel is split on its own (symmetry.py): close, not
    # exact. The exact split's cost grows about as the square of the nodes: NVLS Tree all_reduce on
    # 128 DGX H100 takes 24 s exact and 6 s split (24 classes), 0.4% under exact at 1 GiB, 1.5% at
    # 256 MiB, 6% at 64 MiB (docs/des.md); 64 nodes and fewer stay exact.
    exact_nodes: int = 64
    # An arrived transfer keeps its links' share for at most this fraction of its duration, or until
    # one of its shape takes its place (network.py): a connection's next slice costs no division.
    hold: float = 0.02
    net_overhead_us: float = 1.0
    net_latency_us: float = 0.0
    ll_max_bw_gbps: float = float("inf")
    net_step_us: float = NET_STEP_US
    # The same cost for a collective's network steps: no published figure states one, and held out
    # publisher by publisher it helped only the cluster it was first fitted to (docs/validation.md).
    net_step_coll_us: float = 0.0
    # (fabric link kind, GB/s) for every kind whose links the run gives another bandwidth.
    link_bw_gbps: tuple[tuple[str, float], ...] = ()
    # (fabric link kind, share of its bandwidth data gets) where not 1; (hwLat row, scale) where not 1.
    link_efficiency: tuple[tuple[str, float], ...] = ()
    hw_lat_scale: tuple[tuple[str, float], ...] = ()

    def step_lat_us(self, hw: str, algorithm: str, protocol: str) -> float:
        row = algorithm if algorithm in ("Tree", "Ring") else "Ring"
        scale = self.step_lat_scale * dict(self.hw_lat_scale).get(hw, 1.0)
        lat = scale * self.tables.hw_lat(hw, row, protocol)
        if hw == "NET":  # the plugin's own figure, as stated: not NCCL's latency, so not scaled with it
            lat += self.net_latency_us * (2 if protocol == "Simple" else 1)
        return lat

    def step_us(self, algorithm: str) -> float:
        """What one network step costs its connection: point-to-point's (`net_step_us`) or a
        collective's (`net_step_coll_us`)."""
        return self.net_step_us if algorithm == "P2P" else self.net_step_coll_us

    def launch_us(self, algorithm: str, protocol: str) -> float:
        base = self.tables.base_lat(algorithm, protocol) if algorithm in self.tables.algorithms else 0.0
        return self.launch_scale * (base or self.tables.base_lat("Ring", protocol))


def des_params(tables: TuningTables, sm: int, net_overhead_us: float = 1.0,
               ll_max_bw_gbps: float = float("inf"), net_latency_us: float = 0.0) -> DesParams:
    """The defaults for a GPU of compute capability `sm` under `tables`' NCCL release, on hosts whose
    proxy costs `net_overhead_us` per network step, with LL capped at `ll_max_bw_gbps` per rank and
    a network plugin that states `net_latency_us`."""
    cta = search_ladder(rules(tables.version), sm, inter=False)[0]  # before 2.25 Blackwell searched with SM90's ladder
    nvls = _NVLS_EFFICIENCY[100] if sm >= 100 else _NVLS_EFFICIENCY[90]
    return DesParams(tables, cta, nvls, net_overhead_us=net_overhead_us, ll_max_bw_gbps=ll_max_bw_gbps,
                     net_latency_us=net_latency_us)


PARAM_NAMES = {
    "cta.bw_gbps": "cta_bw_gbps",
    "nvls.efficiency": "nvls_efficiency",
    "step_lat.scale": "step_lat_scale",
    "launch.scale": "launch_scale",
    "des.max_chunks": "max_chunks",
    "des.max_steps": "max_steps",
    "des.exact_nodes": "exact_nodes",
    "des.hold": "hold",
    "proxy.overhead_us": "net_overhead_us",
    "net.latency_us": "net_latency_us",
    "ll.max_bw_gbps": "ll_max_bw_gbps",
    "net.step_us": "net_step_us",
    "net.step_coll_us": "net_step_coll_us",
}


# `--set` names for the fabric's link kinds (fabric.py FabricLink.kind).
LINK_KINDS = {"nvlink.bw_gbps": "NVL", "pcie.bw_gbps": "PCI", "c2c.bw_gbps": "C2C", "cpu.bw_gbps": "SYS",
              "net.bw_gbps": "NET", "cable.bw_gbps": "CABLE"}
# The share of a kind's bandwidth that data gets, and a hardware row's step latency scale.
LINK_EFFICIENCIES = {"nvlink.efficiency": "NVL", "pcie.efficiency": "PCI", "net.efficiency": "NET"}
HW_LAT_SCALES = {"step_lat.nvlink.scale": "NVLINK", "step_lat.pcie.scale": "PCI", "step_lat.net.scale": "NET"}
# A link gives data at most its stated bandwidth, give or take the margin NCCL's stated figures
# leave: NVLink 4 is stated at 20.6 GB/s a link (topo.h SM90_NVLINK_BW, 2.20+) of its 25 GB/s
# signalling rate, so a share may reach 1.25 of the stated figure and no more.
EFFICIENCY_MAX = 1.25


_MAY_BE_ZERO = ("net_overhead_us", "net_latency_us", "net_step_us", "net_step_coll_us", "hold", "max_steps")
SET_NAMES = (*PARAM_NAMES, *LINK_KINDS, *LINK_EFFICIENCIES, *HW_LAT_SCALES)  # every name `--set` and `[sweep.set]` take


def check_override(name: str, value: float, where: str = "--set") -> None:
    """A UsageError unless `name` can be set to `value`: a known name, a bandwidth or parameter
    above 0 (the proxy's post overhead, the plugin's latency and the network step's cost may be 0),
    and finite."""
    if name not in SET_NAMES:
        raise UsageError(f"unknown engine parameter '{name}'", where, ", ".join(SET_NAMES))
    if not math.isfinite(value):  # an infinite rate or count has no end to simulate
        raise UsageError(f"{name}={value:g}", where, "a finite number")
    if name in LINK_KINDS and not value > 0:
        raise UsageError(f"{name}={value:g}", where, "a bandwidth above 0 GB/s")
    if name in LINK_EFFICIENCIES and not 0 < value <= EFFICIENCY_MAX:
        raise UsageError(f"{name}={value:g}", where, f"a share above 0 and at most {EFFICIENCY_MAX:g}")
    if name in HW_LAT_SCALES and not value > 0:
        raise UsageError(f"{name}={value:g}", where, "a value above 0")
    if name in PARAM_NAMES and PARAM_NAMES[name] not in _MAY_BE_ZERO and not value > 0:
        raise UsageError(f"{name}={value:g}", where, "a value above 0")
    if not value >= 0:
        raise UsageError(f"{name}={value:g}", where, "a value of 0 or more")


def with_overrides(params: DesParams, values: dict[str, float]) -> DesParams:
    """`params` with the named values replaced (names as SET_NAMES lists them)."""
    changes = {}
    links, shares, scales = dict(params.link_bw_gbps), dict(params.link_efficiency), dict(params.hw_lat_scale)
    for name, value in values.items():
        check_override(name, value)
        if name in LINK_KINDS:
            links[LINK_KINDS[name]] = float(value)
            continue
        if name in LINK_EFFICIENCIES:
            shares[LINK_EFFICIENCIES[name]] = float(value)
            continue
        if name in HW_LAT_SCALES:
            scales[HW_LAT_SCALES[name]] = float(value)
            continue
        field = PARAM_NAMES[name]
        changes[field] = int(value) if field in ("max_chunks", "exact_nodes", "max_steps") else float(value)
    return replace(params, **changes, link_bw_gbps=tuple(sorted(links.items())),
                   link_efficiency=tuple(sorted(shares.items())), hw_lat_scale=tuple(sorted(scales.items())))
