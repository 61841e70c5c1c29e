"""Predictive standard deviation at large n on the GPU (iterative path): time and accuracy.

Issue 17's floors: 10^4 test points at n = 10^5 in <= 2 s, and mean and std at n = 10^6 in
<= 10 s, on one GPU. Data as ``benchmarks/gp.py`` (d = 8), kernel ``ConstantKernel * RBF(ARD) +
WhiteKernel`` at fixed hyperparameters (no optimisation: this times prediction): ``--theta 2e4``
near the optimum that kernelkit's default fit finds at n = 2e4, ``--theta 1e6`` the default
fit's at n = 10^6 (``gp-default-fit-n1e6-h100-2026-11-26i.json``).

For each n it records the fit at fixed theta (one solve, then the variance cache), the
predictive mean, ``predict(return_std=True)`` twice, how many test points the cache's bound left
to CG, the cache's certified bound on every point's variance error (relative to the prior and to
the predicted variance), and, for ``--n-check`` > 0 test points, the largest error of the
variance against a reference: the exact float64 Cholesky path where n <= ``--exact-max-n``, else
the same model with ``cg_tol=1e-7`` (certified to 1e-7 of the prior variance). Usage::

    python benchmarks/gp_predict_large.py --n 20000 100000 \\
        --out benchmarks/results/gp-predict-large-h200-2026-11-26.json
    python benchmarks/gp_predict_large.py --n 1000000 --theta 1e6 --n-check 0 --out ...
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _common import log, now, write_json_atomic
from gp import make_data

#: Near kernelkit's optimum at n = 2e4: amplitude 0.802^2, ARD length scales, noise 0.00988;
#: and the default fit's at n = 1e6 (H100, 2026-11-26i).
THETAS = {"2e4": np.log([0.802**2, 2.12, 1.62, 1.87, 1.19, 2.02, 1.93, 1.77, 1.91, 0.00988]),
          "1e6": np.array([1.428120581604099, 1.3176542513556173, 0.6312020122881654,
                           0.9050825135377176, 0.39909879484963307, 1.16978006665954,
                           0.92609445152818, 0.8838607843421139, 0.911057148875335,
                           -4.608988516637519])}


def kernel(theta):
    from sklearn.gaussian_process.kernels import ConstantKernel, WhiteKernel

    import kernelkit

    return (ConstantKernel(1.0) * kernelkit.RBF(np.ones(8)) + WhiteKernel(0.05)).clone_with_theta(
        theta)


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
    from kernelkit.estimators.gp import _variance

    X, y, Xt, _ = make_data(n, args.n_test, 8)
    theta = THETAS[args.theta]
    cg_columns = []
    original = _variance.solve_columns

    def counted(op, params, Z, settings, probes, keep):
        cg_columns.append(int(Z.shape[0]))
        return original(op, params, Z, settings, probes, keep)

    _variance.solve_columns = counted
    try:
        gp = kernelkit.GaussianProcessRegressor(kernel(theta), optimizer=None, random_state=0)
        row = dict(n=n, n_test=args.n_test, theta=args.theta)
        torch.cuda.reset_peak_memory_stats()
        row["fit_s"], _ = timed(lambda: gp.fit(X, y))
        row["fit_peak_GB"] = torch.cuda.max_memory_allocated() / 1e9
        row["held_GB"] = torch.cuda.memory_allocated() / 1e9
        row["predict_mean_s"], _ = timed(lambda: gp.predict(Xt))
        row["predict_std_first_s"], (_, std) = timed(lambda: gp.predict(Xt, return_std=True))
        row["cg_columns_first"] = sum(cg_columns)
        row["predict_std_second_s"], _ = timed(lambda: gp.predict(Xt, return_std=True))
        row["cache_rank"] = gp._variance_cache.rank
        row.update(certified_bound(gp, Xt, std))
        del gp
        torch.cuda.empty_cache()
        check = slice(0, min(args.n_check, args.n_test))
        if check.stop == 0:
            return row
        if n <= args.exact_max_n:
            ref = kernelkit.GaussianProcessRegressor(kernel(theta), optimizer=None, exact_max_n=n)
            row["reference"] = "exact float64 Cholesky"
        else:
            ref = kernelkit.GaussianProcessRegressor(kernel(theta), optimizer=None, cg_tol=1e-7,
                                                     random_state=0)
            row["reference"] = "cg_tol=1e-7"
        cg_columns.clear()
        ref.fit(X, y)
        _, ref_std = ref.predict(Xt[check], return_std=True)
        row["reference_cg_columns"] = sum(cg_columns)
        prior = float(np.exp(theta[0]) + np.exp(theta[-1]))
        err = np.abs(std[check] ** 2 - ref_std**2)
        row.update(max_var_error_over_prior=float(err.max() / prior),
                   median_var_error_over_prior=float(np.median(err) / prior),
                   max_std_rel_error=float(np.max(np.abs(std[check] - ref_std) / ref_std)),
                   n_checked=int(len(ref_std)))
        del ref
        torch.cuda.empty_cache()
        return row
    finally:
        _variance.solve_columns = original


def certified_bound(gp, Xt, std):
    """The variance cache's certified bound on each test point's variance error (the exact
    variance lies in [returned - bound, returned]), as fractions of the prior and of the
    returned variance (normalised y: both in the model's units)."""
    import torch

    from kernelkit.operators.kernel_tree import parse_kernel

    op = gp._operator(parse_kernel(gp.kernel_, gp.n_features_in_))
    params = op.structure.params(torch.as_tensor(gp.kernel_.theta, device=op.device))
    op64 = op.with_dtype(torch.float64)
    bounds = []
    with torch.no_grad():
        Z = op.centred(Xt)
        for lo in range(0, Z.shape[0], 128):
            bounds.append(gp._variance_cache.quadratic(
                op64.cross_block_T(Z[lo:lo + 128], params))[1].cpu())
    bound = torch.cat(bounds).numpy()
    prior = float(np.exp(gp.kernel_.theta[0]) + np.exp(gp.kernel_.theta[-1]))
    var = (std / float(np.reshape(gp._y_train_std, -1)[0])) ** 2
    return dict(max_bound_over_prior=float(bound.max() / prior),
                max_bound_over_variance=float(np.max(bound / var)),
                median_bound_over_variance=float(np.median(bound / var)))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[20_000, 100_000])
    p.add_argument("--n-test", type=int, default=10_000)
    p.add_argument("--n-check", type=int, default=500)
    p.add_argument("--exact-max-n", type=int, default=30_000)
    p.add_argument("--theta", choices=sorted(THETAS), default="2e4")
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
            f"{r['cg_columns_first']:>8} {r.get('max_var_error_over_prior', np.nan):>13.2e}")


if __name__ == "__main__":
    main()
