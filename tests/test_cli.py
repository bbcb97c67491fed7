"""`nicksim topo` as a user runs it: output, files, and one clear line for every bad input."""
import pytest

from conftest import REPO, need_validation, run_cli
from nicksim.topology.catalog import CATALOG


def test_main_job_prints_the_default_system():
    result = run_cli("topo")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "=== System : maxBw 370.8 totalBw 370.8 ==="
    assert "+ NVL[370.8] - NVS/0-0" in result.stdout
    assert lines[-1] == "=========================================="


@pytest.mark.parametrize("name", list(CATALOG))
def test_each_catalog_system_prints(name):
    result = run_cli("topo", name, "--paths")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("=== System : maxBw ") and "Paths, NCCL 2.30.7" in result.stdout


def test_every_validation_topology_prints():
    for path in sorted((need_validation() / "topologies").glob("*.xml")):
        result = run_cli("topo", str(path))
        assert result.returncode == 0, (path.name, result.stderr)
        assert result.stdout.startswith("=== System : maxBw ")
        assert "Traceback" not in result.stderr


def test_cluster_options():
    result = run_cli("topo", "dgx-h100", "--nodes", "4", "--fabric", "roce", "--nic-gbps", "200",
                     "--oversubscription", "2")
    assert result.returncode == 0, result.stderr
    assert "=== System : maxBw 25.0 totalBw 370.8 ===" in result.stdout
    assert "4 nodes x 8 GPUs = 32 ranks, fabric roce (IB)" in result.stdout
    assert "oversubscription 2:1" in result.stdout


def test_dump_xml_round_trip(tmp_path):
    dump = tmp_path / "p5.xml"
    src = str(need_validation() / "topologies" / "topo_aws_p5_48xl_v1.9.2.xml")
    first = run_cli("topo", src, "--gpu", "h100", "--dump-xml", str(dump))
    assert first.returncode == 0, first.stderr
    again = run_cli("topo", str(dump))
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    assert dump.read_text().startswith('<system version="1">')  # as NCCL dumps it: no comment before the root
    assert "Source: github.com/aws/aws-ofi-nccl" in (tmp_path / "p5.xml.nicksim.txt").read_text()


def test_nccl_topo_file_and_dump_file(tmp_path):
    dump = tmp_path / "out.xml"
    topo_file = str(REPO / "topologies" / "dgx-a100.xml")
    result = run_cli("topo", env={"NCCL_TOPO_FILE": topo_file, "NCCL_TOPO_DUMP_FILE": str(dump)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("=== System : maxBw 240.0 totalBw 240.0 ===")
    assert dump.exists()


def test_bad_env_value_warns_and_keeps_going():
    result = run_cli("topo", env={"NCCL_P2P_LEVEL": "bogus"})
    assert result.returncode == 0
    assert "NCCL_P2P_LEVEL" in result.stderr and "bogus" in result.stderr


def _bad_files(tmp_path):
    files = {}
    files["broken"] = '<system version="1">\n<cpu numaid="0">\n</system>\n'
    files["speed"] = ('<system version="1">\n<cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" '
                      'modelid="143">\n<pci busid="0000:01:00.0" class="0x020000" link_speed="16.0 GT/s PCIe" '
                      'link_width="16"><nic><net name="a" dev="0" speed="fast"/></nic></pci>\n</cpu>\n</system>\n')
    files["target"] = ('<system version="1">\n<cpu numaid="0">\n<pci busid="0000:01:00.0" class="0x030200" '
                       'link_speed="16.0 GT/s PCIe" link_width="16"><gpu dev="0" sm="80" rank="0" gdr="1">'
                       '<nvlink target="0000:77:00.0" count="12" tclass="0x030200"/></gpu></pci>\n</cpu>\n</system>\n')
    files["dup"] = ('<system version="1">\n<cpu numaid="0">\n<pci busid="0000:01:00.0"/>\n<pci busid="0000:01:00.0"/>\n'
                    '</cpu>\n</system>\n')
    paths = {}
    for name, text in files.items():
        path = tmp_path / f"{name}.xml"
        path.write_text(text)
        paths[name] = str(path)
    return paths


@pytest.mark.parametrize("case", [
    ("unknown system", ["topo", "dgx-h900"], "valid: dgx-a100"),
    ("broken xml", ["topo", "@broken"], "broken XML"),
    ("wrong type", ["topo", "@speed"], 'speed="fast" is not an integer'),
    ("missing nvlink target", ["topo", "@target"], "not a GPU in this file"),
    ("bus id twice", ["topo", "@dup"], "appears twice"),
    ("missing file", ["topo", "/nonexistent/x.xml"], "no such file"),
    ("directory", ["topo", "/tmp/"], "directory"),
    ("nodes zero", ["topo", "--nodes", "0"], "--nodes"),
    ("nodes text", ["topo", "--nodes", "many"], "--nodes"),
    ("unknown gpu", ["topo", "--gpu", "h900"], "valid: v100"),
    ("unknown fabric", ["topo", "--fabric", "myrinet"], "valid: ib, roce, efa, tcp"),
    ("version", ["topo", "--nccl-version", "2.17"], "valid: 2.18"),
    ("env flag", ["topo", "--env", "NCCL_P2P_LEVEL"], "KEY=VALUE"),
    ("too many gpus", ["topo", "--gpus-per-node", "9"], "--gpus-per-node"),
    ("rank outside the job", ["search", "--nodes", "2", "--rank", "16"], "--rank"),
    ("nic speed", ["topo", "--nic-gbps", "-5"], "--nic-gbps"),
    ("oversubscription", ["topo", "--nodes", "2", "--oversubscription", "0.5"], "--oversubscription"),
    ("no command", [], "COMMAND"),
    ("unknown flag", ["topo", "--frobnicate"], "--frobnicate"),
], ids=lambda c: c[0])
def test_bad_input_is_one_line_and_exit_2(case, tmp_path):
    _, args, fragment = case
    files = _bad_files(tmp_path)
    args = [files[a[1:]] if a.startswith("@") else a for a in args]
    result = run_cli(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert fragment in lines[0] and "Traceback" not in result.stderr


def test_debug_shows_the_traceback():
    result = run_cli("--debug", "topo", "dgx-h900")
    assert result.returncode == 2 and "Traceback" in result.stderr


def test_version_and_perf_examples():
    # `nicksim --version` says the installed version; every example `perf --help` shows is a valid command line.
    from importlib.metadata import version
    from nicksim.cli import PERF_EXAMPLES, build_parser
    shown = run_cli("--version")
    assert (shown.returncode, shown.stdout.strip()) == (0, f"nicksim {version('nicksim')}")
    examples = [line.split("#")[0].split()[1:] for line in PERF_EXAMPLES.splitlines()[1:]]
    assert len(examples) == 5
    for argv in examples:
        args = build_parser().parse_args(argv)
        assert args.command == "perf"
    helped = run_cli("perf", "--help")
    assert PERF_EXAMPLES in helped.stdout and "local (this host" in " ".join(helped.stdout.split())
