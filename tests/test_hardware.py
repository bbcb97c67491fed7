"""GPU models and fabrics."""
import pytest

from nicksim.errors import UnknownNameError
from nicksim.topology.hardware import CUBE_MESH_8, FABRICS, GPU_MODELS, fabric, gpu_model, gpu_model_for_device


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
    assert set(FABRICS) == {"ib", "roce", "efa", "tcp", "tcpxo"}


def test_tcpxo_is_gpudirect_with_no_latency_of_its_own_unlike_nccls_sockets():
    # FasTrak (fastrak_plugin.cc, nccl_shim.cc GetProperties): GPUDirect, latency 0, maxComms 65536.
    from nicksim.studies.measured import log_facts
    tcpxo, sockets = fabric("tcpxo"), fabric("tcp")
    assert tcpxo.gdr and not sockets.gdr
    assert (tcpxo.net_plugin, tcpxo.net_latency_us, tcpxo.net_maxconn, tcpxo.default_gbps) == ("FasTrak", 0.0, 65536, 200)
    assert log_facts("h:1:2 [0] NCCL INFO Using network FasTrak\n").fabric == "tcpxo"


def test_efa_plugin_facts_match_the_c01_log():
    # aws-ofi-nccl 1.9.2-aws on p5 (validation case C01): what the plugin prints about itself.
    from conftest import need_validation
    log = (need_validation() / "raw" / "aws_p5_KeitaW_nccl-test-output-v2.22.3-1.log").read_text(errors="replace")
    efa = fabric("efa")
    assert f"NET/OFI Internode latency set at {efa.net_latency_us:.1f} us" in log
    for key, value in efa.plugin_env:
        assert f"NCCL INFO {key} set by environment to {value}." in log
    assert "NCCL INFO Using network AWS Libfabric" in log and efa.net_plugin == "AWS Libfabric"
