"""The layout rules of docs/layout.md, checked on the source: no import circle inside the package
(imports inside functions count: they only hide a circle), no function with more than 12
parameters, scripts that import the installed package only; and every test module with exactness
tests in the list a GPU run collects."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pmi_decode"
SCRIPT_DIRS = ("eval", "training", "benchmarks")
MAX_PARAMETERS = 12


def _module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {_module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def _imported(path: Path, name: str, known: set[str]) -> set[str]:
    """The package modules ``path`` imports anywhere in its text (relative imports resolved; for
    ``from X import Y`` the module ``X.Y`` when it is one, else ``X``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                target = f"{source}.{alias.name}"
                if target in known:
                    found.add(target)
                elif source in known:
                    found.add(source)
    return found - {name}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    modules = _modules(package)
    known = set(modules)
    return {name: _imported(path, name, known) for name, path in modules.items()}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), or a module importing itself."""
    index, low, on_stack, stack, circles = {}, {}, set(), [], []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_the_checker_finds_a_circle_and_a_chain(tmp_path):
    pkg = tmp_path / "pmi_decode"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .sub import b\n")  # inside a function: still counts
    (pkg / "sub" / "b.py").write_text("from ..c import x\n")
    (pkg / "c.py").write_text("import pmi_decode.a\n")
    (pkg / "d.py").write_text("from . import c\n")
    graph = import_graph(pkg)
    assert graph["pmi_decode.a"] == {"pmi_decode.sub.b"}
    assert graph["pmi_decode.d"] == {"pmi_decode.c"}
    assert import_circles(graph) == [["pmi_decode.a", "pmi_decode.c", "pmi_decode.sub.b"]]


def test_no_import_circle_inside_the_package():
    circles = import_circles(import_graph())
    assert not circles, "import circles: " + "; ".join(" <-> ".join(c) for c in circles)


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
    positional = a.posonlyargs + a.args
    if positional and positional[0].arg in ("self", "cls"):
        count -= 1
    return count


def long_signatures(package: Path = PACKAGE) -> list[str]:
    found = []
    for name, path in _modules(package).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _parameters(node) > MAX_PARAMETERS:
                found.append(f"{name}.{node.name} ({_parameters(node)} parameters, line {node.lineno})")
    return found


def test_the_parameter_count_counts_keywords_and_skips_self():
    fn = ast.parse("def f(self, a, /, b, *args, c, d=1, **kw): pass").body[0]
    assert _parameters(fn) == 6


def test_no_function_takes_more_than_twelve_parameters():
    assert not long_signatures(), "options belong in DecodeConfig or a metric's config object: " + ", ".join(
        long_signatures())


def _scripts() -> list[Path]:
    return sorted(p for d in SCRIPT_DIRS for p in (ROOT / d).rglob("*.py"))


def script_problems(path: Path) -> list[str]:
    """What makes a script more than a thin entry point: editing sys.path, importing tests or another script."""
    problems = []
    local = {p.stem for d in SCRIPT_DIRS for p in (ROOT / d).rglob("*.py")} | {"tests", "training", "eval",
                                                                             "benchmarks", "conftest"}
    tests = {p.stem for p in (ROOT / "tests").glob("*.py")}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", None) == "sys":
            problems.append(f"line {node.lineno}: touches sys.path")
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        elif isinstance(node, ast.ImportFrom):
            problems.append(f"line {node.lineno}: relative import")
        for name in names:
            head = name.split(".")[0]
            if head in local or head in tests:
                problems.append(f"line {node.lineno}: imports {name}")
    return problems


def test_the_script_check_sees_a_path_edit_and_a_script_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nsys.path.insert(0, '..')\nimport fit_faith_score\nfrom tiny_models import x\n")
    found = " ".join(script_problems(bad))
    assert "sys.path" in found and "fit_faith_score" in found and "tiny_models" in found


@pytest.mark.parametrize("path", _scripts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_scripts_import_only_the_installed_package(path):
    assert not script_problems(path), f"{path.relative_to(ROOT)}: " + "; ".join(script_problems(path))


ENTRY_POINTS = sorted([*(ROOT / "eval").glob("*.py"), *(ROOT / "training").glob("*.py")])


@pytest.mark.parametrize("path", ENTRY_POINTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_entry_points_report_errors_in_one_line(path):
    """eval/ and training/ entry points run main through pmi_decode.config.run_script, so a bad
    config or file is one line on stderr, as with pmi-decode, not a traceback."""
    text = path.read_text(encoding="utf-8")
    if '__name__ == "__main__"' in text:
        assert "run_script(main)" in text.split('__name__ == "__main__"', 1)[1], path.relative_to(ROOT)


def test_run_script_prints_one_line_and_sets_the_exit_status(capsys, monkeypatch):
    from pmi_decode.config import run_script

    def bad(argv=None):
        raise ValueError("holdout: unknown key 'sed'")

    assert run_script(bad) == 1 and "error: holdout: unknown key 'sed'" in capsys.readouterr().err
    assert run_script(lambda argv=None: {"done": 1}) == 0 and run_script(lambda argv=None: 3) == 3
    monkeypatch.setenv("PMI_DECODE_TRACEBACK", "1")
    with pytest.raises(ValueError):
        run_script(bad)


def test_the_public_api_names_only_public_things():
    import pmi_decode

    assert pmi_decode.__all__ == sorted(set(pmi_decode.__all__), key=pmi_decode.__all__.index)
    for name in pmi_decode.__all__:
        assert not name.startswith("_"), name
        assert hasattr(pmi_decode, name), name


def modules_with_exactness_tests(test_dir: Path) -> set[str]:
    """The test modules in ``test_dir`` that mark a test ``pytest.mark.exactness`` (decorator or
    ``pytestmark``): on a GPU only conftest's EXACTNESS_MODULES are collected, so one missing
    there would have its exactness tests skipped there without a word."""
    found = set()
    for path in sorted(test_dir.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr == "exactness"
                    and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"):
                found.add(path.name)
                break
    return found


def test_the_exactness_check_sees_a_marked_module(tmp_path):
    (tmp_path / "test_marked.py").write_text("import pytest\n\n\n@pytest.mark.exactness\ndef test_x():\n    pass\n")
    (tmp_path / "test_module_marked.py").write_text("import pytest\npytestmark = pytest.mark.exactness\n")
    (tmp_path / "test_unmarked.py").write_text("import pytest\n\n\n@pytest.mark.slow\ndef test_x():\n    pass\n")
    assert modules_with_exactness_tests(tmp_path) == {"test_marked.py", "test_module_marked.py"}


def test_every_module_with_exactness_tests_runs_on_a_gpu():
    import conftest

    missing = modules_with_exactness_tests(ROOT / "tests") - conftest.EXACTNESS_MODULES
    assert not missing, f"add {sorted(missing)} to EXACTNESS_MODULES in tests/conftest.py"


def device_type_tuples(package: Path = PACKAGE) -> set[tuple[str, str]]:
    """(module, attribute) of every module-level public ``*_ON`` tuple of strings in ``package``:
    the device types a speed-up is on for, which ``pmi_decode.device_choices`` must list."""
    found = set()
    for name, path in _modules(package).items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
            elif isinstance(node, ast.AnnAssign):
                target = node.target
            else:
                continue
            if (isinstance(target, ast.Name) and target.id.endswith("_ON") and not target.id.startswith("_")
                    and isinstance(node.value, ast.Tuple)
                    and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.value.elts)):
                found.add((name, target.id))
    return found


def test_the_device_type_check_sees_plain_and_annotated_tuples(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text('FAST_ON = ("cpu",)\nSLOW_ON: tuple[str, ...] = ()\n_PRIVATE_ON = ("x",)\n'
                                  'NUMBERS_ON = (1, 2)\nOTHER = ("cpu",)\n')
    assert device_type_tuples(package) == {("pkg.a", "FAST_ON"), ("pkg.a", "SLOW_ON")}


def test_every_device_choice_is_in_the_one_table():
    from pmi_decode.device_choices import BY_DEVICE

    listed = {(module.__name__, attribute) for module, attribute in BY_DEVICE.values()}
    missing = device_type_tuples() - listed
    assert not missing, f"list {sorted(missing)} in pmi_decode/device_choices.py's BY_DEVICE"
    for module, attribute in BY_DEVICE.values():
        value = getattr(module, attribute)
        assert isinstance(value, tuple) and all(isinstance(v, str) for v in value), (module.__name__, attribute)


def test_every_device_switch_is_documented_for_the_test_suite():
    import conftest
    from pmi_decode.device_choices import BY_DEVICE

    text = (ROOT / "docs" / "testing.md").read_text()
    assert conftest.device_switch("shared_positions") == "PMI_DECODE_TEST_SHARED_POSITIONS"
    missing = [conftest.device_switch(name) for name in BY_DEVICE if conftest.device_switch(name) not in text]
    assert not missing, f"docs/testing.md does not name {missing}"
