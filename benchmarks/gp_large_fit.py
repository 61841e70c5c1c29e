"""A default GaussianProcessRegressor fit at large n, traced evaluation by evaluation.

Data and kernel of ``benchmarks/gp.py`` (d = 8 by default: X uniform in [-1, 1]^d, a smooth f
plus 0.1 noise; ConstantKernel x ARD RBF + WhiteKernel). The JSON (``--out``, rewritten through
a temporary file after every evaluation, so a run stopped early keeps what it measured) holds:

- ``evals``: each log-likelihood evaluation of the fit on the iterative path (pretraining
  subset and full data; the exact path, n <= ``exact_max_n``, is not traced), as
  ``benchmarks/gp.py --trace`` records them (:class:`gp.Trace`): n, start and length in
  seconds, the estimate, theta, and per CG solve its steps, true residual and ``exact_from``;
- ``iterations``: each L-BFGS-B iteration's time and value, its run, and whether it is on the
  full data (not the pretraining subset);
- ``fit_s``, ``peak_gpu_GB``, predicted means (and with the variance cache, standard
  deviations) for the test points: seconds, RMSE, NLPD.

``--iterations K`` is a measurement mode: the full-data run ignores its stopping rule (gain
below the estimate's standard error, ``STALL_EVALUATIONS``) and ends after K iterations, to
count iterations per unit of time; the fit then finishes as usual.

Usage (GPU; runs over 10 minutes at n = 1e6: start it in the background)::

    python benchmarks/gp_large_fit.py --n 1000000 --out /tmp/fit.json
    python benchmarks/gp_large_fit.py --n 1000000 --iterations 10 --no-cache --out /tmp/it.json
    python benchmarks/gp_large_fit.py --n 1000000 --iterations 10 --no-cache --dtype float32 \
        --pretrain-size 1000 --out /tmp/it32.json   # the float32 products of before 2026-11-26m
    python benchmarks/gp_large_fit.py --n 3000 --n-test 200 --device cpu --exact-max-n 0 \\
        --pretrain-size 500 --iterations 2 --out /tmp/smoke.json   # CPU smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gp import Trace, kernel_for, make_data  # noqa: E402


def _write(record, path):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
    os.replace(tmp, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--d", type=int, default=8)
    p.add_argument("--n-test", type=int, default=10_000)
    p.add_argument("--iterations", type=int,
                   help="full-data L-BFGS-B iterations, its stopping rule off (measurement mode)")
    p.add_argument("--no-cache", action="store_true",
                   help="build no predictive-variance cache (and predict means only)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--exact-max-n", type=int, help="the estimator's exact_max_n")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "float64"],
                   help="the estimator's dtype (of the CG products)")
    p.add_argument("--pretrain-size", default="auto",
                   type=lambda v: v if v == "auto" else None if v == "none" else int(v),
                   help="the estimator's pretrain_size: auto, none or an int")
    p.add_argument("--out", required=True, help="JSON result path")
    args = p.parse_args(argv)
    if args.iterations is not None and args.iterations < 1:
        p.error("--iterations must be >= 1")

    import scipy.optimize
    import torch

    import kernelkit
    from kernelkit.estimators.gp import _optimizer

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU: pass --device cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    X, y, Xt, yt = make_data(args.n, args.n_test, args.d)
    record = dict(benchmark="gp_large_fit", args=vars(args),
                  device=torch.cuda.get_device_name() if cuda else "cpu",
                  versions=dict(torch=torch.__version__), evals=[], iterations=[], runs=[])
    t0 = [0.0]

    def clock():
        sync()
        return time.perf_counter() - t0[0]

    spread, stall = _optimizer.standard_error, _optimizer.STALL_EVALUATIONS
    measuring = args.iterations is not None

    def on_full_data():
        return bool(record["evals"]) and record["evals"][-1]["n"] == args.n

    def after_evaluation(row):
        _write(record, args.out)
        # measurement mode: the full-data run's stopping rules off (read after each evaluation)
        _optimizer.STALL_EVALUATIONS = 10**9 if measuring and on_full_data() else stall

    def traced_spread(estimate):
        return 0.0 if measuring and on_full_data() else spread(estimate)

    minimize = scipy.optimize.minimize

    def traced_minimize(fun, x0, *a, callback=None, **k):
        run = len(record["runs"])
        record["runs"].append(dict(start=clock()))

        def step(intermediate_result):
            record["iterations"].append(dict(t=clock(), value=float(intermediate_result.fun),
                                             run=run, full_data=on_full_data()))
            _write(record, args.out)
            out = callback(intermediate_result) if callback is not None else None
            done = sum(1 for i in record["iterations"] if i["run"] == run)
            if measuring and on_full_data() and done >= args.iterations:
                raise StopIteration
            return out

        result = minimize(fun, x0, *a, callback=step, **k)
        record["runs"][-1].update(end=clock(), nit=int(result.nit), message=str(result.message))
        return result

    _optimizer.standard_error = traced_spread
    _optimizer.scipy.optimize.minimize = traced_minimize
    gp = kernelkit.GaussianProcessRegressor(kernel_for(args.d, kernelkit.RBF), random_state=0,
                                            device=args.device, exact_max_n=args.exact_max_n,
                                            pretrain_size=args.pretrain_size, dtype=args.dtype)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0[0] = time.perf_counter()
    trace = Trace(args.device, after=after_evaluation)
    record["evals"] = trace.rows
    with trace:
        gp._fit(X, y, variance_cache=not args.no_cache)
    record.update(fit_s=clock(), kernel=str(gp.kernel_),
                  lml=float(gp.log_marginal_likelihood_value_),
                  peak_gpu_GB=torch.cuda.max_memory_allocated() / 1e9 if cuda else None)
    _write(record, args.out)

    start = time.perf_counter()
    mean = gp.predict(Xt)
    sync()
    record.update(predict_mean_s=time.perf_counter() - start,
                  rmse=float(np.sqrt(np.mean((mean - yt) ** 2))))
    if not args.no_cache:
        start = time.perf_counter()
        mean, std = gp.predict(Xt, return_std=True)
        sync()
        record.update(predict_mean_std_s=time.perf_counter() - start, nlpd=float(np.mean(
            0.5 * np.log(2 * np.pi * std ** 2) + (yt - mean) ** 2 / (2 * std ** 2))))
    _write(record, args.out)
    evals = sum(1 for e in record["evals"] if e["n"] == args.n)
    iterations = sum(1 for i in record["iterations"] if i["full_data"])
    print(f"{record['device']}, n = {args.n}: fit {record['fit_s']:.1f} s, {evals} full-data "
          f"evaluations, {iterations} full-data iterations, RMSE {record['rmse']:.4f}"
          + (f", NLPD {record['nlpd']:.3f}" if "nlpd" in record else ""))


if __name__ == "__main__":
    main()
