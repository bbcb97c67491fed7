"""The classic hangs, each a small definition: a system, what every rank calls (and what some
call instead), the environment per rank, the faults, and what a diagnosis must find.

A Scenario promises only what it states; `replay.py` runs it on the DES and writes what the
people running it would have seen.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError

__all__ = ["Op", "Scenario", "SCENARIOS", "scenario_named"]

DEFAULT_PG = "0 (default_pg)"


@dataclass(frozen=True)
class Op:
    """One call a rank makes: the collective, its count (NCCL's count argument), type, and the
    process group (PyTorch's id and description) it is issued on."""

    collective: str
    count: int
    dtype: str = "float"
    pg: str = DEFAULT_PG
    root: int = 0


@dataclass(frozen=True)
class Scenario:
    """A hang to replay. Every rank calls `calls` in order, except the ranks `instead` gives their
    own; `before` calls completed on every rank first (they set the SeqNums). `unlaunched` ranks
    enqueue their calls but never launch them; `init_failure` means the communicator never comes
    up, and says why ("bootstrap", "nvls-mig", "shm", "transport", "duplicate-gpu": what replay.py
    prints for each). `env` is per rank; `faults` and `stragglers` are the DES's
    --fault and --straggler texts. `expect` is the category a diagnosis must give, `culprits` the
    ranks it must name."""

    name: str
    title: str
    story: str
    expect: str
    culprits: tuple[int, ...]
    calls: tuple[Op, ...] = ()
    instead: tuple[tuple[int, tuple[Op, ...]], ...] = ()
    before: int = 0
    system: str = "dgx-h100"
    nodes: int = 1
    gpus_per_node: int = 4
    nccl_version: str = "2.27"
    env: tuple[tuple[int, tuple[tuple[str, str], ...]], ...] = ()
    faults: tuple[str, ...] = ()
    stragglers: tuple[str, ...] = ()
    unlaunched: tuple[int, ...] = ()
    init_failure: str | None = None
    timeout_ms: int = 600000
    fabric: str | None = None
    torn_lines: int = 0  # nccl-tests scenarios: LL128 lines whose flag landed before their data

    @property
    def nranks(self) -> int:
        return self.nodes * self.gpus_per_node

    def calls_of(self, rank: int) -> tuple[Op, ...]:
        return dict(self.instead).get(rank, self.calls)

    def env_of(self, rank: int) -> dict[str, str]:
        return dict(dict(self.env).get(rank, ()))

    def shared_env(self) -> dict[str, str]:
        """The settings every rank has alike (those the one simulated job can honour)."""
        envs = [self.env_of(r) for r in range(self.nranks)]
        return {k: v for k, v in envs[0].items() if all(e.get(k) == v for e in envs)}


_GRAD = Op("all_reduce", 2106881)  # a gradient bucket, as in NVIDIA/nccl#1409

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario(
        "rank-divergence", "one rank broadcasts where the others all-reduce",
        "At the end of an epoch rank 2 takes a data-dependent branch and broadcasts a small tensor where the "
        "other ranks all-reduce a 64 MiB gradient bucket (NVLink SHARP on this box). Both calls carry the "
        "same SeqNum: the others wait at the switch for rank 2's share, rank 2 for ring data nobody sends.",
        "rank-divergence", (2,), calls=(Op("all_reduce", 1 << 24),), instead=((2, (Op("broadcast", 5056),)),),
        gpus_per_node=8, before=80077),
    Scenario(
        "missing-group-end", "one rank never closes ncclGroupStart",
        "Rank 1 opens a group for its all_reduce and raises before ncclGroupEnd: its operation is enqueued "
        "but never launched, and its peers wait in theirs.",
        "stuck-peer", (1,), calls=(_GRAD,), unlaunched=(1,), before=311),
    Scenario(
        "straggler", "one rank is still computing when the others time out",
        "Rank 3 spends 15 minutes in a checkpoint write before its next all_reduce; the others reach the "
        "600 s watchdog limit waiting in theirs.",
        "straggler", (3,), calls=(_GRAD,), stragglers=("3:900s",), before=1579),
    Scenario(
        "link-down", "a NIC's link fails in the middle of an all_reduce",
        "On two nodes, node 0's first NIC loses its link to the leaf switch 20 us into an all_reduce: IB "
        "completions on that connection fail with status 12 (retry exceeded), and every rank hangs.",
        "fabric", (0, 8), calls=(Op("all_reduce", 1 << 22),), nodes=2, gpus_per_node=8, faults=("link-down:nic(0,0)->leaf(0,0)@20us",
                                                                             ), before=40),
    Scenario(
        "mixed-communicators", "two communicators called in different orders",
        "Ranks 0-2 all-reduce on the data-parallel group and then on the tensor-parallel group; rank 3's "
        "threads issue the tensor-parallel call first. Each side waits in the communicator the other is "
        "not in yet.",
        "mixed-communicators", (3,), calls=(Op("all_reduce", 1 << 20, pg="1 (dp)"), Op("all_reduce", 4096, pg="2 (tp)")),
        instead=((3, (Op("all_reduce", 4096, pg="2 (tp)"), Op("all_reduce", 1 << 20, pg="1 (dp)"))),), before=17),
    Scenario(
        "bootstrap-blocked", "the root listens on an interface the others cannot reach",
        "NCCL_SOCKET_IFNAME=docker0 is exported on rank 0 only: the bootstrap root listens on the docker "
        "bridge, the other ranks' connections to it time out, and ncclCommInitRank never returns.",
        "interface-selection", (0,), calls=(_GRAD,), env=((0, (("NCCL_SOCKET_IFNAME", "docker0"),)),),
        init_failure="bootstrap"),
    Scenario(
        "p2p-disable-mismatch", "one rank disables P2P, its peers do not",
        "NCCL_P2P_DISABLE=1 reaches rank 1 only (a per-node job script): rank 1 connects to its NVLink peers "
        "through shared memory while they connect to it through P2P/IPC, so nothing crosses those connections "
        "and the first all_reduce hangs every rank.",
        "config-mismatch", (1,), calls=(_GRAD,), before=0,
        env=tuple((r, (("NCCL_SOCKET_IFNAME", "eth0"),) + ((("NCCL_P2P_DISABLE", "1"),) if r == 1 else ()))
                  for r in range(4)),
        faults=("link-down:node0:GPU/1-NVS/0@0us",)),
    Scenario(
        "nvls-on-mig", "NVLink SHARP forced on MIG instances",
        "Four ranks run on four MIG instances of one H100 with NCCL_NVLS_ENABLE=1: several ranks share one NVML "
        "device, which NVLS cannot serve, and ncclCommInitRank fails with ncclInvalidUsage on every rank.",
        "config-mismatch", (0, 1, 2, 3), calls=(_GRAD,),
        env=tuple((r, (("NCCL_NVLS_ENABLE", "1"),)) for r in range(4)), init_failure="nvls-mig"),
    Scenario(
        "ll128-unsupported", "LL128 forced across nodes over sockets",
        "all_reduce_perf on two nodes of one GPU each, NCCL_IB_DISABLE=1 and NCCL_PROTO=LL128: NCCL's own rules "
        "keep LL128 off this path (its 128-byte stores need not arrive whole over the network), the user's "
        "setting turns it on, and one line whose flag overtook its data leaves stale values: nccl-tests' check "
        "fails. (The torn line is the scenario's injected fault; how many tear is the platform's.)",
        "data-corruption", (), calls=(Op("all_reduce", 1 << 21),), nodes=2, gpus_per_node=1, fabric="tcp",
        env=tuple((r, (("NCCL_PROTO", "LL128"), ("NCCL_IB_DISABLE", "1"))) for r in range(2)), torn_lines=1),
    Scenario(
        "shm-too-small", "a container's /dev/shm cannot hold NCCL's shared-memory buffers",
        "Four ranks in one docker container with its default 64 MB /dev/shm, NCCL_P2P_DISABLE=1: every "
        "connection goes through the SHM transport, whose segments (about 9.2 MB each, per peer and "
        "direction) do not fit; ncclCommInitRank fails on every rank.",
        "resource-exhaustion", (0, 1, 2, 3), calls=(_GRAD,),
        env=tuple((r, (("NCCL_P2P_DISABLE", "1"),)) for r in range(4)), init_failure="shm"),
    Scenario(
        "ib-disabled-on-one-node", "one node on sockets, the other on InfiniBand",
        "NCCL_IB_DISABLE=1 reaches node 1 only (a per-node job script): node 0 connects over IB, node 1 "
        "listens on the socket transport, and the first IB handshake it accepts has the wrong type.",
        "transport-mismatch", (1,), calls=(_GRAD,), nodes=2, gpus_per_node=1,
        env=((1, (("NCCL_IB_DISABLE", "1"),)),), init_failure="transport"),
    Scenario(
        "duplicate-gpu", "two ranks on one GPU",
        "The training script never calls torch.cuda.set_device(local_rank), so ranks 0 and 1 both use "
        "GPU 0; NCCL refuses the communicator.",
        "invalid-usage", (0, 1), calls=(_GRAD,), init_failure="duplicate-gpu"),
    Scenario(
        "p2p-blocked", "PCIe peer-to-peer traffic dropped (ACS with an IOMMU)",
        "Two L40S behind one PCIe switch whose ACS redirects peer traffic to the root complex, where the "
        "IOMMU drops it: NCCL's P2P writes from GPU 0 never land (the link carries nothing), no error is "
        "raised, and the very first all_reduce hangs on both ranks.",
        "p2p-blocked", (), calls=(Op("all_reduce", 1 << 20),), system="pcie-8x-l40s", gpus_per_node=2,
        faults=("link-down:node0:GPU/0-PCI/0@0us",)),
)}


def scenario_named(name: str) -> Scenario:
    """The scenario called `name`, or a UsageError listing them."""
    if name not in SCENARIOS:
        raise UsageError(f"no scenario '{name}'", "nicksim hang replay", ", ".join(SCENARIOS))
    return SCENARIOS[name]
