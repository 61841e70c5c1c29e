"""The "auto" preconditioner rank adapted to the costs met at the first evaluation
(kernelkit.estimators.gp._rank)."""

import logging

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.gaussian_process.kernels import WhiteKernel as W

import kernelkit as kk
from kernelkit.estimators.gp import _lml, _rank


def _model_cost(k, steps, rank, step_s, a, b):
    return steps * rank / k * step_s + a + b * k**2


@pytest.mark.parametrize("steps, step_s", [(120, 0.047), (40, 0.01), (300, 0.2)])
def test_cheapest_rank_minimises_the_cost_model_over_the_allowed_ranks(steps, step_s):
    """Expensive CG steps: the rank that minimises s0 k0 / k tau + a + b k^2 over multiples of
    256 up to the ceiling (found here by brute force from a and b), a larger one than k0."""
    rank, ceiling, a, b = 1024, 8192, 0.02, 0.3 / 4096**2
    pre_times = ((rank, a + b * rank**2), (2 * rank, a + b * (2 * rank)**2))
    chosen = _rank.cheapest_rank(steps, rank, ceiling, step_s, pre_times)
    allowed = range(1280, ceiling + 1, 256)
    best = min(allowed, key=lambda k: _model_cost(k, steps, rank, step_s, a, b))
    assert chosen == best > rank


@pytest.mark.parametrize("steps, step_s, ceiling", [
    (5, 0.001, 8192),    # cheap steps: a larger rank costs more than it saves
    (120, 0.047, 1024),  # no room above the rank
    (1, 0.047, 8192),    # one step: nothing to save
])
def test_cheapest_rank_keeps_the_rank_where_nothing_is_saved(steps, step_s, ceiling):
    pre_times = ((1024, 0.03), (2048, 0.1))
    assert _rank.cheapest_rank(steps, 1024, ceiling, step_s, pre_times) == 1024


def test_cheapest_rank_keeps_the_rank_below_the_minimum_saving():
    """The best rank saves less than MIN_SAVING of the modelled cost: no change (a change
    costs an evaluation more)."""
    rank, a, b = 1024, 0.0, 1e-8
    pre_times = ((rank, b * rank**2), (2 * rank, b * (2 * rank)**2))
    step_s = 0.002
    steps = 10
    costs = {k: _model_cost(k, steps, rank, step_s, a, b) for k in range(1024, 8193, 256)}
    assert min(costs.values()) > (1 - _rank.MIN_SAVING) * costs[rank]  # the premise
    assert _rank.cheapest_rank(steps, rank, 8192, step_s, pre_times) == rank


def test_cheapest_rank_falls_back_on_the_first_timing_when_the_second_is_noise():
    """The larger rank timed no slower (noise): b from k0 alone, b = t0 / k0^2, a = 0."""
    steps, step_s, rank = 120, 0.047, 1024
    t0 = 0.05
    chosen = _rank.cheapest_rank(steps, rank, 8192, step_s, ((rank, t0), (2048, 0.04)))
    best = min(range(1280, 8193, 256),
               key=lambda k: _model_cost(k, steps, rank, step_s, 0.0, t0 / rank**2))
    assert chosen == best


def _records(caplog, event):
    return [r.kernelkit for r in caplog.records
            if getattr(r, "kernelkit", {}).get("event") == event]


def test_fit_adapts_the_rank_and_repeats_the_first_evaluation_on_the_new_draws(caplog,
                                                                               monkeypatch):
    """n = 1100, the first rank 66 (AUTO_RANK lowered to 64: 2 sqrt(n) then; CPU, iterative
    path). With CG steps timed as expensive and the preconditioner as cheap, the fit moves to
    the ceiling (n) after its first evaluation; the optimiser's first value is the new draws' (log_marginal_likelihood after
    the fit, on the fit's draws, gives it again), and the fit's own value too."""
    monkeypatch.setattr(_lml, "AUTO_RANK", 64)
    monkeypatch.setattr(_rank, "step_seconds", lambda op, theta, columns: 1.0)
    monkeypatch.setattr(_rank, "preconditioner_seconds",
                        lambda op, theta, probes: 1e-9 * probes.landmarks.numel() ** 2)
    rng = np.random.default_rng(0)
    X = rng.uniform(-2.0, 2.0, (1100, 2))
    y = np.sin(2.0 * X[:, 0]) + 0.1 * rng.standard_normal(1100)
    kernel = C(1.0) * kk.RBF([1.0, 1.0]) + W(0.05)
    caplog.set_level(logging.INFO, logger="kernelkit")
    gp = kk.GaussianProcessRegressor(kernel, device="cpu", exact_max_n=0, random_state=0,
                                     optimizer_max_iter=3).fit(X, y)
    decision, = _records(caplog, "preconditioner_rank")
    assert (decision["rank"], decision["chosen"]) == (66, 1100) and decision["cg_steps"] > 1
    assert gp._rank[1] == 1100
    first = _records(caplog, "evaluation")[0]
    np.testing.assert_allclose(first["theta"], kernel.theta, rtol=0, atol=0)
    again = gp.log_marginal_likelihood(np.asarray(first["theta"]))
    # the same draws and theta give the same estimate up to CG's run-to-run round-off
    np.testing.assert_allclose(first["lml"], again, rtol=1e-9)
    np.testing.assert_allclose(gp.log_marginal_likelihood_value_,
                               gp.log_marginal_likelihood(gp.kernel_.theta), rtol=1e-9)


def test_fit_keeps_the_rank_when_steps_are_cheap(caplog, monkeypatch):
    monkeypatch.setattr(_lml, "AUTO_RANK", 64)
    monkeypatch.setattr(_rank, "step_seconds", lambda op, theta, columns: 1e-9)
    monkeypatch.setattr(_rank, "preconditioner_seconds",
                        lambda op, theta, probes: 1e-3 * probes.landmarks.numel())
    rng = np.random.default_rng(1)
    X = rng.uniform(-2.0, 2.0, (1100, 2))
    y = np.sin(2.0 * X[:, 0]) + 0.1 * rng.standard_normal(1100)
    caplog.set_level(logging.INFO, logger="kernelkit")
    gp = kk.GaussianProcessRegressor(C(1.0) * kk.RBF([1.0, 1.0]) + W(0.05), device="cpu",
                                     exact_max_n=0, random_state=0, optimizer_max_iter=2)
    gp.fit(X, y)
    decision, = _records(caplog, "preconditioner_rank")
    assert decision["chosen"] == decision["rank"] == 66 == gp._rank[1]


def test_an_explicit_rank_is_never_adapted(caplog, monkeypatch):
    monkeypatch.setattr(_rank, "step_seconds", lambda op, theta, columns: 1.0)
    monkeypatch.setattr(_rank, "preconditioner_seconds", lambda op, theta, probes: 1e-9)
    rng = np.random.default_rng(2)
    X = rng.uniform(-2.0, 2.0, (300, 2))
    y = np.sin(2.0 * X[:, 0]) + 0.1 * rng.standard_normal(300)
    caplog.set_level(logging.INFO, logger="kernelkit")
    gp = kk.GaussianProcessRegressor(C(1.0) * kk.RBF([1.0, 1.0]) + W(0.05), device="cpu",
                                     exact_max_n=0, random_state=0, optimizer_max_iter=2,
                                     preconditioner_rank=50).fit(X, y)
    assert _records(caplog, "preconditioner_rank") == [] and gp._rank[1] == 50
