"""Predictive standard deviation at large n on the GPU (iterative path): time and accuracy.

Issue 17's floor: 10^4 test points at n = 10^5 in <= 2 s on one GPU. Data as ``benchmarks/gp.py``
(d = 8), kernel ``ConstantKernel * RBF(ARD) + WhiteKernel`` at fixed hyperparameters near the
optimum that kernelkit's default fit finds at n = 2e4 (no optimisation: this times prediction).

For each n it records the fit at fixed theta, the predictive mean, the first
``predict(return_std=True)`` (which builds the variance cache) and a second one, how many test
points the cache's bound left to CG, and the largest error of the variance against a reference:
the exact float64 Cholesky path where n <= ``--exact-max-n``, else the same model with
``cg_tol=1e-7`` on ``--n-check`` test points (certified to 1e-7 of the prior variance). Usage::

    python benchmarks/gp_predict_large.py --n 20000 100000 \\
        --out benchmarks/results/gp-predict-large-h200-2026-11-26.json
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _common import log, now, write_json_atomic
from gp import make_data

#: Near kernelkit's optimum at n = 2e4: amplitude 0.802^2, ARD length scales, noise 0.00988.
THETA = np.log([0.802**2, 2.12, 1.62, 1.87, 1.19, 2.02, 1.93, 1.77, 1.91, 0.00988])


def kernel():
    from sklearn.gaussian_process.kernels import ConstantKernel, WhiteKernel

    import kernelkit

    return (ConstantKernel(1.0) * kernelkit.RBF(np.ones(8)) + WhiteKernel(0.05)).clone_with_theta(
        THETA)


def timed(fn):
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def run(n, args):
    import torch

    import kernelkit
    from kernelkit.gp import regressor

    X, y, Xt, _ = make_data(n, args.n_test, 8)
    cg_columns = []
    original = regressor.GaussianProcessRegressor._solve_test_columns

    def counted(self, op, params, Z, settings, keep):
        cg_columns.append(int(Z.shape[0]))
        return original(self, op, params, Z, settings, keep)

    regressor.GaussianProcessRegressor._solve_test_columns = counted
    try:
        gp = kernelkit.GaussianProcessRegressor(kernel(), optimizer=None, random_state=0)
        row = dict(n=n, n_test=args.n_test)
        row["fit_s"], _ = timed(lambda: gp.fit(X, y))
        row["predict_mean_s"], _ = timed(lambda: gp.predict(Xt))
        row["predict_std_first_s"], (_, std) = timed(lambda: gp.predict(Xt, return_std=True))
        row["cg_columns_first"] = sum(cg_columns)
        row["predict_std_second_s"], _ = timed(lambda: gp.predict(Xt, return_std=True))
        row["cache_rank"] = gp._variance_cache.rank
        del gp
        torch.cuda.empty_cache()
        check = slice(0, min(args.n_check, args.n_test))
        if n <= args.exact_max_n:
            ref = kernelkit.GaussianProcessRegressor(kernel(), optimizer=None, exact_max_n=n)
            row["reference"] = "exact float64 Cholesky"
        else:
            ref = kernelkit.GaussianProcessRegressor(kernel(), optimizer=None, cg_tol=1e-7,
                                                     random_state=0)
            row["reference"] = "cg_tol=1e-7"
        cg_columns.clear()
        ref.fit(X, y)
        _, ref_std = ref.predict(Xt[check], return_std=True)
        row["reference_cg_columns"] = sum(cg_columns)
        prior = float(np.exp(THETA[0]) + np.exp(THETA[-1]))
        err = np.abs(std[check] ** 2 - ref_std**2)
        row.update(max_var_error_over_prior=float(err.max() / prior),
                   median_var_error_over_prior=float(np.median(err) / prior),
                   max_std_rel_error=float(np.max(np.abs(std[check] - ref_std) / ref_std)),
                   n_checked=int(len(ref_std)))
        del ref
        torch.cuda.empty_cache()
        return row
    finally:
        regressor.GaussianProcessRegressor._solve_test_columns = original


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[20_000, 100_000])
    p.add_argument("--n-test", type=int, default=10_000)
    p.add_argument("--n-check", type=int, default=500)
    p.add_argument("--exact-max-n", type=int, default=30_000)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/gp_predict_large.py needs a CUDA GPU")
    record = dict(benchmark="gp_predict_large", started=now(),
                  device_name=torch.cuda.get_device_name(0),
                  versions=dict(torch=torch.__version__), args=vars(args), results=[])
    for n in args.n:
        log(f"n={n} ...")
        record["results"].append(run(n, args))
        log("  ", record["results"][-1])
        write_json_atomic(args.out, record)
    record["finished"] = now()
    write_json_atomic(args.out, record)
    log(f"\n{record['device_name']}, {args.n_test} test points")
    log(f"{'n':>7} {'fit s':>7} {'mean s':>7} {'std 1st s':>9} {'std 2nd s':>9} {'CG cols':>8} "
        f"{'max err/prior':>13}")
    for r in record["results"]:
        log(f"{r['n']:>7} {r['fit_s']:>7.2f} {r['predict_mean_s']:>7.3f} "
            f"{r['predict_std_first_s']:>9.3f} {r['predict_std_second_s']:>9.3f} "
            f"{r['cg_columns_first']:>8} {r['max_var_error_over_prior']:>13.2e}")


if __name__ == "__main__":
    main()
