"""The processor's modules: no import circle through the decoding core, a leaf for the argument
checks, and the names ``pmi_decode.processor`` exported before its split still importable from there."""

import importlib
import pickle
from pathlib import Path

import pytest
import test_layout as layout

PACKAGE = Path(__file__).resolve().parent.parent / "pmi_decode"

# The decoding core: the processor and the one-call entry points built on it.
CORE = ("pmi_decode.processor", "pmi_decode.adaptive", "pmi_decode.generation", "pmi_decode.custom_generate")


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    return layout.import_graph(package_dir)


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph[name])
    return seen


def circles_from(graph: dict[str, set[str]], start: str) -> list[tuple[str, str]]:
    """Pairs (module, module it imports) reachable from ``start`` that import each other,
    directly or through other modules."""
    return sorted((name, other) for name in reachable(graph, start) for other in graph[name]
                  if name in reachable(graph, other))


def test_the_circle_check_sees_imports_inside_functions(tmp_path):
    """The circle the split removed went through an import inside a function
    (adaptive.resolve_alpha importing the processor): the check must catch that shape."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "leaf.py").write_text("import math\n")
    (package / "rules.py").write_text("from .leaf import math\n\ndef resolve():\n    from .proc import check\n")
    (package / "proc.py").write_text("from . import rules\n")
    graph = import_graph(package)
    assert graph["pkg.rules"] == {"pkg.leaf", "pkg.proc"} and graph["pkg.proc"] == {"pkg.rules"}
    assert circles_from(graph, "pkg.proc") == [("pkg.proc", "pkg.rules"), ("pkg.rules", "pkg.proc")]
    (package / "rules.py").write_text("from .leaf import math\n")
    assert circles_from(import_graph(package), "pkg.proc") == []


@pytest.mark.parametrize("start", CORE)
def test_no_import_circle_through_the_decoding_core(start):
    assert circles_from(import_graph(PACKAGE), start) == []


def test_validation_is_a_leaf():
    assert import_graph(PACKAGE)["pmi_decode.validation"] == set()


def test_adaptive_and_the_processor_share_the_checks_without_each_other():
    graph = import_graph(PACKAGE)
    assert "pmi_decode.processor" not in reachable(graph, "pmi_decode.adaptive")
    assert "pmi_decode.validation" in graph["pmi_decode.adaptive"]
    assert "pmi_decode.validation" in graph["pmi_decode.processor"]


# Every name importable from pmi_decode.processor before it was split by role, and its home now.
# The private ones are imported by other modules and benchmarks, or named by pickles.
MOVED = {
    "pmi_scores": "pmi_decode.scores",
    "conditional_end_scores": "pmi_decode.scores",
    "nucleus_mask": "pmi_decode.scores",
    "plausible_mask": "pmi_decode.scores",
    "_NUCLEUS_STAGES": "pmi_decode.scores",
    "validate_alpha_p": "pmi_decode.validation",
    "validate_plausibility": "pmi_decode.validation",
    "prefill": "pmi_decode.model_calls",
    "cache_keyword": "pmi_decode.model_calls",
    "returned_cache": "pmi_decode.model_calls",
    "stack_inputs": "pmi_decode.paired",
    "conditional_half": "pmi_decode.paired",
    "_IdleHook": "pmi_decode.forward_watch",
}


@pytest.mark.parametrize("name", sorted(MOVED))
def test_old_names_still_import_from_the_processor(name):
    processor = importlib.import_module("pmi_decode.processor")
    if name == "_IdleHook":  # named by pickles: no warning on loading one
        assert processor._IdleHook is importlib.import_module(MOVED[name])._IdleHook
        return
    with pytest.warns(DeprecationWarning, match=f"pmi_decode.processor.{name} moved to {MOVED[name]}.{name}"):
        old = getattr(processor, name)
    assert old is getattr(importlib.import_module(MOVED[name]), name)


def test_the_processor_module_exports_only_the_processor():
    processor = importlib.import_module("pmi_decode.processor")
    assert processor.__all__ == ["PMIDecode"]
    assert set(processor.MOVED) == set(MOVED) - {"_IdleHook"}
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        processor.no_such_name


def test_a_model_pickled_before_the_split_still_loads():
    """A model pickled while a processor watched it holds an idle hook, which the pickle names
    by the module it lived in before the split (bytes written by that version)."""
    old_pickle = b"\x80\x02cpmi_decode.processor\n_IdleHook\nq\x00)Rq\x01."
    hook = pickle.loads(old_pickle)
    assert hook(None, (), {}) is None
    from pmi_decode.forward_watch import _IdleHook

    assert type(hook) is _IdleHook
