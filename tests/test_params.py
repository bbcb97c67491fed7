"""NCCL_* grammar: paths.cc ncclGetLevel, param.cc ncclLoadParam, tuning.cc parseList (NCCL 2.30.7)."""
import pytest

from nicksim.errors import UsageError
from nicksim.params import ALGO_NAMES, FUNC_NAMES, PROTO_NAMES, parse_nccl_int, read_params


@pytest.mark.parametrize("text,level", [
    ("NVL", "NVL"), ("PIX", "PIX"), ("SYS", "SYS"),
    # paths.cc levelsOldToNew = {LOC, PIX, PXB, PHB, SYS, SYS}, clamped at 5.
    ("0", "LOC"), ("1", "PIX"), ("2", "PXB"), ("3", "PHB"), ("4", "SYS"), ("9", "SYS"),
])
def test_p2p_level_values(text, level):
    params = read_params({"NCCL_P2P_LEVEL": text})
    assert params.get("NCCL_P2P_LEVEL") == level
    assert not params.warnings


def test_bad_level_warns_and_keeps_default():
    params = read_params({"NCCL_P2P_LEVEL": "bogus"})
    assert params.get("NCCL_P2P_LEVEL") is None
    assert len(params.warnings) == 1 and "NCCL_P2P_LEVEL" in params.warnings[0] and "bogus" in params.warnings[0]


@pytest.mark.parametrize("text,value", [("16", 16), ("0x10", 16), ("010", 8), ("-1", -1), ("12abc", 12)])
def test_integers_as_strtoll_base0(text, value):
    assert parse_nccl_int(text) == value


def test_bad_integer_warns_like_ncclloadparam():
    params = read_params({"NCCL_BUFFSIZE": "fast"})
    assert params.get("NCCL_BUFFSIZE") == 4194304
    # param.cc: "Invalid value %s for %s, using default %lld."
    assert params.warnings == ("NCCL INFO Invalid value fast for NCCL_BUFFSIZE, using default 4194304.",)


def test_list_grammar_examples_from_tuning_cc():
    params = read_params({"NCCL_ALGO": "ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring"})
    algo = params.get("NCCL_ALGO")
    on = lambda func: {a for a, v in algo.enabled(func, ALGO_NAMES).items() if v}  # noqa: E731
    assert on("AllReduce") == {"Tree", "CollNetDirect"}
    assert on("Broadcast") == {"Ring"}
    assert on("AllGather") == {"Ring", "CollNetDirect"}
    proto = read_params({"NCCL_PROTO": "^LL128;allreduce:LL128"}).get("NCCL_PROTO")
    assert {p for p, v in proto.enabled("AllReduce", PROTO_NAMES).items() if v} == {"LL128"}
    assert {p for p, v in proto.enabled("ReduceScatter", PROTO_NAMES).items() if v} == {"LL", "Simple"}


@pytest.mark.parametrize("text,fragment", [
    ("ring;tree", "All entries except the first must have a prefix"),
    ("ring,foo", 'Unrecognized element token "foo"'),
    ("allreduc:ring", 'Unrecognized prefix token "allreduc"'),
])
def test_list_grammar_errors_warn_and_keep_default(text, fragment):
    params = read_params({"NCCL_ALGO": text})
    assert params.get("NCCL_ALGO") is None
    assert len(params.warnings) == 1 and fragment in params.warnings[0]


def test_command_line_wins_over_environment():
    params = read_params({"NCCL_P2P_LEVEL": "SYS"}, ["NCCL_P2P_LEVEL=NVL"])
    assert params.get("NCCL_P2P_LEVEL") == "NVL" and params.sources["NCCL_P2P_LEVEL"] == "--env"


@pytest.mark.parametrize("item", ["NCCL_P2P_LEVEL", "=NVL", "1X=2"])
def test_malformed_env_flag(item):
    with pytest.raises(UsageError):
        read_params({}, [item])


def test_unknown_and_empty_variables_are_ignored_as_nccl_does():
    params = read_params({"NCCL_SOMETHING_NEW": "1", "NCCL_P2P_LEVEL": "", "HOME": "/root"})
    assert not params.values and not params.warnings
    assert "HOME" not in params.raw


def test_function_names_match_nccl():
    assert "AllReduce" in FUNC_NAMES and "ReduceScatter" in FUNC_NAMES
