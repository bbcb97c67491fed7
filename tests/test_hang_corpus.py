"""`nicksim hang diagnose` on real hang reports: the logs people pasted into public issue threads,
each with the root cause the thread's resolution states (tests/hang_corpus/*.toml).

A case is one thread: `source` (its address), `category` and `culprits` (the ranks the resolution
names, [] where it names none), `resolution` (what the thread says fixed it, and who said so) and
its `[[files]]`, each the text as the reporter pasted it (cut to the lines that bear on it, never
edited). A case enters the corpus when its thread's cause is confirmed there and its pasted log
holds at least one line the cause shows in.

The score is printed per category (docs/hangs.md quotes it) and must stay at 90% or more; a
culprit the thread names must be among the diagnosis's.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO
from nicksim.forensics import CATEGORIES, diagnose, read_evidence

try:  # Python 3.11+; on 3.10 the project depends on tomli (pyproject.toml)
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib  # type: ignore[no-redef]

CORPUS = REPO / "tests" / "hang_corpus"
MIN_ACCURACY = 0.90


def cases() -> list[Path]:
    return sorted(CORPUS.glob("*.toml"))


def load(path: Path) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def diagnose_case(path: Path, tmp: Path):
    case = load(path)
    files = []
    for entry in case["files"]:
        target = tmp / path.stem / entry["name"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(entry["text"], encoding="utf-8")
        files.append(target)
    return case, diagnose(read_evidence(files))


@pytest.mark.parametrize("path", cases(), ids=lambda p: p.stem)
def test_each_case_is_a_sourced_real_report(path):
    case = load(path)
    assert case["source"].startswith("https://github.com/"), case["source"]
    assert case["category"] in CATEGORIES and case["category"] != "unknown"
    assert all(isinstance(r, int) for r in case["culprits"])
    assert case["resolution"].strip() and case["files"]
    assert all(entry["text"].strip() for entry in case["files"])


def test_the_corpus_is_diagnosed_as_its_threads_resolved_it(tmp_path):
    paths = cases()
    assert len(paths) >= 40
    per_category: dict[str, list[int]] = {}
    wrong, culprit_missed = [], []
    for path in paths:
        case, found = diagnose_case(path, tmp_path)
        right = found.category == case["category"]
        per_category.setdefault(case["category"], [0, 0])
        per_category[case["category"]][0] += right
        per_category[case["category"]][1] += 1
        if not right:
            wrong.append(f"{path.stem}: {case['category']} diagnosed as {found.category} ({found.why[:160]})")
        elif not set(case["culprits"]) <= set(found.culprit_ranks):
            culprit_missed.append(f"{path.stem}: culprits {case['culprits']}, diagnosed {list(found.culprit_ranks)}")
    total = sum(r for r, _ in per_category.values())
    print(f"\nhang corpus: {total}/{len(paths)} categories right ({100 * total / len(paths):.0f}%)")
    for category, (right, count) in sorted(per_category.items()):
        print(f"  {category:22s} {right}/{count}")
    for line in wrong + culprit_missed:
        print("  " + line)
    assert total / len(paths) >= MIN_ACCURACY, "\n".join(wrong)
    assert not culprit_missed, "\n".join(culprit_missed)
