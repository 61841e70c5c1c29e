"""How many landmarks KernelRidge's solver="nystrom" needs, against the effective dimension that
``n_components="auto"`` reads (issue 39; ``kernelkit/estimators/_ridge_auto.py``).

For each case: kernelkit.KernelRidge(solver="nystrom") at every M of ``--m-grid`` (at most n),
its test RMSE and fit time; the cheapest M whose test RMSE is within 1% of the best (the
plateau); the estimate of d_eff(alpha) = tr(K (K + alpha I)^-1) from a uniform subsample of
``--subsample`` rows (:func:`~kernelkit.estimators._ridge_auto.effective_dimension`); the M the
"auto" rule picks from it and the test RMSE of the default fit (``n_components="auto"``).

Cases (``--cases``):

- ``friedman``: benchmarks/kernel_ridge.py's data (make_friedman1, d = 20, noise 1), rbf with
  gamma = 0.1, alpha = 1e-6 n (that benchmark's); ``friedman_noise``: the same with alpha = 1,
  the noise variance (the GP's choice).
- the zoo's sets (benchmarks/zoo_data.py; the real ones and ``ridge``, ``spatial2d``): the
  case's kernel with its hyperparameters fitted by scikit-learn's GaussianProcessRegressor on
  ``--gp-rows`` training rows; alpha = the fitted WhiteKernel noise level (KernelRidge ignores
  the WhiteKernel, as scikit-learn's does).

Part ``large`` (no fit): the estimate and the rule's M on friedman at ``--large-n`` (1e6), the
data of ``benchmarks/kernel_ridge.py --parts defaults``, which times the default against manual
M on the GPU::

    python benchmarks/krr_auto_m.py --n 10000 --m-grid 250,375,500,1000,2000,4000 \
        --out benchmarks/results/krr-auto-m-cpu.json
    python benchmarks/krr_auto_m.py --device cuda --n 100000 --m-grid 1000,2000,5000,10000,20000
    python benchmarks/kernel_ridge.py --parts defaults --sizes 1000000 --repeats 1

``--quick``: small n and grid, proves the script runs.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import log, now, versions, write_json_atomic  # noqa: E402

FRIEDMAN = ("friedman", "friedman_noise")
ZOO = ("co2", "quakes", "concrete", "diabetes", "txhousing", "cps1988", "diamonds", "flights",
       "ridge", "spatial2d")


def _zoo():
    import zoo_data

    return zoo_data


def friedman(n, n_test=5000, seed=0):
    from sklearn.datasets import make_friedman1

    X, y = make_friedman1(n, n_features=20, noise=1.0, random_state=seed)
    Xt, yt = make_friedman1(n_test, n_features=20, noise=1.0, random_state=seed + 1000)
    return X, y, Xt, yt


def load(name, n, gp_rows):
    """``(X, y, X_test, y_test, kernel, alpha, note)`` of case ``name`` at (at most) n rows."""
    if name in FRIEDMAN:
        X, y, Xt, yt = friedman(n)
        alpha = 1e-6 * n if name == "friedman" else 1.0
        return X, y, Xt, yt, "rbf", alpha, "rbf gamma=0.1"
    from sklearn.base import clone
    from sklearn.gaussian_process import GaussianProcessRegressor

    case = _zoo().CASES[name]
    rows = case.full_n if case.kind == "real" else n
    X, y, Xt, yt = case.load(min(n, rows))
    fit_rows = np.random.default_rng(0).permutation(len(y))[:gp_rows]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bounds reached: the fitted kernel is still the GP's
        gp = GaussianProcessRegressor(clone(case.kernel), random_state=0).fit(X[fit_rows],
                                                                            y[fit_rows])
    kernel = gp.kernel_
    noise = [p for name_, p in kernel.get_params().items() if name_.endswith("noise_level")]
    return X, y, Xt, yt, kernel, float(noise[0]), str(kernel)


def rmse(pred, y):
    return float(np.sqrt(np.mean((np.asarray(pred) - y) ** 2)))


def fit(X, y, Xt, yt, kernel, alpha, m, device, tol):
    from kernelkit import KernelRidge

    kw = dict(gamma=0.1) if kernel == "rbf" else {}
    model = KernelRidge(alpha=alpha, kernel=kernel, solver="nystrom", n_components=m, tol=tol,
                        device=device, random_state=0, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        model.fit(X, y)
        seconds = time.perf_counter() - t
    return dict(M=int(model.n_components_), fit_s=seconds, n_iter=int(model.n_iter_),
                test_rmse=rmse(model.predict(Xt), yt))


def estimate(X, kernel, alpha, device, size, n=None):
    """(d_eff estimate, the rule's M, seconds) on X's rows."""
    from kernelkit import KernelRidge
    from kernelkit.estimators import _ridge_auto

    kw = dict(gamma=0.1) if kernel == "rbf" else {}
    model = KernelRidge(alpha=alpha, kernel=kernel, device=device, **kw)
    op = model._operator(model._kernel(X.shape[1]), X, device)
    t = time.perf_counter()
    d_eff = _ridge_auto.effective_dimension(op, op.exact_data(X), alpha,
                                            np.random.RandomState(0), size=size)
    seconds = time.perf_counter() - t
    return d_eff, _ridge_auto.nystrom_components(d_eff, len(X)), seconds


def run_case(name, args, save, rows):
    X, y, Xt, yt, kernel, alpha, note = load(name, args.n, args.gp_rows)
    n = len(y)
    d_eff, rule_m, est_s = estimate(X, kernel, alpha, args.device, args.subsample)
    row = dict(case=name, n=n, d=X.shape[1], n_test=len(yt), kernel=note, alpha=alpha,
               d_eff_estimate=d_eff, subsample=min(n, args.subsample), estimate_s=est_s,
               rule_M=rule_m, grid=[])
    rows.append(row)
    log(f"{name}: n={n}, alpha={alpha:.3g}, d_eff ~ {d_eff:.1f} ({est_s:.2f} s), rule M "
        f"{rule_m}")
    grid = sorted({m for m in args.m_grid if m < n} | ({n} if n <= max(args.m_grid) else set()))
    for m in grid:
        row["grid"].append(fit(X, y, Xt, yt, kernel, alpha, m, args.device, args.tol))
        log(row["grid"][-1])
        save()
    best = min(g["test_rmse"] for g in row["grid"])
    plateau = min(g["M"] for g in row["grid"] if g["test_rmse"] <= 1.01 * best)
    row.update(best_rmse=best, plateau_M=plateau, plateau_M_over_d_eff=plateau / max(d_eff, 1))
    default = fit(X, y, Xt, yt, kernel, alpha, "auto", args.device, args.tol)
    row.update(default=default, default_over_best=default["test_rmse"] / best)
    log(f"{name}: plateau M {plateau} (best RMSE {best:.4f}); default M {default['M']}: RMSE "
        f"{default['test_rmse']:.4f} = {row['default_over_best']:.4f} x best")
    save()


def run_large(args, save, rows):
    X = friedman(args.large_n, n_test=1)[0]
    for alpha, label in ((1e-6 * args.large_n, "friedman"), (1.0, "friedman_noise")):
        d_eff, rule_m, est_s = estimate(X, "rbf", alpha, args.device, args.subsample)
        rows.append(dict(case=label, part="large", n=args.large_n, alpha=alpha,
                         d_eff_estimate=d_eff, subsample=args.subsample, estimate_s=est_s,
                         rule_M=rule_m))
        log(rows[-1])
        save()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ints = lambda s: [int(float(v)) for v in s.split(",") if v]  # noqa: E731
    p.add_argument("--cases", default=",".join(FRIEDMAN + ZOO))
    p.add_argument("--n", type=int, default=20_000, help="training rows (at most the set's)")
    p.add_argument("--m-grid", type=ints, default=[250, 500, 1000, 2000, 4000, 8000])
    p.add_argument("--subsample", type=int, default=None,
                   help="rows of the d_eff estimate (default: _ridge_auto.SUBSAMPLE)")
    p.add_argument("--gp-rows", type=int, default=1000, help="rows the GP hyperparameters see")
    p.add_argument("--tol", type=float, default=1e-6)
    p.add_argument("--large-n", type=int, default=1_000_000)
    p.add_argument("--no-large", action="store_true", help="skip the n = --large-n estimate")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--quick", action="store_true", help="small sizes: proves the script runs")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    from kernelkit.estimators import _ridge_auto

    args.subsample = args.subsample or _ridge_auto.SUBSAMPLE
    if args.quick:
        args.n, args.m_grid, args.gp_rows, args.large_n = 1000, [100, 200, 400], 200, 20_000
        args.cases = "friedman,diabetes"
    cases = args.cases.split(",")
    unknown = set(cases) - set(FRIEDMAN + ZOO)
    if unknown:
        p.error(f"unknown cases {sorted(unknown)}")
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   f"krr-auto-m-{'quick-' if args.quick else ''}"
                                   f"{args.device}.json")
    info = dict(benchmark="krr_auto_m", date=now(), args=vars(args), versions=versions(),
                rule=dict(factor=_ridge_auto.FACTOR, m_min=_ridge_auto.M_MIN,
                          subsample=_ridge_auto.SUBSAMPLE))
    rows = []

    def save():
        write_json_atomic(out, dict(info, rows=rows))

    if not args.no_large:
        run_large(args, save, rows)
    for name in cases:
        run_case(name, args, save, rows)
    save()
    print(f"JSON: {out}")
    for r in rows:
        extra = (f", plateau M {r['plateau_M']} ({r['plateau_M_over_d_eff']:.2f} d_eff), default "
                 f"M {r['default']['M']} at {r['default_over_best']:.4f} x best"
                 if "plateau_M" in r else "")
        print(f"{r['case']:<16} n={r['n']:>8} d_eff~{r['d_eff_estimate']:9.1f} rule M "
              f"{r['rule_M']:>6}{extra}")


if __name__ == "__main__":
    main()
