"""Large-n Gaussian-process regression: kernelkit.GaussianProcessRegressor against baselines.

Synthetic data (fixed seed, no downloads): X uniform in [-1, 1]^d, y = f(X) + 0.1 noise with a
smooth f (sines of random projections plus a pairwise interaction). Kernel
``ConstantKernel * RBF(ARD) + WhiteKernel``, same starting hyperparameters for every method.

For each n it reports: seconds per log-marginal-likelihood + gradient evaluation (at the initial
hyperparameters; the median of 5 calls after a warm-up, through the public
``log_marginal_likelihood`` for kernelkit, one forward and backward for GPyTorch), fit time (default settings unless flags say otherwise, e.g. ``--opt-iter``
caps the optimiser's iterations), test RMSE and mean
negative log predictive density (NLPD, Gaussian with the predictive std, noise included).

Methods (``--parts``):
- ``ours``: kernelkit.GaussianProcessRegressor (float32 on the GPU, L-BFGS-B);
- ``sklearn``: scikit-learn's GaussianProcessRegressor with its own RBF (float64, CPU, dense
  Cholesky), for n <= ``--sklearn-max-n``; same L-BFGS-B iteration cap;
- ``sklearn-kk``: the same scikit-learn estimator given ``kernelkit.RBF(device=...)``: K and its
  gradient on the GPU in float64 (``eval_gradient=True``), sklearn's dense solves on the CPU;
- ``gpytorch``: gpytorch ExactGP on the GPU (Adam, ``--gpytorch-steps`` steps, lr 0.1), skipped
  with the reason recorded when gpytorch does not import; errors (e.g. out of memory) recorded.

Usage (GPU; each command stays under 10 minutes)::

    python benchmarks/gp.py --n 3000 10000 --out benchmarks/results/gp-small.json
    python benchmarks/gp.py --n 100000 --parts ours gpytorch --out benchmarks/results/gp-1e5.json
    python benchmarks/gp.py --quick --out /tmp/gp-quick.json      # CPU smoke run
    python benchmarks/gp.py --n 20000 --parts ours --trace --out /tmp/trace.json  # per evaluation

The JSON (``--out``) holds every figure; a short table is printed last.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import time
import warnings

import numpy as np

from _common import log, now, wall_s, write_json_atomic

NOISE = 0.1
#: Timed calls of one log-likelihood + gradient evaluation (the median is reported).
EVAL_REPEATS = 5


def make_data(n, n_test, d, seed=0):
    """Smooth synthetic regression data (train and test from the same distribution)."""
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((d, 4)) / np.sqrt(d)
    X = rng.uniform(-1.0, 1.0, (n + n_test, d))
    proj = 2.0 * X @ W
    f = np.sin(proj).sum(1) + 0.5 * X[:, 0] * X[:, 1 % d]
    y = f + NOISE * np.random.default_rng(seed + 1).standard_normal(n + n_test)
    return X[:n], y[:n], X[n:], y[n:]


def metrics(mean, std, y):
    var = np.maximum(std, 1e-12) ** 2
    rmse = float(np.sqrt(np.mean((mean - y) ** 2)))
    nlpd = float(np.mean(0.5 * np.log(2 * np.pi * var) + 0.5 * (y - mean) ** 2 / var))
    return rmse, nlpd


def sync(device):
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def median_seconds(fn, device):
    """``(median, all times)`` of :data:`EVAL_REPEATS` synchronised calls of ``fn`` after one
    warm-up call."""
    fn()
    times = []
    for _ in range(EVAL_REPEATS):
        times.append(wall_s(fn, device))
    return float(np.median(times)), sorted(times)


def kernel_for(d, rbf_class):
    from sklearn.gaussian_process.kernels import ConstantKernel, WhiteKernel

    return ConstantKernel(1.0) * rbf_class(np.ones(d)) + WhiteKernel(0.05)


class Trace:
    """Records each of kernelkit's log-likelihood evaluations in a fit (``--trace``): n, theta,
    its estimate and its parts (quadratic term, log det P, stochastic term), start (seconds since
    the trace began) and length, and per CG solve the steps, the first run's steps, true
    residual, convergence and ``exact_from``. ``after(row)``, if given, runs after each
    evaluation (``benchmarks/gp_large_fit.py`` writes its JSON there)."""

    def __init__(self, device, after=None):
        self.device, self.after, self.rows, self._solves = device, after, [], []

    def __enter__(self):
        from kernelkit.estimators.gp import _lml

        self._lml, self._originals = _lml, (_lml.solve, _lml.log_marginal_likelihood)
        solve, lml = self._originals
        sync(self.device)
        began = time.perf_counter()

        def traced_solve(*a, **k):
            result = solve(*a, **k)
            first = None if result.lanczos is None else int(result.lanczos.n_iter.max())
            self._solves.append(dict(steps=int(result.n_iter), converged=bool(result.converged),
                                     residual=float(result.residuals[-1]),
                                     exact_from=result.exact_from, first_run_steps=first))
            return result

        def traced_lml(op, theta, *a, **k):
            self._solves = []
            sync(self.device)
            t0 = time.perf_counter()
            out = lml(op, theta, *a, **k)
            sync(self.device)
            info = inspect.signature(lml).bind(op, theta, *a, **k).arguments.get("info") or {}
            self.rows.append(dict(n=op.n, theta=[float(t) for t in theta], lml=float(out[0]),
                                  start=t0 - began, s=time.perf_counter() - t0,
                                  solves=self._solves,
                                  **{part: info[part] for part in ("quadratic", "logdet_pre",
                                                                   "slq") if part in info}))
            if self.after is not None:
                self.after(self.rows[-1])
            return out

        _lml.solve, _lml.log_marginal_likelihood = traced_solve, traced_lml
        return self

    def __exit__(self, *exc):
        self._lml.solve, self._lml.log_marginal_likelihood = self._originals


def run_ours(X, y, Xt, yt, args, device):
    import contextlib

    import kernelkit

    settings = dict(optimizer_max_iter=args.opt_iter, n_probes=args.n_probes,
                    preconditioner_rank=args.rank, cg_tol=args.cg_tol,
                    max_cg_iter=args.max_cg_iter)  # None: the estimator's default
    gp = kernelkit.GaussianProcessRegressor(
        kernel_for(X.shape[1], kernelkit.RBF), device=device, random_state=0, dtype=args.dtype,
        **{key: value for key, value in settings.items() if value is not None})
    trace = Trace(device) if args.trace else contextlib.nullcontext()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with trace:
            sync(device)
            t0 = time.perf_counter()
            gp.fit(X, y)
            sync(device)
            fit_s = time.perf_counter() - t0
        theta0 = gp.kernel.theta
        eval_s, eval_times = median_seconds(
            lambda: gp.log_marginal_likelihood(theta0, eval_gradient=True),
                                device)
        t0 = time.perf_counter()
        mean, std = gp.predict(Xt, return_std=True)
        sync(device)
        predict_s = time.perf_counter() - t0
    rmse, nlpd = metrics(mean, std, yt)
    return dict(eval_s=eval_s, eval_times=eval_times, fit_s=fit_s, predict_s=predict_s,
                rmse=rmse, nlpd=nlpd, kernel=str(gp.kernel_),
                lml=gp.log_marginal_likelihood_value_,
                warnings=sorted({str(w.message)[:200] for w in caught}),
                **({"trace": trace.rows} if args.trace else {}))


def run_sklearn(X, y, Xt, yt, args, rbf_class=None):
    """scikit-learn's GaussianProcessRegressor with ``rbf_class`` (its own RBF by default)."""
    import scipy.optimize
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF

    def capped(obj_func, initial_theta, bounds):
        res = scipy.optimize.minimize(obj_func, initial_theta, method="L-BFGS-B", jac=True,
                                      bounds=bounds, options={"maxiter": args.opt_iter})
        return res.x, res.fun

    gp = GaussianProcessRegressor(kernel_for(X.shape[1], rbf_class or RBF),
                                  optimizer="fmin_l_bfgs_b" if args.opt_iter is None else capped,
                                  random_state=0)
    t0 = time.perf_counter()
    gp.fit(X, y)
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    gp.log_marginal_likelihood(gp.kernel.theta, eval_gradient=True)
    eval_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    mean, std = gp.predict(Xt, return_std=True)
    predict_s = time.perf_counter() - t0
    rmse, nlpd = metrics(mean, std, yt)
    return dict(eval_s=eval_s, fit_s=fit_s, predict_s=predict_s, rmse=rmse, nlpd=nlpd,
                kernel=str(gp.kernel_), lml=float(gp.log_marginal_likelihood_value_))


def gpytorch_model(X, y, device, dtype):
    """GPyTorch's exact GP as its tutorial writes it (ScaleKernel(ARD RBF), Gaussian
    likelihood) at :func:`kernel_for`'s initial theta, in training mode: ``(model, likelihood,
    mll, Xtr, ytr)``."""
    import gpytorch
    import torch

    Xtr = torch.as_tensor(X, dtype=dtype, device=device)
    ytr = torch.as_tensor(y, dtype=dtype, device=device)
    d = X.shape[1]

    class Model(gpytorch.models.ExactGP):
        def __init__(self, likelihood):
            super().__init__(Xtr, ytr, likelihood)
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.RBFKernel(ard_num_dims=d))

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                             self.covar_module(x))

    likelihood = gpytorch.likelihoods.GaussianLikelihood().to(device, dtype)
    model = Model(likelihood).to(device, dtype)
    model.covar_module.base_kernel.lengthscale = 1.0
    model.covar_module.outputscale = 1.0
    likelihood.noise = 0.05
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
    model.train()
    likelihood.train()
    return model, likelihood, mll, Xtr, ytr


def run_gpytorch(X, y, Xt, yt, args, device):
    import gpytorch
    import torch

    use32 = args.dtype == "float32" or (args.dtype == "auto" and device == "cuda")
    dtype = torch.float32 if use32 else torch.float64
    model, likelihood, mll, Xtr, ytr = gpytorch_model(X, y, device, dtype)

    def step():
        loss = -mll(model(Xtr), ytr)
        loss.backward()
        return loss

    eval_s, eval_times = median_seconds(step, device)
    model.zero_grad()
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    sync(device)
    t0 = time.perf_counter()
    for _ in range(args.gpytorch_steps):
        opt.zero_grad()
        step()
        opt.step()
    sync(device)
    fit_s = time.perf_counter() - t0
    model.eval()
    likelihood.eval()
    t0 = time.perf_counter()
    with torch.no_grad():
        pred = likelihood(model(torch.as_tensor(Xt, dtype=dtype, device=device)))
        mean = pred.mean.double().cpu().numpy()
        std = pred.variance.clamp_min(0).sqrt().double().cpu().numpy()
    sync(device)
    predict_s = time.perf_counter() - t0
    rmse, nlpd = metrics(mean, std, yt)
    return dict(eval_s=eval_s, eval_times=eval_times, fit_s=fit_s, predict_s=predict_s,
                rmse=rmse, nlpd=nlpd, steps=args.gpytorch_steps, version=gpytorch.__version__)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[3000, 10000, 100000])
    p.add_argument("--d", type=int, default=8, help="features (3..20)")
    p.add_argument("--n-test", type=int, default=1000)
    p.add_argument("--parts", nargs="+", default=["ours", "sklearn", "gpytorch"],
                   choices=["ours", "sklearn", "sklearn-kk", "gpytorch"])
    # estimator settings: left out, each estimator's default
    p.add_argument("--opt-iter", type=int, help="L-BFGS-B iterations (ours, sklearn)")
    p.add_argument("--gpytorch-steps", type=int, default=50)
    p.add_argument("--sklearn-max-n", type=int, default=3000)
    p.add_argument("--n-probes", type=int)
    p.add_argument("--rank", type=lambda v: v if v == "auto" else int(v),
                   help="preconditioner rank (an int or auto)")
    p.add_argument("--cg-tol", type=float)
    p.add_argument("--max-cg-iter", type=int)
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "float64"])
    p.add_argument("--trace", action="store_true",
                   help="record each likelihood evaluation of kernelkit's fit (theta, seconds, "
                        "CG steps) in the JSON")
    p.add_argument("--out", required=True, help="JSON result path")
    p.add_argument("--quick", action="store_true", help="CPU smoke run with tiny sizes")
    args = p.parse_args(argv)
    if not 1 <= args.d:
        p.error("--d must be >= 1")

    import torch

    import kernelkit

    if args.quick:
        device = "cpu"
        args.n, args.n_test, args.opt_iter, args.gpytorch_steps = [300, 600], 100, 2, 3
        args.d = min(args.d, 3)
    else:
        if not torch.cuda.is_available():
            raise SystemExit("benchmarks/gp.py needs a CUDA GPU (or --quick for a CPU smoke run)")
        device = "cuda"
    record = dict(benchmark="gp", started=now(), device=device,
                  device_name=torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
                  versions=dict(torch=torch.__version__), args=vars(args), results=[])
    try:
        import sklearn

        record["versions"]["sklearn"] = sklearn.__version__
    except ImportError:
        pass
    gpytorch_reason = None
    if "gpytorch" in args.parts:
        try:
            import gpytorch

            record["versions"]["gpytorch"] = gpytorch.__version__
        except Exception as exc:  # any import failure is recorded, not fatal
            gpytorch_reason = f"gpytorch did not import: {type(exc).__name__}: {exc}"
            record["gpytorch_skipped"] = gpytorch_reason
            log(gpytorch_reason)

    for n in args.n:
        X, y, Xt, yt = make_data(n, args.n_test, args.d)
        runners = []
        if "ours" in args.parts:
            runners.append(("kernelkit", lambda: run_ours(X, y, Xt, yt, args, device)))
        if "sklearn" in args.parts and n <= args.sklearn_max_n:
            runners.append(("sklearn", lambda: run_sklearn(X, y, Xt, yt, args)))
        if "sklearn-kk" in args.parts and n <= args.sklearn_max_n:
            runners.append(("sklearn+kk", lambda: run_sklearn(
                X, y, Xt, yt, args, lambda ls: kernelkit.RBF(ls, device=device))))
        if "gpytorch" in args.parts and gpytorch_reason is None:
            runners.append(("gpytorch", lambda: run_gpytorch(X, y, Xt, yt, args, device)))
        for name, fn in runners:
            log(f"n={n} d={args.d} {name} ...")
            gc.collect()  # every method starts from the same state: no garbage of the previous
            if device == "cuda":  # method's objects to collect, no memory of it cached
                torch.cuda.empty_cache()
            try:
                row = fn()
            except Exception as exc:  # e.g. out of memory: record and go on
                row = dict(error=f"{type(exc).__name__}: {str(exc)[:300]}")
                if device == "cuda":
                    torch.cuda.empty_cache()
            row.update(method=name, n=n, d=args.d)
            if device == "cuda":
                row["peak_gpu_GB"] = torch.cuda.max_memory_allocated() / 1e9
                torch.cuda.reset_peak_memory_stats()
            record["results"].append(row)
            log("  ", {k: v for k, v in row.items() if k not in ("warnings", "trace")})
            write_json_atomic(args.out, record)
    record["finished"] = now()
    write_json_atomic(args.out, record)

    log(f"\n{record['device_name']}, d={args.d}, {args.n_test} test points, "
        f"opt-iter {args.opt_iter or 'default'} (gpytorch: {args.gpytorch_steps} Adam steps)")
    log(f"{'method':<10} {'n':>7} {'LML+grad s':>11} {'fit s':>9} {'predict s':>10} "
        f"{'RMSE':>8} {'NLPD':>8}")
    for r in record["results"]:
        if "error" in r:
            log(f"{r['method']:<10} {r['n']:>7}  error: {r['error'][:60]}")
            continue
        log(f"{r['method']:<10} {r['n']:>7} {r['eval_s']:>11.3f} {r['fit_s']:>9.2f} "
            f"{r['predict_s']:>10.2f} {r['rmse']:>8.4f} {r['nlpd']:>8.3f}")
    if gpytorch_reason:
        log(f"gpytorch skipped: {gpytorch_reason}")
    return record


if __name__ == "__main__":
    main()
