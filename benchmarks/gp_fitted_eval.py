"""One log-marginal-likelihood + gradient evaluation at the *fitted* hyperparameters, kernelkit
against GPyTorch, on several data sets (issue 39: the lead measured at the initial theta on one
data set did not hold at the fitted theta on others).

For each data set (``--data``: ``bench`` = benchmarks/gp.py's data, ``ridge`` = a ridge function
of one direction, and zoo cases by name when ``benchmarks/zoo_data.py`` is present):

1. kernelkit's default fit (``C * RBF(ARD) + White``) gives theta;
2. the exact float64 log marginal likelihood at theta (dense Cholesky on the device);
3. for each preconditioner rank in ``--ranks``: a GP at theta (``optimizer=None``) and the median
   seconds of ``gp.EVAL_REPEATS`` calls of ``log_marginal_likelihood(theta, eval_gradient=True)``,
   its CG steps and its error against the exact value;
4. GPyTorch's exact GP (float32 on the GPU, its defaults: CG + Lanczos above 800 points) at the
   same hyperparameters: median seconds of one forward + backward, its value and error.

Usage (GPU)::

    python benchmarks/gp_fitted_eval.py --n 20000 --data bench ridge --out results.json
    python benchmarks/gp_fitted_eval.py --quick --out /tmp/q.json   # CPU smoke run

Writes one JSON (``--out``, atomically) and prints a table last.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from _common import log, now, write_json_atomic
from gp import gpytorch_model, make_data, median_seconds, sync


def ridge_data(n, n_test, seed=0):
    """The zoo's ridge function (``zoo_data``'s generator), unstandardised as the issue ran it."""
    import zoo_data

    X, y = zoo_data._ridge(n + n_test, np.random.default_rng(seed))
    return X[:n], y[:n], X[n:], y[n:]


def load(name, n, n_test):
    """(X, y, X_test, y_test) of data set ``name``."""
    if name == "bench":
        return make_data(n, n_test, 8)
    if name == "ridge":
        return ridge_data(n, n_test)
    import zoo_data  # benchmarks/zoo_data.py

    X, y, Xt, yt = zoo_data.CASES[name].load(n=n + n_test)
    return X[:n], np.asarray(y)[:n], Xt[:n_test], np.asarray(yt)[:n_test]


def exact_lml(X, y, kernel, device):
    """log p(y | theta) by a float64 Cholesky of K (scikit-learn's kernel on the host, the
    factorisation on ``device``)."""
    import torch

    K = torch.as_tensor(kernel(X), dtype=torch.float64, device=device)
    L = torch.linalg.cholesky(K)
    yt = torch.as_tensor(y, dtype=torch.float64, device=device)[:, None]
    a = torch.cholesky_solve(yt, L)
    n = len(y)
    return float(-0.5 * (yt * a).sum() - torch.log(torch.diagonal(L)).sum()
                 - 0.5 * n * np.log(2 * np.pi))


def ours_at(X, y, kernel, rank, device):
    """(seconds, lml, CG steps) of one evaluation at ``kernel``'s theta with rank ``rank``."""
    import kernelkit
    from kernelkit.estimators.gp import _lml

    gp = kernelkit.GaussianProcessRegressor(kernel, optimizer=None, device=device,
                                            preconditioner_rank=rank, random_state=0,
                                            exact_max_n=0).fit(X, y)
    theta = gp.kernel_.theta
    steps, solve = [], _lml.solve

    def counted(*a, **k):
        result = solve(*a, **k)
        steps.append(int(result.n_iter))
        return result

    _lml.solve = counted
    try:
        seconds = median_seconds(
            lambda: gp.log_marginal_likelihood(theta, eval_gradient=True), device)[0]
    finally:
        _lml.solve = solve
    return seconds, float(gp.log_marginal_likelihood(theta)), steps[-1]


def gpytorch_at(X, y, kernel, device):
    """(seconds, lml) of GPyTorch's forward + backward at ``kernel``'s hyperparameters (the
    fitted ``C * RBF + White``)."""
    import torch

    dtype = torch.float32 if device == "cuda" else torch.float64
    model, likelihood, mll, Xtr, ytr = gpytorch_model(X, y, device, dtype)
    params = kernel.get_params()
    model.covar_module.outputscale = float(params["k1__k1__constant_value"])
    model.covar_module.base_kernel.lengthscale = torch.as_tensor(
        np.atleast_1d(params["k1__k2__length_scale"]), dtype=dtype, device=device)
    likelihood.noise = float(params["k2__noise_level"])
    values = []

    def step():
        model.zero_grad()
        loss = -mll(model(Xtr), ytr)
        loss.backward()
        values.append(float(loss) * -len(y))  # the mll is divided by n

    return median_seconds(step, device)[0], values[-1]


def run(name, args, device):
    import kernelkit
    from sklearn.gaussian_process.kernels import ConstantKernel, WhiteKernel

    X, y, Xt, yt = load(name, args.n, args.n_test)
    d = X.shape[1]
    gp = kernelkit.GaussianProcessRegressor(
        ConstantKernel(1.0) * kernelkit.RBF(np.ones(d)) + WhiteKernel(0.1), device=device,
        random_state=0)
    sync(device)
    t0 = time.perf_counter()
    gp.fit(X, y)
    sync(device)
    row = dict(data=name, n=len(y), d=d, fit_s=time.perf_counter() - t0, kernel=str(gp.kernel_),
               rmse=float(np.sqrt(np.mean((gp.predict(Xt) - yt) ** 2))))
    row["exact_lml"] = exact_lml(X, y, gp.kernel_, device)
    row["fit_rank"] = None if gp._rank is None else int(gp._rank[1])  # "auto" after adapting
    row["ours"] = {}
    for rank in args.ranks:
        if rank == "fit":
            rank = row["fit_rank"]
            if rank is None:
                continue
        seconds, lml, steps = ours_at(X, y, gp.kernel_, rank, device)
        row["ours"][str(rank)] = dict(eval_s=seconds, lml=lml, cg_steps=steps,
                                      error=lml - row["exact_lml"])
    try:
        import gpytorch  # noqa: F401
    except ImportError as exc:
        row["gpytorch"] = dict(skipped=str(exc))
    else:
        try:
            seconds, lml = gpytorch_at(X, y, gp.kernel_, device)
            row["gpytorch"] = dict(eval_s=seconds, lml=lml, error=lml - row["exact_lml"])
        except Exception as exc:  # noqa: BLE001 (recorded: out of memory, ...)
            row["gpytorch"] = dict(error_message=f"{type(exc).__name__}: {exc}"[:300])
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--n-test", type=int, default=2000)
    p.add_argument("--data", nargs="+", default=["bench", "ridge"])
    p.add_argument("--ranks", nargs="+", default=["auto"],
                   type=lambda v: v if v in ("auto", "fit") else int(v),
                   help='integers, "auto" (the first rank) or "fit" (the rank the fit adapted to)')
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true", help="CPU smoke run with tiny sizes")
    args = p.parse_args(argv)
    device = "cpu" if args.quick else "cuda"
    if args.quick:
        args.n, args.n_test, args.ranks = 300, 50, ["auto", 20]
    rows = []
    result = dict(benchmark="gp_fitted_eval", when=now(), device=device, args=vars(args),
                  rows=rows)
    for name in args.data:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rows.append(run(name, args, device))
        rows[-1]["warnings"] = sorted({str(w.message)[:200] for w in caught})
        write_json_atomic(args.out, result)
        log(name, {k: v for k, v in rows[-1].items() if k != "warnings"})
    print("| data | n | rank | ours s | CG steps | error (nats) | GPyTorch s | its error | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        g = row["gpytorch"]
        for rank, ours in row["ours"].items():
            ratio = g["eval_s"] / ours["eval_s"] if "eval_s" in g else float("nan")
            print(f"| {row['data']} | {row['n']} | {rank} | {ours['eval_s']:.4f} | "
                  f"{ours['cg_steps']} | {ours['error']:+.2f} | {g.get('eval_s', float('nan')):.4f}"
                  f" | {g.get('error', float('nan')):+.2f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
