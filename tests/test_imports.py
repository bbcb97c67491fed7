"""Imports run one way, package by package: the core's stages each build only on the stages before them;
the core never imports an engine, a study or a format; engines never import each other; the command
line and the dashboard reach the library only through nicksim.api."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "nicksim"
DASHBOARD = PACKAGE / "dashboard"

# The core's stages in pipeline order; each may import itself, the ones before it and BASE.
STAGES = ("constants", "topology", "graph", "tuning", "plan")
BASE = {"errors", "params", "calls", "files"}
CORE = set(STAGES) | BASE | {"job"}
ENGINES = {"model", "realhw"}
FORMATS = {"formats"}
ON_TOP = {"studies", "forensics", "scenarios"}
FACADE = {"engines", "api", "progress"}  # progress: the bar long commands draw, offered by the api
FRONT = {"cli", "__main__", "dashboard"}
EVERY = CORE | ENGINES | FORMATS | ON_TOP | FACADE | FRONT | {"__init__"}


def imported_modules(path: Path, root: Path = PACKAGE) -> set[str]:
    """The nicksim modules a file imports, dotted below the package ('' for the package itself)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = path.relative_to(root).parts[:-1]
                parts = list(base[: len(base) - node.level + 1])
                if node.module:
                    found.add(".".join(parts + node.module.split(".")))
                else:  # from . import api: the names are modules
                    found |= {".".join(parts + [alias.name]) for alias in node.names}
            elif node.module == "nicksim":  # from nicksim import api: the names are modules
                found |= {alias.name for alias in node.names}
            elif node.module and node.module.split(".")[0] == "nicksim":
                found.add(node.module.removeprefix("nicksim").lstrip("."))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "nicksim":
                    found.add(alias.name.removeprefix("nicksim").lstrip("."))
    return found


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, path.relative_to(PACKAGE).parts[0].removesuffix(".py"), {
            m.split(".")[0] for m in imported_modules(path)}


def test_every_module_belongs_to_a_known_part():
    for path, top, _ in _modules():
        assert top in EVERY, f"{path.relative_to(PACKAGE)} is in no part of the pipeline this test knows"


def test_stages_build_only_on_earlier_stages():
    checked = set()
    for path, top, imports in _modules():
        if top not in STAGES:
            continue
        checked.add(top)
        allowed = set(STAGES[: STAGES.index(top) + 1]) | BASE
        if top == "constants":
            allowed = {"constants", "errors"}
        assert imports <= allowed, f"{path.relative_to(PACKAGE)} imports {sorted(imports - allowed)}"
    assert checked == set(STAGES)


def test_base_modules_need_only_constants():
    for path, top, imports in _modules():
        if top in BASE:
            assert imports <= BASE | {"constants"}, f"{path.name} imports {sorted(imports - BASE)}"


def test_core_never_imports_engines_studies_or_formats():
    checked = 0
    for path, top, imports in _modules():
        if top not in CORE:
            continue
        checked += 1
        assert imports <= CORE, f"{path.relative_to(PACKAGE)} imports {sorted(imports - CORE)}"
    assert checked >= 30


def test_formats_sit_on_the_core_alone():
    for path, top, imports in _modules():
        if top in FORMATS:
            assert imports <= CORE | FORMATS, f"{path.relative_to(PACKAGE)} imports {sorted(imports - CORE - FORMATS)}"


def test_engines_never_import_each_other_or_what_sits_on_them():
    for path, top, imports in _modules():
        if top in ENGINES:
            allowed = CORE | FORMATS | {top}
            assert imports <= allowed, f"{path.relative_to(PACKAGE)} imports {sorted(imports - allowed)}"


def test_nothing_below_the_front_imports_it():
    for path, top, imports in _modules():
        if top not in FRONT and top != "api":
            assert not imports & (FRONT | {"api"}), f"{path.relative_to(PACKAGE)} imports {sorted(imports & FRONT)}"


def test_cli_and_dashboard_only_call_the_public_api():
    files = [PACKAGE / "cli.py"] + sorted(DASHBOARD.rglob("*.py"))
    assert len(files) >= 8, "the dashboard's entry script and its pages"
    for path in files:
        imports = {m for m in imported_modules(path) if m.split(".")[0] != "dashboard"}  # its own modules
        assert imports <= {"api", "errors"}, f"{path.name} imports {sorted(imports - {'api', 'errors'})}"


def test_modules_declare_all():
    for path in PACKAGE.rglob("*.py"):
        if path.name in ("__main__.py",):
            continue
        tree = ast.parse(path.read_text())
        names = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                 if isinstance(t, ast.Name)}
        assert "__all__" in names, f"{path.relative_to(PACKAGE)} has no __all__"


def test_the_command_line_does_not_load_matplotlib_until_it_draws():
    # every `nicksim` command pays for what it imports: matplotlib is for pictures only
    import subprocess
    import sys
    code = "import sys, nicksim.cli; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    code = "import sys; from nicksim import api; api.figures; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"
