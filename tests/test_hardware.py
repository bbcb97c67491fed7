"""GPU models and fabrics."""
import pytest

from nicksim.errors import UnknownNameError
from nicksim.hardware import CUBE_MESH_8, FABRICS, GPU_MODELS, fabric, gpu_model, gpu_model_for_device


def test_lookup_is_forgiving_about_case_and_suffixes():
    assert gpu_model("H100").name == "h100" and gpu_model("h100-sxm").name == "h100"
    with pytest.raises(UnknownNameError) as err:
        gpu_model("h900")
    assert "rtx4090" in err.value.valid
    with pytest.raises(UnknownNameError):
        fabric("myrinet")
    assert fabric("IB").net_plugin == "IB" and fabric("tcp").gdr is False


def test_pci_device_ids_are_unique_per_model():
    seen = {}
    for model in GPU_MODELS.values():
        for device in model.pci_devices:
            assert device not in seen, (model.name, seen.get(device))
            seen[device] = model.name
    assert gpu_model_for_device(0x2330).name == "h100" and gpu_model_for_device(0xFFFF) is None


def test_cube_mesh_gives_six_links_per_v100_and_is_symmetric():
    per_gpu = [0] * 8
    for (a, b), count in CUBE_MESH_8.items():
        assert a < b
        per_gpu[a] += count
        per_gpu[b] += count
    assert per_gpu == [gpu_model("v100").nvlinks] * 8


def test_consumer_parts_have_no_p2p():
    assert not gpu_model("rtx4090").cuda_p2p and not gpu_model("rtx2080ti").cuda_p2p
    assert gpu_model("l40s").cuda_p2p and gpu_model("h100").cuda_p2p
    assert set(FABRICS) == {"ib", "roce", "efa", "tcp"}
