"""NickSimError renders what, where and what would be valid as one line."""
import io

from nicksim.errors import NickSimError, TopologyError, UsageError, print_line


def test_one_line_with_where_and_valid():
    err = TopologyError('<net> speed="fast" is not an integer', "topo.xml:12", "speed as an integer")
    assert err.line() == 'topo.xml:12: <net> speed="fast" is not an integer (valid: speed as an integer)'
    assert str(err) == err.line() and "\n" not in err.line()
    assert isinstance(UsageError("x"), NickSimError) and UsageError("x").line() == "x"


def test_a_value_with_a_newline_in_it_is_still_one_line():
    # A size pasted with a line break and a control character (found by test_fuzz's size texts)
    from nicksim.studies.perf import parse_size
    try:
        parse_size("12\n\x13M", "-b")
    except UsageError as err:
        assert err.line() == "-b: '12\\n\\x13M' is not a size (valid: bytes like 8, 64K, 256M, 8G)"
    else:
        raise AssertionError("no error")


def test_an_error_line_is_one_write_with_its_newline():
    # Ranks share the launcher's stderr; unbuffered (PYTHONUNBUFFERED), print() writes the text and the
    # newline apart and two ranks' lines can run into one. print_line hands the stream the whole line.
    class Recording(io.StringIO):
        def __init__(self):
            super().__init__()
            self.writes = []

        def write(self, text):
            self.writes.append(text)
            return super().write(text)

    stream = Recording()
    print_line("nicksim: error: bootstrap: rank 1 closed its connection", stream)
    assert stream.writes == ["nicksim: error: bootstrap: rank 1 closed its connection\n"]
