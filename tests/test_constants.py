"""Versioned constants, checked against NVIDIA/nccl src/graph/topo.h at each release tag."""
import pytest

from nicksim.constants import MODELLED_VERSIONS, parse_version, topo_rules
from nicksim.errors import UsageError


def rules(v):
    return topo_rules(parse_version(v))


def test_nvlink_bandwidth_per_version():
    # topo.h: SM90_NVLINK_BW 20.0 at v2.19.4-1, 20.6 from v2.20.3-1.
    assert rules("2.19").nvlink_bw(90) == 20.0
    assert rules("2.20").nvlink_bw(90) == 20.6
    # SM100_NVLINK_BW absent before v2.25.1-1 (SM100 takes the SM90 branch), 40.0 in 2.25-2.26, 40.1 from v2.27.7-1.
    assert rules("2.24").nvlink_bw(100) == 20.6
    assert rules("2.25").nvlink_bw(100) == 40.0
    assert rules("2.27").nvlink_bw(100) == 40.1
    # SM86_NVLINK_BW 12.0, SM80/SM70 20.0, SM60 18.0 in every modelled line.
    for v in MODELLED_VERSIONS:
        r = topo_rules(v)
        assert (r.nvlink_bw(86), r.nvlink_bw(80), r.nvlink_bw(70), r.nvlink_bw(60)) == (12.0, 20.0, 20.0, 18.0)


def test_path_enums_per_version():
    # topo.h PATH_*: v2.22.3-1 PXN=5 PHB=6 SYS=7 NET=8; v2.26.6-1 C2C=3 PXN=6; v2.28.9-1 P2C=6 PXN=7 DIS=11.
    r22, r26, r28 = rules("2.22"), rules("2.26"), rules("2.28")
    assert (r22.path_code("PXN"), r22.path_code("PHB"), r22.path_code("SYS"), r22.path_code("NET")) == (5, 6, 7, 8)
    assert not r22.has_path("C2C") and not r22.has_path("P2C")
    assert (r26.path_code("C2C"), r26.path_code("PXN"), r26.has_path("P2C")) == (3, 6, False)
    assert (r28.path_code("P2C"), r28.path_code("PXN"), r28.path_code("DIS")) == (6, 7, 11)
    # topo.h LINK_*: LINK_PCI 3 until 2.25, 4 from 2.26; LINK_NET 8 / 9 (2.26) / 10 (2.27+).
    assert rules("2.25").link_codes["PCI"] == 3 and rules("2.26").link_codes["NET"] == 9
    assert rules("2.27").link_codes["NET"] == 10


@pytest.mark.parametrize("text,line", [("2.22", "2.22"), ("2.22.3", "2.22"), ("v2.22.3-1", "2.22"),
                                       ("2.22.3+cuda12.2", "2.22"), ("2.30", "2.30")])
def test_version_strings(text, line):
    assert parse_version(text).line == line


@pytest.mark.parametrize("text", ["2.17", "3.0", "two", ""])
def test_unmodelled_versions_are_usage_errors(text):
    with pytest.raises(UsageError) as err:
        parse_version(text)
    assert "2.18" in err.value.line() and "2.30" in err.value.line()
