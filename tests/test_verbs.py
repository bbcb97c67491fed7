"""The verbs check says why NET goes over sockets, from what sysfs lists."""
from __future__ import annotations

import importlib.util

from nicksim.realhw.verbs import rdma_devices, verbs_unavailable


def test_no_rdma_device_is_said(tmp_path):
    assert rdma_devices(str(tmp_path / "missing")) == []
    assert verbs_unavailable(str(tmp_path / "missing")) == f"no RDMA device in {tmp_path / 'missing'}"


def test_a_device_without_or_with_pyverbs_is_named(tmp_path):
    (tmp_path / "mlx5_1").mkdir()
    (tmp_path / "mlx5_0").mkdir()
    assert rdma_devices(str(tmp_path)) == ["mlx5_0", "mlx5_1"]
    reason = verbs_unavailable(str(tmp_path))
    if importlib.util.find_spec("pyverbs") is None:
        assert reason == "RDMA device(s) mlx5_0, mlx5_1 but no pyverbs (apt install python3-pyverbs)"
    else:
        assert reason.endswith("with pyverbs, but nicksim has no verbs transport yet")
