"""Imports run one way: the core never imports engines; model/ and realhw/ never import each other."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "nicksim"
CORE = {"errors", "params", "xml", "hardware", "fill", "topo", "catalog", "cluster", "paths", "trees", "search",
        "connect", "constants", "collnet", "tuning", "calls", "choose", "plan", "plan_pat", "plan_p2p",
        "plan_collnet", "transports", "job"}
ENGINE_PARTS = {"model", "realhw", "engines", "cli", "dashboard"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = path.relative_to(PACKAGE).parts[:-1]
                parts = list(base[: len(base) - node.level + 1]) + (node.module.split(".") if node.module else [])
                found.add(".".join(parts))
            elif node.module and node.module.startswith("nicksim"):
                found.add(node.module.removeprefix("nicksim").lstrip("."))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("nicksim"):
                    found.add(alias.name.removeprefix("nicksim").lstrip("."))
    return found


def test_core_never_imports_engines():
    checked = 0
    for path in PACKAGE.rglob("*.py"):
        top = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        if top not in CORE:
            continue
        checked += 1
        for module in imported_modules(path):
            assert module.split(".")[0] not in ENGINE_PARTS, f"{path.name} imports {module}"
    assert checked >= len(CORE)


def test_model_and_realhw_stay_apart():
    for a, b in (("model", "realhw"), ("realhw", "model")):
        for path in (PACKAGE / a).rglob("*.py") if (PACKAGE / a).is_dir() else []:
            assert not any(m.split(".")[0] == b for m in imported_modules(path)), f"{path} imports {b}"


def test_modules_declare_all():
    for path in PACKAGE.rglob("*.py"):
        if path.name in ("__main__.py",):
            continue
        tree = ast.parse(path.read_text())
        names = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                 if isinstance(t, ast.Name)}
        assert "__all__" in names, f"{path.relative_to(PACKAGE)} has no __all__"
