"""The GP's log-likelihood estimate and gradient against the exact float64 values, and GPyTorch's.

Data and kernel of ``benchmarks/gp.py`` (ConstantKernel(1) x ARD RBF(1) + WhiteKernel(0.05), its
initial theta). The exact values come from a dense float64 Cholesky
(:func:`kernelkit.estimators.gp._exact.exact_lml`). kernelkit's estimate is the public
``log_marginal_likelihood(theta0, eval_gradient=True)`` of a default regressor fitted with
``optimizer=None``, once per probe seed (``random_state``); GPyTorch's is one loss + backward of
its exact GP as ``benchmarks/gp.py`` builds it (tutorial settings, float32 on the GPU; its
probes are redrawn per call), its gradient mapped from the raw (softplus) parameters to the log
values of theta. Reported per estimate: the LML error in nats and the gradient's largest
component error over its largest component.

Usage::

    python benchmarks/gp_lml_error.py --n 20000 --out /tmp/err.json          # GPU
    python benchmarks/gp_lml_error.py --n 1500 --device cpu --exact-max-n 0 \\
        --seeds 2 --out /tmp/err.json                                        # CPU smoke run
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import log, now, write_json_atomic  # noqa: E402
from gp import gpytorch_model, kernel_for, make_data  # noqa: E402


def exact_values(X, y, kernel, device):
    """(LML, gradient) at kernel.theta by a dense float64 Cholesky on ``device``."""
    import torch

    from kernelkit.estimators.gp._exact import exact_lml
    from kernelkit.operators.covariance import CovarianceOperator
    from kernelkit.operators.kernel_tree import parse_kernel

    op = CovarianceOperator(X, parse_kernel(kernel, X.shape[1]), 0.0, device, torch.float64)
    Y = torch.as_tensor(y, dtype=torch.float64, device=op.device)[:, None]
    jitter = torch.tensor(1e-10, dtype=torch.float64, device=op.device)  # scikit-learn's alpha
    value, grad = exact_lml(op, kernel.theta, Y, jitter, True)
    return float(value), np.asarray(grad, dtype=np.float64)


def errors(value, grad, exact_value, exact_grad):
    grad = np.asarray(grad, dtype=np.float64)
    return dict(lml_err=float(value - exact_value),
                grad_max_rel_err=float(np.abs(grad - exact_grad).max() / np.abs(exact_grad).max()),
                grad=grad.tolist())


def gpytorch_estimates(X, y, calls, device):
    """``calls`` GPyTorch (LML, gradient along log theta) estimates at theta0."""
    import torch

    dtype = torch.float32 if device == "cuda" else torch.float64
    model, likelihood, mll, Xtr, ytr = gpytorch_model(X, y, device, dtype)
    n = X.shape[0]

    def along_log(raw, value):  # value = softplus(raw) (+ bound): dvalue / draw = sigmoid(raw)
        g = raw.grad.detach().double() / torch.sigmoid(raw.detach().double())
        return (-n * g * value.detach().double()).reshape(-1).cpu().numpy()  # loss = -lml / n

    out = []
    for _ in range(calls):
        model.zero_grad()
        loss = -mll(model(Xtr), ytr)
        loss.backward()
        grad = np.concatenate([
            along_log(model.covar_module.raw_outputscale, model.covar_module.outputscale),
            along_log(model.covar_module.base_kernel.raw_lengthscale,
                      model.covar_module.base_kernel.lengthscale),
            along_log(likelihood.noise_covar.raw_noise, likelihood.noise)])
        out.append((-float(loss.item()) * n, grad))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--d", type=int, default=8)
    p.add_argument("--seeds", type=int, default=4, help="kernelkit probe seeds")
    p.add_argument("--gpytorch-calls", type=int, default=3)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--exact-max-n", type=int, help="the estimator's exact_max_n")
    p.add_argument("--out", required=True, help="JSON result path")
    args = p.parse_args(argv)
    if args.seeds < 1 or args.gpytorch_calls < 0:
        p.error("--seeds must be >= 1 and --gpytorch-calls >= 0")

    import torch

    import kernelkit

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU: pass --device cpu")
    X, y, _, _ = make_data(args.n, 1, args.d)
    kernel = kernel_for(args.d, kernelkit.RBF)
    exact_value, exact_grad = exact_values(X, y, kernel, args.device)
    record = dict(benchmark="gp_lml_error", started=now(), args=vars(args),
                  device=torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                  versions=dict(torch=torch.__version__), theta=kernel.theta.tolist(),
                  exact_lml=exact_value, exact_grad=exact_grad.tolist(), kernelkit=[],
                  gpytorch=[])
    for seed in range(args.seeds):
        gp = kernelkit.GaussianProcessRegressor(kernel, random_state=seed, optimizer=None,
                                                device=args.device, exact_max_n=args.exact_max_n)
        gp.fit(X, y)
        value, grad = gp.log_marginal_likelihood(kernel.theta, eval_gradient=True)
        record["kernelkit"].append(dict(seed=seed, **errors(value, grad, exact_value, exact_grad)))
        log("kernelkit", seed, record["kernelkit"][-1]["lml_err"])
        write_json_atomic(args.out, record)
        del gp
    if args.gpytorch_calls:
        try:
            import gpytorch

            record["versions"]["gpytorch"] = gpytorch.__version__
            for value, grad in gpytorch_estimates(X, y, args.gpytorch_calls, args.device):
                record["gpytorch"].append(errors(value, grad, exact_value, exact_grad))
                log("gpytorch", record["gpytorch"][-1]["lml_err"])
        except ImportError as exc:
            record["gpytorch_skipped"] = f"gpytorch did not import: {exc}"
            log(record["gpytorch_skipped"])
    record["finished"] = now()
    write_json_atomic(args.out, record)
    log(f"exact LML {exact_value:.3f} at n = {args.n}")
    for name in ("kernelkit", "gpytorch"):
        for row in record[name]:
            log(f"{name:<10} LML error {row['lml_err']:+10.3f} nats, gradient "
                f"{100 * row['grad_max_rel_err']:.2f}%")
    return record


if __name__ == "__main__":
    main()
