"""How rough the GP's log-likelihood estimate is: its parts at theta and at theta (1 + k eps).

At n = 1e6 the full-data L-BFGS-B stalls where estimates at thetas equal up to their last bits
differ by a few nats (docs/benchmarks.md, session l). This script evaluates the iterative
path's estimate (value, gradient and the parts of ``log_marginal_likelihood(info=)``: the
quadratic term, log det P, the stochastic log-det term; the CG steps, residual history,
true residual and ``exact_from``, and the steps of the first run, whose Lanczos coefficients the
stochastic term uses) at ``theta`` and at ``theta * (1 + k * eps)`` for k = 1..K, with the probes and
landmarks of one fit, so that the part that moves can be read off. Data and kernel of
``benchmarks/gp.py`` (ConstantKernel x ARD RBF + WhiteKernel). The JSON is rewritten after
every evaluation.

Usage (GPU; about 30-50 s per evaluation at n = 1e6)::

    python benchmarks/gp_estimate_roughness.py --n 1000000 \\
        --theta-from benchmarks/results/gp-fit-n1e6-forced-iterations-start1000-h100-2026-11-26l-c.json \\
        --out /tmp/rough.json
    python benchmarks/gp_estimate_roughness.py --n 2000 --device cpu --theta-from none \\
        --steps 2 --dtype float32 --out /tmp/rough.json   # CPU smoke run, initial theta
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import write_json_atomic  # noqa: E402
from gp import kernel_for, make_data  # noqa: E402


def start_theta(path, n_dims):
    """The best full-data evaluation's theta of a ``gp_large_fit.py`` JSON; None for "none"."""
    if path == "none":
        return None
    with open(path) as f:
        record = json.load(f)
    n = record["args"]["n"]
    evals = [e for e in record["evals"] if e["n"] == n]
    if not evals:
        raise SystemExit(f"{path} has no evaluation on all {n} points")
    theta = np.asarray(max(evals, key=lambda e: e["lml"])["theta"], dtype=np.float64)
    if theta.shape != (n_dims,):
        raise SystemExit(f"{path}: theta of shape {theta.shape}, expected ({n_dims},)")
    return theta


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--d", type=int, default=8)
    p.add_argument("--theta-from", required=True,
                   help="a gp_large_fit.py JSON (its best full-data theta), or none (the "
                        "kernel's initial theta)")
    p.add_argument("--steps", type=int, default=3, help="K perturbed thetas")
    p.add_argument("--eps", type=float, default=4e-16, help="relative perturbation per step")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "float64"],
                   help="the estimator's dtype (products; the CPU's auto is float64)")
    p.add_argument("--out", required=True, help="JSON result path")
    args = p.parse_args(argv)
    if args.steps < 0:
        p.error("--steps must be >= 0")

    import torch

    import kernelkit
    from kernelkit.estimators.gp import _lml
    from kernelkit.estimators.gp._checks import check_params
    from kernelkit.operators.kernel_tree import parse_kernel

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU: pass --device cpu")
    kernel = kernel_for(args.d, kernelkit.RBF)
    theta = start_theta(args.theta_from, kernel.n_dims)
    if theta is not None:
        kernel = kernel.clone_with_theta(theta)
    X, y, _, _ = make_data(args.n, 1, args.d)
    gp = kernelkit.GaussianProcessRegressor(kernel, random_state=0, optimizer=None,
                                            device=args.device, dtype=args.dtype, exact_max_n=0)
    gp._fit(X, y, variance_cache=False)  # the fit's probes and landmarks, no variance cache
    settings = check_params(gp)
    op = gp._operator(parse_kernel(gp.kernel_, gp.n_features_in_))
    probes = gp._probes(op, settings)
    targets = gp._targets(op)[:, 0]
    record = dict(benchmark="gp_estimate_roughness", args=vars(args),
                  device=torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                  versions=dict(torch=torch.__version__), theta=gp.kernel_.theta.tolist(),
                  evaluations=[])
    for k in range(args.steps + 1):
        at = gp.kernel_.theta * (1.0 + k * args.eps)
        info = {}
        start = time.perf_counter()
        lml, grad, _ = _lml.log_marginal_likelihood(op, at, targets, probes, settings,
                                                    eval_gradient=True, info=info, warn=False)
        cg = info["cg"]
        record["evaluations"].append(dict(
            k=k, seconds=time.perf_counter() - start, lml=float(lml),
            grad=np.asarray(grad).tolist(), quadratic=info["quadratic"],
            logdet_pre=info["logdet_pre"], slq=info["slq"], spread=info["spread"],
            cg_steps=int(cg.n_iter), residual=float(cg.residuals[-1]),
            exact_from=cg.exact_from, residual_history=cg.residuals.tolist(),
            lanczos_steps=cg.lanczos.n_iter.tolist(),
            lanczos_true_residual=float(cg.lanczos.true_residual)))
        write_json_atomic(args.out, record)
        row = record["evaluations"][-1]
        print(f"k={k}: lml {row['lml']:.3f}  quadratic {row['quadratic']:.3f}  log det P "
              f"{row['logdet_pre']:.3f}  slq {row['slq']:.3f}  steps {row['cg_steps']} (first run "
              f"{max(row['lanczos_steps'])}) exact_from {row['exact_from']}  {row['seconds']:.1f} s", flush=True)


if __name__ == "__main__":
    main()
