"""AWS p5.48xlarge x2 with NCCL 2.22.3 (../shared/validation/cases/C01.md, from KeitaW/p5-nccl-test-2024-07-19):
the rank-0 INFO lines nicksim reproduces, read from the case file itself.

What matches today: the NVLS heads and the threadThresholds line. What does not yet: the ring count
(the log has 16 channels; aws-ofi-nccl 1.9.2 presents each group of 4 EFA NICs as one 400G device,
which the topology file alone does not say, so nicksim sees 32 NICs and searches more channels).
"""
from __future__ import annotations

import re

from conftest import need_validation, run_cli


def _log_lines(prefix: str) -> list[str]:
    text = (need_validation() / "cases" / "C01.md").read_text()
    return [re.sub(r"^.*NCCL INFO ", "", line) for line in text.splitlines()
            if "NCCL INFO " in line and re.sub(r"^.*NCCL INFO ", "", line).startswith(prefix)]


def _search_c01() -> list[str]:
    topo = need_validation() / "topologies" / "topo_aws_p5_48xl_v1.9.2.xml"
    out = run_cli("search", "--system", str(topo), "--gpu", "h100", "--nodes", "2", "--fabric", "efa",
                  "--nccl-version", "2.22")
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_nvls_heads_as_the_log_prints_them():
    wanted = _log_lines("NVLS Head")
    assert len(wanted) == 3  # the case file shows heads 0, 1 and 7
    got = [line for line in _search_c01() if line.startswith("NVLS Head")]
    assert len(got) == 8
    for line in wanted:
        assert line in got


def test_thread_thresholds_as_the_log_prints_them():
    assert _log_lines("threadThresholds") == [line for line in _search_c01() if line.startswith("threadThresholds")]


def test_one_node_jobs_print_no_nvls_heads():
    out = run_cli("search", "dgx-h100", "--nccl-version", "2.22")
    assert out.returncode == 0 and "NVLS Head" not in out.stdout
    two = run_cli("search", "dgx-h100", "--nodes", "2", "--rank", "8")
    assert two.returncode == 0 and "NVLS Head" not in two.stdout  # only node 0 prints them
