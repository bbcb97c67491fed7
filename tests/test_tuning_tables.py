"""NCCL's tuning tables per release (src/graph/tuning.cc at each modelled tag v2.N.P-1)."""
import re

import pytest

from conftest import need_validation, run_cli
from nicksim.constants import MODELLED_VERSIONS, parse_version, tuning_tables
from nicksim.constants.tuning_tables import ALGORITHMS, HARDWARE, PROTOCOLS
from nicksim.params import read_params
from nicksim.tuning.cost import format_thread_thresholds, thread_thresholds


def tables(line):
    return tuning_tables(parse_version(line))


@pytest.mark.parametrize("version", MODELLED_VERSIONS, ids=str)
def test_every_release_has_a_full_table_for_each_algorithm_it_knows(version):
    t = tuning_tables(version)
    # PAT is NCCL's seventh algorithm from 2.23 (src/include/device.h NCCL_NUM_ALGORITHMS).
    assert t.algorithms == (ALGORITHMS if version.minor >= 23 else ALGORITHMS[:6])
    assert len(t.base_lat_us) == len(t.algorithms)
    assert all(len(rows) == len(t.algorithms) for rows in t.hw_lat_us)
    assert len(t.hw_lat_us) == len(HARDWARE)
    rows = 4 if version.minor >= 25 else 3  # Blackwell row from 2.25
    for caps in (t.ll_max_bw_gbps, t.per_ch_max_ring_ll128_bw_gbps, t.per_ch_max_tree_ll128_bw_gbps,
                 t.per_ch_max_tree_bw_gbps):
        assert len(caps) == rows and all(len(r) == 3 for r in caps)
    assert len(t.tree_correction_factor) == len(PROTOCOLS)
    assert {len(r) for r in t.tree_correction_factor} == {24 if version.minor >= 29 else 23}
    assert t.source == f"src/graph/tuning.cc, NCCL v{version}-1"


def test_2_30_tables_equal_the_reference_numbers():
    """nccl-facts.md section 7 items 4-6 (NCCL 2.30.7 ncclTunerConstantsDefaults)."""
    t = tables("2.30")
    assert t.base_lat("Tree", "Simple") == 8.4 and t.base_lat("Ring", "LL") == 6.6
    assert t.base_lat("PAT", "LL128") == 8.0 and t.base_lat("NVLS", "Simple") == 0.0
    assert t.hw_lat_us[0][1] == (0.6, 1.9, 3.4)            # NVLink ring
    assert t.hw_lat("NVLINK", "NVLS", "Simple") == 25.0
    assert t.hw_lat_us[1][0] == (1.0, 1.9, 4.0)            # PCI tree
    assert t.hw_lat("NET", "NVLSTree", "Simple") == 20.9
    assert t.hw_lat("NET", "CollNetDirect", "Simple") == 31.0
    assert t.hw_lat("NET", "PAT", "Simple") == 14.0
    assert t.ll_max_bw_gbps[2] == (141.0, 45.0, 35.0)
    assert t.ll_max_bw_gbps[3] == (282.0, 90.0, 70.0)
    assert t.per_ch_max_ring_ll128_bw_gbps[3] == (40.0, 40.0, 40.0)
    assert t.per_ch_max_tree_ll128_bw_gbps[3] == (55.6, 31.67, 20.0)
    assert t.per_ch_max_tree_bw_gbps[2] == (38.7, 41.4, 36.0)
    assert t.per_ch_max_nvls_tree_bw_gbps[3] == (0.0, 96.0, 80.0)
    assert t.nvls_efficiency[2:] == (0.85, 0.74)


def test_what_changed_between_releases():
    # 2.18.6: CollNet rows copy Tree's base latency; NVLS carries 23 us there.
    assert tables("2.18").base_lat("CollNetDirect", "LL") == 6.8
    assert tables("2.18").base_lat("NVLS", "Simple") == 23.0
    assert tables("2.19").base_lat("NVLS", "Simple") == 0.0
    # 2.19-2.22 priced Tree/Simple at 28 us on every fabric; 2.23 went back to 4/4/14.
    for line in ("2.19", "2.22"):
        assert [tables(line).hw_lat(hw, "Tree", "Simple") for hw in HARDWARE] == [28.0, 28.0, 28.0]
    assert [tables("2.23").hw_lat(hw, "Tree", "Simple") for hw in HARDWARE] == [4.0, 4.0, 14.0]
    # 2.18.6 priced Tree/Simple at 4/6/14 us and NVLS Tree over the network at 19 us; NET NVLS Tree is
    # 14 us in 2.19-2.27 and 20.9 us from 2.28 (tuning.cc 2.28.9 ncclTunerConstantsDefaults).
    assert [tables("2.18").hw_lat(hw, "Tree", "Simple") for hw in HARDWARE] == [4.0, 6.0, 14.0]
    assert [tables(line).hw_lat("NET", "NVLSTree", "Simple") for line in ("2.18", "2.19", "2.27", "2.28")] == \
        [19.0, 14.0, 14.0, 20.9]
    # NVLS on NVLink: 23 us until 2.20, 25 us from 2.21.
    assert tables("2.20").hw_lat("NVLINK", "NVLS", "Simple") == 23.0
    assert tables("2.21").hw_lat("NVLINK", "NVLS", "Simple") == 25.0
    # Hopper's LL cap row copied Ampere's until 2.20.
    assert tables("2.20").ll_max_bw_gbps[2] == tables("2.20").ll_max_bw_gbps[1]
    assert tables("2.21").ll_max_bw_gbps[2] == (141.0, 45.0, 35.0)
    # 2.23-2.27 declare six algorithm rows for seven algorithms: PAT's latencies are zero-filled.
    assert tables("2.27").base_lat("PAT", "Simple") == 0.0
    assert tables("2.28").base_lat("PAT", "Simple") == 8.0
    # Blackwell: doubled Hopper caps in 2.25-2.27, own numbers in 2.28, ring LL128 40 from 2.29.
    assert tables("2.27").per_ch_max_ring_ll128_bw_gbps[3] == (73.4, 73.4, 73.4)
    assert tables("2.28").per_ch_max_ring_ll128_bw_gbps[3] == (73.4, 34.6, 73.4)
    assert tables("2.29").per_ch_max_ring_ll128_bw_gbps[3] == (40.0, 40.0, 40.0)
    # NVLS tree caps and efficiencies are tables from 2.28; 2.30 raised Blackwell multi-node to 80.
    assert tables("2.27").per_ch_max_nvls_tree_bw_gbps is None and tables("2.27").nvls_efficiency is None
    assert tables("2.29").per_ch_max_nvls_tree_bw_gbps[3] == (0.0, 96.0, 43.8)


def test_releases_that_did_not_change_a_table_share_it():
    assert tables("2.19").base_lat_us is tables("2.22").base_lat_us
    assert tables("2.23").hw_lat_us is tables("2.27").hw_lat_us
    assert tables("2.18").tree_correction_factor is tables("2.28").tree_correction_factor
    assert tables("2.18").hw_lat_us is not tables("2.19").hw_lat_us


def test_compcap_rows_follow_what_each_release_knows():
    assert tables("2.24").compcap_row(100) == 2   # no Blackwell row yet: Hopper's
    assert tables("2.25").compcap_row(100) == 3
    assert [tables("2.30").compcap_row(cc) for cc in (70, 80, 86, 90)] == [0, 1, 1, 2]
    assert [tables("2.30").nodes_column(n) for n in (1, 2, 3, 64)] == [0, 1, 2, 2]


def test_single_node_h100_ring_latencies_from_the_tables():
    """nccl-facts.md 7.9: an 8-GPU NVLink ring allreduce spends base + 2(n-1) x hwLat per protocol."""
    t = tables("2.30")
    steps = 2 * (8 - 1)
    lat = [t.base_lat("Ring", p) + steps * t.hw_lat("NVLINK", "Ring", p) for p in PROTOCOLS]
    assert lat == pytest.approx([15.0, 40.6, 56.0])


def test_thread_thresholds_scale_ring_ll_with_ranks_and_take_the_environment():
    t = tables("2.30")
    assert format_thread_thresholds(thread_thresholds(t, 8, read_params({}))) == \
        "threadThresholds 8/8/64 | 64/8/64 | 512 | 512"
    # sscanf semantics: negative keeps the default, reading stops at the first non-number.
    env = read_params({"NCCL_THREAD_THRESHOLDS": "-1 16 32 4 x 9"})
    assert format_thread_thresholds(thread_thresholds(t, 8, env)) == \
        "threadThresholds 8/16/32 | 4/8/64 | 512 | 512"


def test_thread_thresholds_line_matches_nccl_2_22_on_two_p5_nodes():
    """C01: every rank of the 16-rank p5 job printed the same threadThresholds line."""
    log = (need_validation() / "raw" / "aws_p5_KeitaW_nccl-test-output-v2.22.3-1.log").read_text(errors="replace")
    theirs = {m.group(1).rstrip() for m in re.finditer(r"NCCL INFO (threadThresholds .*)", log)}
    assert len(theirs) == 1
    result = run_cli("search", "dgx-h100", "--nodes", "2", "--nccl-version", "2.22")
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stdout.splitlines() if line.startswith("threadThresholds")] == list(theirs)
