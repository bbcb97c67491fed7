"""`nicksim perf --compare` on every visible validation case (../shared/validation/cases): the model's
rows beside the measured ones, one line per measured size, in a block tests and people can read.

Each case names its system the way a user would (catalog name or the case's own topology file,
nodes, NCCL release); nothing is tuned per case. Where a log does not print its NCCL release, the
newest modelled release stands in and the table below says so.
"""
from __future__ import annotations

import pytest

from conftest import REPO, need_validation, run_cli

TOPO = "topologies"
# case: (collectives, system arguments, sweep, why the arguments are what they are)
CASES = {
    "C01": (["all_reduce"], ["--system", f"{TOPO}/topo_aws_p5_48xl_v1.9.2.xml", "--gpu", "h100", "--nodes", "2",
                             "--fabric", "efa", "--nccl-version", "2.22"], ["-b", "8", "-e", "16G"],
            "AWS p5 x2, NCCL 2.22.3 (its INFO log)"),
    "C02": (["all_reduce"], ["--system", f"{TOPO}/topo_azure_ndv5_pre2025.xml", "--gpu", "h100",
                             "--nccl-version", "2.18"], ["-b", "8", "-e", "8G"],
            "Azure NDv5, NCCL 2.18.5; the 2024 topology file"),
    "C03": (["all_reduce"], ["--system", f"{TOPO}/topo_azure_ndv4.xml", "--gpu", "a100", "--nccl-version", "2.18"],
            ["-b", "8", "-e", "8G"], "Azure NDv4, NCCL 2.18.5"),
    "C05": (["all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv"],
            ["--system", "dgx-h100", "--nccl-version", "2.29", "-d", "double"], ["-b", "32M", "-e", "16G"],
            "8 H100 SXM on NVSwitch, NCCL 2.29.2, doubles"),
    "C05x10": (["all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv"],
               ["--system", "dgx-h100", "--nodes", "10", "--nccl-version", "2.29", "-d", "double"],
               ["-b", "32M", "-e", "16G"], "10 of those nodes, one 400G NIC per GPU"),
    "C07": (["all_reduce"], ["--system", "dgx-a100"], ["-b", "8", "-e", "4G"],
            "8 A100 SXM4; NCCL release not printed: the newest modelled stands in"),
    "C11": (["all_reduce"], ["--system", "dgx-b200", "--nodes", "2", "--nccl-version", "2.26"], ["-b", "8", "-e", "2G"],
            "2 x 8 B200 on InfiniBand, NCCL 2.26.2"),
    "C18": (["all_reduce"], ["--system", "pcie-8x-rtx4090"], ["-b", "8", "-e", "1G"],
            "8 RTX 4090 without P2P (stock driver, first table); release not printed"),
    "C19": (["all_reduce", "all_gather", "broadcast", "reduce", "alltoall"], ["--system", "pcie-2x-rtx2080ti"],
            ["-b", "8", "-e", "1G"], "2 RTX 2080 Ti, P2P not supported; release not printed"),
    "C20b": (["all_reduce"], ["--system", "tests/golden/topologies/nccl-issue-1161.xml", "--nccl-version", "2.18"],
             ["-b", "1G", "-e", "4G"],
             "2 H100 PCIe with an NVLink bridge, one process; the system rebuilt from its log (18 NVLinks)"),
    "C20c": (["all_reduce"], ["--system", "dgx-h100", "--nodes", "2", "--gpus-per-node", "4", "--nics-per-node", "4",
                              "--env", "NCCL_CROSS_NIC=0"], ["-b", "2M", "-e", "8M"],
             "2 nodes x 4 H100 (GPUs 0,2,4,6 with their 4 NICs), NCCL_CROSS_NIC=0; release not printed"),
}


def _case_file(case: str) -> str:
    return f"cases/{case.removesuffix('x10')}.md"


@pytest.mark.parametrize("case", sorted(CASES))
def test_model_beside_measurement(case):
    shared = need_validation()
    collectives, system, sweep, _ = CASES[case]
    system = [str(shared / a) if a.startswith(TOPO) else str(REPO / a) if a.startswith("tests/") else a
              for a in system]
    for coll in collectives:
        out = run_cli("perf", coll, *system, *sweep, "--compare", str(shared / _case_file(case)))
        assert out.returncode == 0, f"{case} {coll}: {out.stderr}"
        block = out.stdout.split("# nccl vs measured", 1)[1].splitlines()
        rows = [line.split() for line in block if line.startswith("# ") and line.split()[1].isdigit()]
        assert rows, f"{case} {coll}: no size in common with the measurement"
        for r in rows:
            assert len(r) == 7  # size, model us, measured us, model busbw, measured busbw, error %
        assert any(line.startswith("# band") for line in block), f"{case} {coll}"
