"""The double binary tree (trees.cc ncclGetBtree / ncclGetDtree)."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nicksim.graph.trees import btree, dtree, format_dtree


def test_worked_example_p8():
    lines = format_dtree(8)
    assert lines[0] == "p=8: internal tree0=[0, 2, 4, 6] tree1=[1, 3, 5, 7]"
    assert lines[1] == "rank 0 | tree0 parent -1 / [4] | tree1 parent 1 / leaf"
    assert lines[8] == "rank 7 | tree0 parent 6 / leaf | tree1 parent -1 / [3]"


def test_worked_example_p9_shifts_instead_of_mirroring():
    assert format_dtree(9)[0] == "p=9: internal tree0=[0, 2, 4, 6, 8] tree1=[0, 1, 3, 5, 7]"


def test_trees_cc_illustration_14_ranks():
    # trees.cc's picture (ranks 0..13): 0 -> 8; 8 -> 4, 12; 12 -> 10 and, 14 being out of range, 13.
    assert btree(14, 0).children == (8,)
    assert btree(14, 8).children == (4, 12) and btree(14, 12).children == (10, 13)
    assert btree(14, 13).up == 12 and btree(14, 1).up == 2
    assert btree(13, 12).children == (10,)  # with 13 ranks there is no 13


def _check_tree(nranks, links):
    parents = {r: links[r].up for r in range(nranks)}
    assert sum(1 for p in parents.values() if p == -1) == 1
    for r, link in links.items():
        for child in link.children:
            assert parents[child] == r  # children and parents agree
    root = next(r for r, p in parents.items() if p == -1)
    seen, todo = set(), [root]
    while todo:
        r = todo.pop()
        assert r not in seen  # no cycles
        seen.add(r)
        todo.extend(links[r].children)
    assert seen == set(range(nranks))


@given(st.integers(1, 300))
def test_both_trees_span_every_rank_once(nranks):
    trees = {r: dtree(nranks, r) for r in range(nranks)}
    _check_tree(nranks, {r: t.tree0 for r, t in trees.items()})
    _check_tree(nranks, {r: t.tree1 for r, t in trees.items()})
    if nranks > 2:
        # The point of two trees: no rank is an inner node of both (it sends twice at most once).
        assert all(not (t.tree0.children and t.tree1.children) or nranks % 2 for t in trees.values())


def test_bad_rank():
    with pytest.raises(ValueError):
        btree(4, 4)
