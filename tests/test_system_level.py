"""Q²'s system-level correlation on synthetic annotated sets where the answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from pmi_decode.metrics.meta_eval import simulate_systems, system_level_correlation


@pytest.fixture(scope="module")
def annotated():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 600)
    return labels, rng


def test_simulated_systems_mix_at_the_requested_rates(annotated):
    labels, _ = annotated
    systems, human, rates = simulate_systems(labels, rates=(0.1, 0.25), n_per_system=40, repetitions=3, seed=1)
    assert len(systems) == 6 and list(rates) == [0.1] * 3 + [0.25] * 3
    for idx, score, rate in zip(systems, human, rates):
        assert len(idx) == 40 == len(set(idx.tolist()))                    # no response twice in a system
        assert labels[idx].mean() == pytest.approx(score) == pytest.approx(1 - rate)
    again = simulate_systems(labels, rates=(0.1, 0.25), n_per_system=40, repetitions=3, seed=1)[0]
    assert all(np.array_equal(a, b) for a, b in zip(systems, again))   # seeded
    other = simulate_systems(labels, rates=(0.1, 0.25), n_per_system=40, repetitions=3, seed=2)[0]
    assert not all(np.array_equal(a, b) for a, b in zip(systems, other))


def test_perfect_metric_is_one_random_is_near_zero(annotated):
    labels, rng = annotated
    result = system_level_correlation(
        {"perfect": labels.astype(float), "inverted": -labels.astype(float), "random": rng.random(labels.size),
         "noisy": labels + rng.normal(0, 1.5, labels.size)},
        labels, n_per_system=60, repetitions=10, n_bootstrap=200, seed=0)
    assert result["perfect"]["spearman"] == pytest.approx(1.0)
    assert (result["perfect"]["ci_low"], result["perfect"]["ci_high"]) == pytest.approx((1.0, 1.0))
    assert result["inverted"]["spearman"] == pytest.approx(-1.0)
    assert abs(result["random"]["spearman"]) < 0.35
    assert result["random"]["ci_low"] < 0 < result["random"]["ci_high"]
    assert 0.2 < result["noisy"]["spearman"] < 1.0 and result["noisy"]["ci_low"] > 0
    assert result["perfect"]["mean_by_rate"]["0.25"] == pytest.approx(0.75)
    assert result["_setup"]["num_systems"] == 50


def test_deterministic_for_a_seed(annotated):
    labels, rng = annotated
    scores = labels + rng.normal(0, 1, labels.size)
    first = system_level_correlation(scores, labels, n_per_system=50, repetitions=4, n_bootstrap=30, seed=3)
    second = system_level_correlation(scores, labels, n_per_system=50, repetitions=4, n_bootstrap=30, seed=3)
    assert first == second
    assert set(first) >= {"spearman", "ci_low", "ci_high", "_setup"}


def test_bad_input_is_a_clear_error(annotated):
    labels, _ = annotated
    with pytest.raises(ValueError, match="use a smaller n_per_system"):
        system_level_correlation(labels.astype(float), labels, n_per_system=5000)
    with pytest.raises(ValueError, match="got 3 scores but 600 labels"):
        system_level_correlation({"m": [0.1, 0.2, 0.3]}, labels)
    with pytest.raises(ValueError, match="NaN"):
        system_level_correlation(np.full(labels.size, np.nan), labels)
    with pytest.raises(ValueError, match="rates"):
        simulate_systems(labels, rates=(1.5,))
    with pytest.raises(ValueError, match="0/1"):
        simulate_systems(np.array([0, 1, 2]))
