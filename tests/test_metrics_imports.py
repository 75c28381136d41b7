"""No import circle among the metric modules and the scoring workflow, imports inside functions
included: every ``import`` and ``from ... import`` of each file of the package, relative ones
resolved, makes the graph; a strongly connected component of more than one module is a circle."""

import ast
from pathlib import Path

import pmi_decode

PACKAGE = Path(pmi_decode.__file__).parent
IN_SCOPE = ("pmi_decode.metrics", "pmi_decode.batch.scoring")


def package_modules(root: Path = PACKAGE) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, whether it is a package's ``__init__``) for every module under ``root``."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = ("pmi_decode",) + path.relative_to(root).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return modules


def imported_names(source: str, module: str, is_package: bool) -> set[str]:
    """Every module name an import anywhere in ``source`` may refer to (``from a import b``
    gives ``a`` and ``a.b``), relative imports resolved against ``module``."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module
            names.add(origin)
            names.update(f"{origin}.{alias.name}" for alias in node.names)
    return names


def import_graph(modules: dict[str, tuple[Path, bool]]) -> dict[str, set[str]]:
    graph = {}
    for name, (path, is_package) in modules.items():
        graph[name] = {m for m in imported_names(path.read_text(encoding="utf-8"), name, is_package)
                       if m in modules and m != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one node (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_checker_sees_relative_imports_inside_functions_and_finds_a_circle():
    source = "def f():\n    from ..batch.scoring import register_metric\n    from . import overlap\n"
    assert imported_names(source, "pmi_decode.metrics.reader", False) >= {
        "pmi_decode.batch.scoring", "pmi_decode.batch.scoring.register_metric", "pmi_decode.metrics.overlap"}
    assert "pmi_decode.metrics.x" in imported_names("from .x import y", "pmi_decode.metrics", True)
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [{"a", "b", "c"}]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_touches_the_metrics_or_scoring():
    graph = import_graph(package_modules())
    touching = [sorted(c) for c in circles(graph) if any(m.startswith(IN_SCOPE) for m in c)]
    assert touching == []
    assert "pmi_decode.metrics.faith_score" in graph and "pmi_decode.batch.scoring" in graph


def test_the_shared_leaves_import_nothing_from_the_package():
    graph = import_graph(package_modules())
    for leaf in ("registry", "text", "metric_config"):
        assert graph[f"pmi_decode.metrics.{leaf}"] == set(), leaf
    assert graph["pmi_decode.metrics.sentence_encoder"] <= {"pmi_decode.metrics.text", "pmi_decode.models"}
