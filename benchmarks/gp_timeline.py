"""Where one GP log-likelihood + gradient evaluation waits: the host's and the GPU's timelines.

Wraps the evaluation's sections (the public call, the operator and probes, the dense K
formations, the preconditioner build, each CG pass and product, the gradient contraction, the
quadrature, the backward and its closed-form parts) with a host timestamp and a CUDA event at
entry (">") and exit ("<"). For each mark the JSON and the table give the host time and the
time the GPU reached it (ms from the start): where "gpu - host" is about 0, the GPU had
finished all earlier work and waited for the host (host-bound there); where it is positive, the
host was ahead. The CG products are summarised per step. Data and kernel of
``benchmarks/gp.py`` at the kernel's initial theta (as ``gp.py``'s evaluation timing); the last
of ``--reps`` evaluations is reported.

Usage (GPU)::

    python benchmarks/gp_timeline.py --n 20000 --out /tmp/timeline.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import write_json_atomic  # noqa: E402
from gp import kernel_for, make_data  # noqa: E402


def instrument(marks):
    """Wrap the evaluation's sections so that each appends (name, host seconds, CUDA event) to
    ``marks`` at entry and exit."""
    import torch

    from kernelkit.operators import fused
    from kernelkit.operators import fused_tree
    from kernelkit.estimators.gp import _lml
    from kernelkit.operators import covariance
    from kernelkit.estimators.gp import regressor
    from kernelkit.linalg import cg
    from kernelkit.linalg import precond

    def mark(name):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        marks.append((name, time.perf_counter(), event))

    def wrap(owner, attr, label):
        inner = getattr(owner, attr)

        def wrapped(*a, **k):
            mark(label + ">")
            out = inner(*a, **k)
            mark(label + "<")
            return out

        setattr(owner, attr, wrapped)

    for owner, attr, label in [
        (regressor.GaussianProcessRegressor, "_operator", "operator"),
        (regressor.GaussianProcessRegressor, "_probes", "probes"),
        (_lml, "log_marginal_likelihood", "lml"),
        (covariance.CovarianceOperator, "kernel_matrix", "kernel_matrix"),
        (fused_tree, "_leaf_numbers", "leaf_numbers"),
        (_lml, "preconditioner", "preconditioner"),
        (fused, "landmark_columns", "landmark_columns"),
        (precond, "_nystrom_parts", "nystrom_parts"),
        (precond, "_form_numbers", "form_numbers"),
        (_lml, "solve", "solve"),
        (cg, "_pcg", "cg_pass"),
        (covariance.CovarianceOperator, "matmul", "product"),
        (fused, "bilinear", "contraction"),
        (_lml, "lanczos_quadrature", "quadrature"),
        (torch.autograd, "grad", "backward"),
    ]:
        wrap(owner, attr, label)
    for cls in (fused._RBFColumns, fused._FusedBilinear, precond._WoodburyTerms,
                precond._Gram):
        inner = cls.backward

        def backward(ctx, *grads, _inner=inner, _name=cls.__name__):
            mark(_name + ".backward>")
            out = _inner(ctx, *grads)
            mark(_name + ".backward<")
            return out

        cls.backward = staticmethod(backward)
    return mark


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--d", type=int, default=8)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--out", required=True, help="JSON result path")
    args = p.parse_args(argv)
    if args.reps < 1:
        p.error("--reps must be >= 1")

    import torch

    import kernelkit

    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/gp_timeline.py needs a CUDA GPU")
    X, y, _, _ = make_data(args.n, 1, args.d)
    gp = kernelkit.GaussianProcessRegressor(kernel_for(args.d, kernelkit.RBF), random_state=0,
                                            optimizer=None).fit(X, y)
    theta = gp.kernel.theta
    marks = []
    mark = instrument(marks)
    for _ in range(args.reps):
        marks.clear()
        torch.cuda.synchronize()
        mark("start")
        start = time.perf_counter()
        gp.log_marginal_likelihood(theta, eval_gradient=True)
        mark("end")
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
    host0, event0 = marks[0][1], marks[0][2]
    rows = [dict(mark=name, host_ms=(host - host0) * 1e3, gpu_ms=event0.elapsed_time(event))
            for name, host, event in marks]
    products = [(b["host_ms"] - a["host_ms"], b["gpu_ms"] - a["gpu_ms"])
                for a, b in zip(rows, rows[1:]) if a["mark"] == "product>"
                and b["mark"] == "product<"]
    starts = [r for r in rows if r["mark"] == "product>"]
    steps = [dict(host_ms=b["host_ms"] - a["host_ms"], gpu_ms=b["gpu_ms"] - a["gpu_ms"])
             for a, b in zip(starts, starts[1:])]
    write_json_atomic(args.out, dict(
        benchmark="gp_timeline", args=vars(args), device=torch.cuda.get_device_name(),
        versions=dict(torch=torch.__version__), wall_ms=wall * 1e3, marks=rows,
        products=[dict(host_ms=h, gpu_ms=g) for h, g in products], cg_steps=steps))
    print(f"{torch.cuda.get_device_name()}, n = {args.n}: {wall * 1e3:.2f} ms")
    print(f"{'mark':28s} {'host':>8s} {'gpu':>8s} {'gpu - host':>10s}")
    for r in rows:
        if not r["mark"].startswith("product"):
            print(f"{r['mark']:28s} {r['host_ms']:8.2f} {r['gpu_ms']:8.2f} "
                  f"{r['gpu_ms'] - r['host_ms']:10.2f}")
    if steps:
        print(f"CG steps between products: {len(steps)}, host "
              f"{sum(s['host_ms'] for s in steps) / len(steps):.3f} ms, GPU "
              f"{sum(s['gpu_ms'] for s in steps) / len(steps):.3f} ms per step")


if __name__ == "__main__":
    main()
