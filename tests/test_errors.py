"""NickSimError renders what, where and what would be valid as one line."""
from nicksim.errors import NickSimError, TopologyError, UsageError


def test_one_line_with_where_and_valid():
    err = TopologyError('<net> speed="fast" is not an integer', "topo.xml:12", "speed as an integer")
    assert err.line() == 'topo.xml:12: <net> speed="fast" is not an integer (valid: speed as an integer)'
    assert str(err) == err.line() and "\n" not in err.line()
    assert isinstance(UsageError("x"), NickSimError) and UsageError("x").line() == "x"
