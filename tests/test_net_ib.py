"""NET over IB verbs (nicksim/realhw/verbs.py, net_ib.py) without an RDMA device: the shim checked
against Debian's own pyverbs where no device is needed, and the transport run over a stand-in
pyverbs and fabric (tests/fake_pyverbs.py) with every rank a thread on one of two hosts.

What this cannot check — a NIC's own behaviour, the kernel's memory pinning, real link timeouts —
needs a host with an RDMA device; on one, `nicksim run` across hosts uses NET/IB by itself."""
from __future__ import annotations

import os
import threading

import pytest

from conftest import need_package
from fake_pyverbs import Device, Fabric
from test_execute import in_threads, rank_setup
from nicksim.calls import Call
from nicksim.tuning.choose import forced_choice
from nicksim.errors import UsageError
from nicksim.job import JobSpec, load_job
from nicksim.params import read_params
from nicksim.plan.chunking import plan_call
from nicksim.plan.programs import rank_programs
from nicksim.plan.p2p import p2p_setup
from nicksim.realhw import runner, verbs
from nicksim.realhw.execute import run_programs, open_links
from nicksim.realhw.launch import RankEnv
from nicksim.realhw.net import NetListener, NetPeers, SocketConfig
from nicksim.realhw.net_ib import IbNet, IbSettings, ib_net
from nicksim.realhw.runner import RunOptions, count_wrong, expected_output, slot_nbytes
from nicksim.realhw.verbs import (IbContext, IbPort, PeerInfo, VerbsUnavailable, ib_ports, load_pyverbs, resolve_api,
                                  rts_attr, verbs_unavailable)


def write_sysfs(root, devices: dict) -> str:
    """An /sys/class/infiniband tree: {device: (link_layer, state, [(gid, type), ...])}."""
    for name, (layer, state, gids) in devices.items():
        port = root / name / "ports" / "1"
        (port / "gid_attrs" / "types").mkdir(parents=True)
        (port / "gids").mkdir()
        (port / "state").write_text(f"{state}\n")
        (port / "link_layer").write_text(f"{layer}\n")
        for i, (gid, kind) in enumerate(gids):
            (port / "gids" / str(i)).write_text(gid + "\n")
            (port / "gid_attrs" / "types" / str(i)).write_text(kind + "\n")
    return str(root)


ROCE_GIDS = [("fe80:0000:0000:0000:0000:0000:0000:0001", "IB/RoCE v1"),
             ("fe80:0000:0000:0000:0000:0000:0000:0001", "RoCE v2"),
             ("0000:0000:0000:0000:0000:ffff:0a00:0001", "IB/RoCE v1"),
             ("0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCE v2")]


def two_host_fabric(tmp_path, ethernet: bool = False):
    layer = "Ethernet" if ethernet else "InfiniBand"
    devices = [Device(f"mlx5_{h}", ethernet, lid=0 if ethernet else 10 + h,
                      gids=[g.replace("0001", f"000{h + 1}") for g, _ in ROCE_GIDS]) for h in (0, 1)]
    sysfs = write_sysfs(tmp_path / "ib", {d.name: (layer, "4: ACTIVE", [(g, k) for g, (_, k) in zip(d.gids, ROCE_GIDS)])
                                          for d in devices})
    return Fabric(devices), sysfs


def host_job(nodes: int, per_host: int):
    """What `nicksim run` plans for `nodes` CPU hosts of `per_host` ranks."""
    return load_job(JobSpec(system="pcie-8x-rtx4090", nodes=nodes, gpus_per_node=per_host, nccl_version="2.30"),
                    read_params({}))


def run_over_ib(job, plan, tag: str, fabric: Fabric, sysfs: str, settings=IbSettings(), release: int = 44,
                programs=None, timeout_s: float = 20, before_run=None):
    """Every rank a thread; ranks of host h use device mlx5_h through the stand-in pyverbs of
    `release`; inside a host shared memory. `before_run(rank, links)` may act on a rank's links."""
    call = plan.call
    per_host = len(job.paths.node_system.gpus())
    nodes = tuple(r // per_host for r in range(call.nranks))
    programs, sends, recvs = rank_setup(job, plan, programs)
    api = resolve_api(fabric.package(release))
    listeners = [NetListener("127.0.0.1", timeout_s) for _ in range(call.nranks)]
    addresses = tuple(tuple(l.address) for l in listeners)
    barrier = threading.Barrier(call.nranks)
    errors = {}

    def rank_main(r):
        device = fabric.devices[f"mlx5_{nodes[r]}"]
        port = IbPort(device.name, 1, "Ethernet" if device.ethernet else "InfiniBand")
        ib = IbNet(IbContext(api, port, settings.gid_index, sysfs), settings)
        net = NetPeers(nodes, addresses, listeners[r], SocketConfig(0, 0), ib)
        try:
            links = open_links(programs[r], r, tag, plan.protocol, slot_nbytes(job, plan), timeout_s, barrier.wait,
                               net)
            try:
                if before_run is not None:
                    before_run(r, links)
                run_programs(call, programs[r], r, links, sends[r], recvs[r], timeout_s)
            finally:
                for link in links.values():
                    link.close()
        except Exception as err:  # reported by the test, per rank
            errors[r] = err
            barrier.abort()
        finally:
            listeners[r].close()
            ib.close()

    in_threads(rank_main, call.nranks)
    return sends, recvs, errors


def check_over_ib(job, plan, tag, fabric, sysfs, **kwargs):
    sends, recvs, errors = run_over_ib(job, plan, tag, fabric, sysfs, **kwargs)
    assert not errors, errors
    call = plan.call
    for r in range(call.nranks):
        assert count_wrong(call, recvs[r], expected_output(call, r, sends)) == 0, f"rank {r}"
    assert not fabric.open_objects, fabric.open_objects  # every QP, CQ, MR, PD and context closed
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(f"nicksim-{tag}")]
    return fabric


# --- the shim against Debian's pyverbs (no device needed to build attributes and requests) -------

def _debians_pyverbs():
    try:
        api = load_pyverbs()  # scripts/test.sh installs python3-pyverbs
    except VerbsUnavailable:
        api = None
    need_package(api is not None, "python3-pyverbs", "the verbs shim is checked against it")
    return api


def test_debians_pyverbs_loads_and_builds_every_attribute_and_request_the_transport_posts():
    api = _debians_pyverbs()
    assert api.imm_data  # Debian 12's rdma-core 44 has SendWR(imm_data=)
    peer = PeerInfo((0x11, 0x12), 7, True, 4, bytes.fromhex("00000000000000000000ffff0a000002"))
    attr = rts_attr(api, 1, 5, peer, 0x12, 3, 20, 7, 106, 0)
    assert (attr.path_mtu, attr.dest_qp_num, attr.timeout, attr.retry_cnt, attr.rnr_retry) == (4, 0x12, 20, 7, 7)
    ib_attr = rts_attr(api, 1, 5, PeerInfo((1,), 9, False, 5, bytes(16)), 1, 0, 18, 5, -1, -1)
    assert (ib_attr.path_mtu, ib_attr.timeout, ib_attr.retry_cnt) == (5, 18, 5)
    assert verbs.init_attr(api, 1).qp_access_flags == 3  # IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE
    assert "max inline data     : 64" in str(verbs.qp_init_attr(api, None, 36, 20, 64))
    write = verbs.write_wr(api, 7, 4096, 100, 1, 8192, 2, imm=100)
    assert write.opcode == api.enums.IBV_WR_RDMA_WRITE_WITH_IMM and write.imm_data == 0x64000000  # htobe32(100)
    assert verbs.send_wr(api, 1, 4096, 4, 3).opcode == api.enums.IBV_WR_SEND
    verbs.recv_wr(api, 1, 4096, 4, 3)


def test_opening_a_device_that_is_not_there_is_one_clear_error():
    api = _debians_pyverbs()
    with pytest.raises(verbs.VerbsError, match="mlx5_9 port 1: Failed to get devices list"):
        IbContext(api, IbPort("mlx5_9", 1, "InfiniBand"))


@pytest.mark.parametrize("release, imm, enums", [(30, False, "enums"), (44, True, "enums"),
                                                 (64, True, "libibverbs_enums")])
def test_each_rdma_core_release_is_read_for_what_differs(tmp_path, release, imm, enums):
    api = resolve_api(Fabric([]).package(release))
    assert api.imm_data is imm
    assert api.enums.__name__.endswith(enums)


def test_a_pyverbs_that_cannot_register_the_slots_is_refused_with_the_release_that_can():
    with pytest.raises(VerbsUnavailable, match="MR\\(address=\\) came in rdma-core 28"):
        resolve_api(Fabric([]).package(27))


# --- which ports, which GID -------------------------------------------------------------------

def test_ports_are_the_active_ones_nccl_ib_hca_keeps(tmp_path):
    sysfs = write_sysfs(tmp_path, {"mlx5_0": ("InfiniBand", "4: ACTIVE", []), "mlx5_1": ("Ethernet", "4: ACTIVE", []),
                                   "mlx5_2": ("InfiniBand", "1: DOWN", [])})
    assert [p.device for p in ib_ports(None, sysfs)] == ["mlx5_0", "mlx5_1"]
    assert [p.device for p in ib_ports("^mlx5_0", sysfs)] == ["mlx5_1"]
    assert [p.device for p in ib_ports("=mlx5_1:1", sysfs)] == ["mlx5_1"]
    assert ib_ports("mlx5_2", sysfs) == []
    assert verbs_unavailable("mlx5_2", 0, sysfs) == ("no active InfiniBand or RoCE port that NCCL_IB_HCA=mlx5_2 "
                                                      "keeps on mlx5_0, mlx5_1, mlx5_2")
    assert verbs_unavailable(None, 1, sysfs) == "NCCL_IB_DISABLE=1"
    assert verbs_unavailable(None, 0, str(tmp_path / "none")) == f"no RDMA device in {tmp_path / 'none'}"


def test_roce_picks_the_ipv4_roce_v2_gid_and_nccl_ib_gid_index_overrides_it(tmp_path):
    fabric, sysfs = two_host_fabric(tmp_path, ethernet=True)
    api = resolve_api(fabric.package())
    port = IbPort("mlx5_0", 1, "Ethernet")
    ctx = IbContext(api, port, -1, sysfs)
    assert (ctx.gid_index, ctx.gid_text) == (3, "0000:0000:0000:0000:0000:ffff:0a00:0001")
    ctx.close()
    assert IbContext(api, port, 1, sysfs).gid_index == 1
    ib = IbContext(resolve_api(Fabric([Device("mlx5_0", False, 5)]).package()), IbPort("mlx5_0", 1, "InfiniBand"))
    assert (ib.gid_index, ib.lid, ib.ethernet) == (0, 5, False)


# --- the transport on the stand-in fabric ----------------------------------------------------------

@pytest.mark.parametrize("collective", ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                                        "alltoall", "sendrecv"])
def test_every_collective_between_two_hosts_over_ib(tmp_path, collective):
    fabric, sysfs = two_host_fabric(tmp_path)
    job = host_job(2, 2)
    call = Call(collective, 250_003, "float" if collective not in ("alltoall", "sendrecv") else "int32",
                "sum" if collective in ("all_reduce", "reduce_scatter", "reduce") else "none",
                1 if collective in ("broadcast", "reduce") else -1, 4)
    programs = None
    if collective in ("alltoall", "sendrecv"):
        p2p = p2p_setup(job)
        programs = {r: p2p.programs(call, r) for r in range(4)}
        plan = p2p.plan_record(call, programs[0])
    else:
        plan = plan_call(job.comm, call)
    check_over_ib(job, plan, f"ib{os.getpid()}{collective}", fabric, sysfs, programs=programs)
    assert fabric.bytes_written > call.nbytes // 2  # the bytes between hosts went over the fabric
    assert fabric.posted["write_imm"] > 0 and fabric.posted["send"] == 0


@pytest.mark.parametrize("protocol", ["LL", "LL128", "Simple"])
def test_every_protocol_over_roce(tmp_path, protocol):
    fabric, sysfs = two_host_fabric(tmp_path, ethernet=True)
    job = host_job(2, 1)
    call = Call("all_reduce", 100_001, "bfloat16", "max", -1, 2)
    plan = plan_call(job.comm, call, forced_choice(job.comm, call, "Ring", protocol))
    check_over_ib(job, plan, f"ib{os.getpid()}{protocol}", fabric, sysfs)


@pytest.mark.parametrize("qps, split", [(4, True), (4, False), (3, True)])
def test_queue_pairs_per_connection_split_or_take_turns(tmp_path, qps, split):
    fabric, sysfs = two_host_fabric(tmp_path, ethernet=True)  # RoCE: no adaptive routing by default
    job = host_job(2, 1)
    call = Call("all_gather", 9_000_017, "int8", "none", -1, 2)
    plan = plan_call(job.comm, call, forced_choice(job.comm, call, "Ring", "Simple"))
    settings = IbSettings(qps=qps, split=split)
    check_over_ib(job, plan, f"ib{os.getpid()}q{qps}{split}", fabric, sysfs, settings=settings)
    assert fabric.notices  # every sending end's queue pairs, and the writes with immediate each posted
    for per_qp in fabric.notices.values():
        counts = sorted(per_qp.values())
        assert len(counts) == qps
        # split: every request on every queue pair; else each request whole on the next one in turn
        assert counts[-1] - counts[0] == 0 if split else counts[-1] - counts[0] <= 1


def test_adaptive_routing_sends_the_data_first_then_a_zero_byte_write_with_immediate(tmp_path):
    fabric, sysfs = two_host_fabric(tmp_path)  # InfiniBand: NCCL_IB_ADAPTIVE_ROUTING -2 means on
    job = host_job(2, 1)
    call = Call("broadcast", 1 << 20, "int8", "none", 0, 2)
    plan = plan_call(job.comm, call, forced_choice(job.comm, call, "Ring", "Simple"))
    check_over_ib(job, plan, f"ib{os.getpid()}ar", fabric, sysfs)
    p = fabric.posted
    data_writes = p["write"] - p["write_inline"]  # the receivers' CTS entries are the inline writes
    assert p["write_imm"] > 0 and p["write_imm_empty"] == p["write_imm"] == data_writes
    fabric2, sysfs2 = two_host_fabric(tmp_path / "off")
    check_over_ib(job, plan, f"ib{os.getpid()}ar0", fabric2, sysfs2, settings=IbSettings(adaptive=0))
    p = fabric2.posted
    assert p["write_imm"] > 0 and p["write_imm_empty"] == 0 and p["write"] == p["write_inline"]


def test_without_immediate_data_the_length_follows_in_a_send(tmp_path):
    fabric, sysfs = two_host_fabric(tmp_path)
    job = host_job(2, 2)
    call = Call("all_reduce", 77_777, "int64", "prod", -1, 4)
    plan = plan_call(job.comm, call)
    check_over_ib(job, plan, f"ib{os.getpid()}old", fabric, sysfs, release=30)
    assert fabric.posted["write_imm"] == 0 and fabric.posted["send"] > 0


# --- failures ------------------------------------------------------------------------------

def two_rank_all_reduce(tmp_path, count: int):
    """A stand-in fabric of two hosts, and a float all_reduce of `count` on one rank each."""
    fabric, sysfs = two_host_fabric(tmp_path)
    job = host_job(2, 1)
    return fabric, sysfs, job, plan_call(job.comm, Call("all_reduce", count, "float", "sum", -1, 2))


def test_a_link_that_goes_down_ends_the_run_with_ncclls_completion_error(tmp_path):
    fabric, sysfs, job, plan = two_rank_all_reduce(tmp_path, 4_000_000)

    def cut(rank, links):
        if rank == 0:
            fabric.break_device("mlx5_0")

    _, _, errors = run_over_ib(job, plan, f"ib{os.getpid()}down", fabric, sysfs, before_run=cut, timeout_s=5)
    assert errors, "the run went through a dead link"
    lines = [str(e) for e in errors.values()]
    assert any("NET/IB: Got completion from peer 127.0.0.1<" in line and "status=IBV_WC_RETRY_EXC_ERR(12)" in line
               and "hca mlx5_" in line for line in lines), lines
    assert not fabric.open_objects


def test_a_sender_that_finished_and_closed_before_its_receiver_read_is_no_error(tmp_path):
    # The sender's steps all sit in the receiver's slots when it ends and closes its queue pairs;
    # the receiver, reading late, frees slots and offers them again before its proxy has seen the
    # socket close (here: never sees it). The offer fails as an RDMA write to a closed queue pair
    # does (IBV_WC_RETRY_EXC_ERR) and must not cost the receiver the steps it already holds.
    import time
    fabric, sysfs = two_host_fabric(tmp_path)
    job = host_job(2, 1)
    call = Call("broadcast", 6 << 20, "int8", "none", 0, 2)  # 6 steps a channel: all fit the 8 slots
    plan = plan_call(job.comm, call, forced_choice(job.comm, call, "Ring", "Simple"))
    offers_failed = []

    def late(rank, links):
        if rank == 1:
            for link in links.values():
                link._peer_closed = lambda: False
                link.release = slowly(link, link.release)
            time.sleep(0.5)  # rank 0 sends its steps, ends and closes its queue pairs meanwhile

    def slowly(link, release):
        def release_then_wait(*args, **kwargs):
            release(*args, **kwargs)
            time.sleep(0.05)  # the proxy offers the freed slot, and the fabric fails the offer
            offers_failed.append(link._gone is not None)
        return release_then_wait

    check_over_ib(job, plan, f"ib{os.getpid()}late", fabric, sysfs, before_run=late)
    assert any(offers_failed)  # the case happened: an offer failed while steps were still to read


def test_a_peer_whose_process_ends_is_named_from_its_socket(tmp_path):
    fabric, sysfs, job, plan = two_rank_all_reduce(tmp_path, 2_000_000)

    def vanish(rank, links):
        if rank == 1:  # as if its process ended: its queue pairs and sockets go
            for link in links.values():
                link.close()
            raise RuntimeError("rank 1 ended")

    _, _, errors = run_over_ib(job, plan, f"ib{os.getpid()}gone", fabric, sysfs, before_run=vanish, timeout_s=5)
    # its socket closed; or, where a CTS entry was on its way as the peer's memory went, the
    # queue pair's completion error
    assert "the peer at 127.0.0.1<" in str(errors[0]) and "closed its end (its process ended)" in str(errors[0]) \
        or "NET/IB: Got completion from peer 127.0.0.1<" in str(errors[0]), errors
    assert str(errors[1]) == "rank 1 ended"  # closing its links twice (here, then after the run) is harmless
    assert not fabric.open_objects


def test_ranks_with_different_queue_pair_counts_are_told_so(tmp_path):
    fabric, sysfs, job, plan = two_rank_all_reduce(tmp_path, 100_000)
    api = resolve_api(fabric.package())
    programs = {r: rank_programs(plan, job.channels.rings, {}, r) for r in range(2)}
    listeners = [NetListener("127.0.0.1", 5) for _ in range(2)]
    addresses = tuple(tuple(l.address) for l in listeners)
    barrier = threading.Barrier(2)
    errors = {}

    def rank_main(r):
        ib = IbNet(IbContext(api, IbPort(f"mlx5_{r}", 1, "InfiniBand")), IbSettings(qps=1 + r))
        try:
            open_links(programs[r], r, "ibqp", plan.protocol, slot_nbytes(job, plan), 5, barrier.wait,
                       NetPeers((0, 1), addresses, listeners[r], SocketConfig(0, 0), ib))
        except Exception as err:
            errors[r] = err
            barrier.abort()
        finally:
            listeners[r].close()
            ib.close()

    in_threads(rank_main, 2, 60)
    assert any("NCCL_IB_QPS_PER_CONNECTION differs" in str(e) for e in errors.values()), errors
    assert not fabric.open_objects


# --- nicksim run's own path: ranks choose NET/IB, log it and agree on it ----------------------------

def test_run_ranks_on_two_hosts_choose_net_ib_log_it_and_deliver(tmp_path, monkeypatch, capsys):
    fabric, sysfs = two_host_fabric(tmp_path)
    package = fabric.package()
    monkeypatch.setitem(__import__("sys").modules, "pyverbs", package)
    monkeypatch.setattr(verbs, "SYSFS_ROOT", sysfs)
    # both "hosts" see the same sysfs here: rank r's device is its local rank's port, so give each
    # host one rank and one port of its own
    sysfs_of = {0: write_sysfs(tmp_path / "h0", {"mlx5_0": ("InfiniBand", "4: ACTIVE", [])}),
                1: write_sysfs(tmp_path / "h1", {"mlx5_1": ("InfiniBand", "4: ACTIVE", [])})}
    real_ib_net = runner.ib_net
    root = ("127.0.0.1", runner.free_port())
    options = RunOptions("all_reduce", (1 << 16, 1_000_000), "float", "sum", 0, 2, 1, 1, "2.30")
    rows, errors = {}, {}

    def rank_main(r):
        params = read_params({"NCCL_HOSTID": f"host{r}", "NCCL_DEBUG": "INFO", "NICKSIM_TIMEOUT": "20"})
        try:
            rows[r] = runner.run_rank(RankEnv(r, 2, 0, "test"), root, options, params)
        except Exception as err:
            errors[r] = err

    monkeypatch.setattr(runner, "ib_net", lambda params, local_rank: real_ib_net(
        params, local_rank, sysfs=sysfs_of[int(params.get("NCCL_HOSTID")[-1])]))
    in_threads(rank_main, 2)
    assert not errors, errors
    assert [row.out_of_place.nwrong for row in rows[0]] == [0, 0]
    assert [row.in_place.nwrong for row in rows[0]] == [0, 0]
    out = capsys.readouterr().out
    assert "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB " in out and "NET/IB : Using [0]mlx5_1:1/IB" in out
    assert "NCCL INFO Using network IB" in out
    assert fabric.posted["write_imm"] > 0 and not fabric.open_objects


def test_ranks_that_do_not_all_have_verbs_are_told_so():
    with pytest.raises(UsageError, match="ranks 0 have NET/IB and ranks 1 only NET/Socket"):
        runner._same_network([[["h", 1], "mlx5_0:1/IB"], [["h", 2], None]])


def test_ib_net_needs_an_active_port(tmp_path):
    with pytest.raises(VerbsUnavailable, match="no active InfiniBand or RoCE port"):
        ib_net(read_params({}), 0, sysfs=str(tmp_path))


def test_the_ib_knobs_take_the_jobs_release_defaults():
    # net_ib/connect.cc: NCCL_IB_TIMEOUT 18 in 2.14-2.22, 20 from 2.23; common.cc: NCCL_IB_SPLIT_DATA_ON_QPS 1 in
    # 2.18-2.19, 0 from 2.20
    old = load_job(JobSpec(system="pcie-8x-rtx4090", nodes=2, gpus_per_node=1, nccl_version="2.19"), read_params({}))
    assert (IbSettings.from_params(old.params).timeout, IbSettings.from_params(old.params).split) == (18, True)
    new = host_job(2, 1)
    assert (IbSettings.from_params(new.params).timeout, IbSettings.from_params(new.params).split) == (20, False)
