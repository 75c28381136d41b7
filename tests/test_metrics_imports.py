"""No import circle among the metric modules and the scoring workflow, imports inside functions
included: every ``import`` and ``from ... import`` of each file of the package, relative ones
resolved, makes the graph (tests/test_layout.py builds it); a strongly connected component of more
than one module is a circle."""

import test_layout as layout

IN_SCOPE = ("pmi_decode.metrics", "pmi_decode.batch.scoring")


def test_no_import_circle_touches_the_metrics_or_scoring():
    graph = layout.import_graph()
    touching = [sorted(c) for c in layout.import_circles(graph) if any(m.startswith(IN_SCOPE) for m in c)]
    assert touching == []
    assert "pmi_decode.metrics.faith_score" in graph and "pmi_decode.batch.scoring" in graph


def test_the_shared_leaves_import_nothing_from_the_package():
    graph = layout.import_graph()
    for leaf in ("registry", "text", "metric_config"):
        assert graph[f"pmi_decode.metrics.{leaf}"] == set(), leaf
    assert graph["pmi_decode.metrics.sentence_encoder"] <= {"pmi_decode.metrics.text", "pmi_decode.models"}
