"""The GP's BBMM gradient: fused Triton contractions (kernelkit.operators.fused) vs autograd of blocks.

One log-marginal-likelihood + gradient evaluation of the iterative path
(:func:`kernelkit.estimators.gp._lml.log_marginal_likelihood`, the regressor's defaults: 16 probes, rank-100
preconditioner, cg_tol 1e-3) for ``ConstantKernel * RBF(ARD) + WhiteKernel``, d = 8, float32
products, at a fixed theta and the same probes, in two variants of the same run:

* ``fused``: the kernel part's gradient contractions from one pass of
  :func:`kernelkit_gpu.pairwise.contract_fused.kernel_contractions` (the default on CUDA);
* ``autograd``: :func:`kernelkit.operators.covariance.bilinear` (autograd through row blocks: the path
  before, and still the path for every other kernel tree), switched on by
  ``kernelkit.operators.fused_tree.DEVICES = ()``.

Reported per n: seconds of the whole evaluation (median of ``--runs`` after one warm-up), seconds
of the gradient contraction alone (the ``bilinear`` value + backward at the evaluation's columns
A, B), peak GPU memory of that part, and the errors of both variants' contraction gradients
against the autograd path on a float64 operator at the same A, B (for n <= ``--ref-max-n``):
max_i |g_i - ref_i| / max_i |ref_i|; and the LML gradients' difference between the variants.

GPU: ``PYTHONPATH=. python benchmarks/gp_fused_grad.py --out benchmarks/results/gp-fused-grad.json``
(n = 20 000 and 100 000); ``--smoke`` (with ``TRITON_INTERPRET=1``) runs n = 300 on the CPU.
"""

from __future__ import annotations

import argparse

import numpy as np

from _common import (check_mode, default_out, device_facts, log, now, peak_mib, versions, wall_s,
                     write_json_atomic)


def rel_err(a, ref):
    a, ref = np.asarray(a, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    return float(np.abs(a - ref).max() / np.abs(ref).max())


def seconds(fn, dev, runs):
    """Median wall-clock seconds of ``runs`` synchronised calls after one warm-up call."""
    fn()
    return wall_s(fn, dev, runs)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="20000,100000")
    p.add_argument("--features", type=int, default=8)
    p.add_argument("--n-probes", type=int, default=16)
    p.add_argument("--rank", type=int, default=100)
    p.add_argument("--cg-tol", type=float, default=1e-3)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--ref-max-n", type=int, default=20000,
                   help="largest n with the float64 autograd reference")
    p.add_argument("--smoke", action="store_true", help="CPU interpreter, n = 300")
    p.add_argument("--out", "--json", dest="out", default=None)
    args = p.parse_args(argv)
    dev = check_mode(__file__, args.smoke)
    sizes = [300] if args.smoke else [int(s) for s in args.sizes.split(",")]

    import torch
    from sklearn.gaussian_process.kernels import RBF
    from sklearn.gaussian_process.kernels import ConstantKernel as C
    from sklearn.gaussian_process.kernels import WhiteKernel as W

    from kernelkit.operators import fused as _fused
    from kernelkit.operators import fused_tree
    from kernelkit.estimators.gp._lml import SolverSettings, log_marginal_likelihood, make_probes
    from kernelkit.operators.covariance import CovarianceOperator
    from kernelkit.operators.kernel_tree import parse_kernel

    fused_devices = (dev,)  # the smoke run switches the fused path on for the CPU
    d = args.features
    kernel = C(1.0) * RBF(np.linspace(0.5, 2.0, d)) + W(0.01)
    facts = device_facts(dev)
    out = args.out or default_out("gp-fused-grad", facts["name"])
    record = dict(date=now(), device=facts, versions=versions(), d=d, kernel=str(kernel),
                  n_probes=args.n_probes, rank=args.rank, cg_tol=args.cg_tol, dtype="float32",
                  rows=[])
    settings = SolverSettings(args.n_probes, args.cg_tol, 1000, args.rank)
    for n in sizes:
        rng = np.random.default_rng(n)
        X = rng.uniform(-1.0, 1.0, (n, d))
        y = np.sin(X @ rng.standard_normal(d)) + 0.1 * rng.standard_normal(n)
        op = CovarianceOperator(X, parse_kernel(kernel), 1e-10, dev, torch.float32)
        probes = make_probes(n, min(args.rank, n), args.n_probes, 0, dev)
        y_t = torch.as_tensor(y, device=dev)
        row = dict(n=n, dense_K=bool(op.dense))

        columns = []
        fused_bilinear = _fused.bilinear

        def spy(op_, theta, A, B):
            columns.append((theta.detach().clone(), A.detach().clone(), B.detach().clone()))
            return fused_bilinear(op_, theta, A, B)

        grads = {}
        for variant, devices in (("fused", fused_devices), ("autograd", ())):
            fused_tree.DEVICES = devices
            assert (_fused.fused_tree(op) is not None) == (variant == "fused")

            def lml():
                return log_marginal_likelihood(op, kernel.theta, y_t, probes, settings,
                                               eval_gradient=True)

            _fused.bilinear = spy
            try:
                grads[variant] = lml()[1]
            finally:
                _fused.bilinear = fused_bilinear
            row[f"{variant}_lml_grad_s"] = seconds(lml, dev, args.runs)
        fused_tree.DEVICES = ("cuda",)
        theta, A, B = columns[0]

        def contraction(o, devices):
            def run():
                fused_tree.DEVICES = devices
                th = theta.clone().requires_grad_(True)
                (g,) = torch.autograd.grad(_fused.bilinear(o, th, A, B), th)
                return g.cpu().numpy()
            return run

        variants = {"fused": contraction(op, fused_devices), "autograd": contraction(op, ())}
        ref = None
        if n <= args.ref_max_n:
            ref = contraction(op.with_dtype(torch.float64), ())()
        for variant, fn in variants.items():
            g = fn()
            row[f"{variant}_contraction_s"] = seconds(fn, dev, args.runs)
            row[f"{variant}_contraction_peak_MiB"] = peak_mib(fn, dev)
            row[f"{variant}_contraction_err"] = None if ref is None else rel_err(g, ref)
        fused_tree.DEVICES = ("cuda",)
        row["lml_grad_fused_vs_autograd"] = rel_err(grads["fused"], grads["autograd"])
        row["speedup_lml_grad"] = row["autograd_lml_grad_s"] / row["fused_lml_grad_s"]
        row["speedup_contraction"] = row["autograd_contraction_s"] / row["fused_contraction_s"]
        log(row)
        record["rows"].append(row)
        write_json_atomic(out, record)

    def fmt(v, spec):
        return "-".rjust(int(spec.split(".")[0])) if v is None else format(v, spec)

    log(f"\n{facts['name']}, {record['kernel']}, float32, {args.n_probes} probes, "
        f"rank {args.rank} (seconds; err vs float64 autograd)")
    log(f"{'n':>7} {'LML+grad fused':>15} {'autograd':>9} {'x':>6} {'contract fused':>15} "
        f"{'autograd':>9} {'x':>6} {'err fused':>10} {'err autog':>10}")
    for r in record["rows"]:
        log(f"{r['n']:>7} {r['fused_lml_grad_s']:>15.3f} {r['autograd_lml_grad_s']:>9.3f} "
            f"{r['speedup_lml_grad']:>6.1f} {r['fused_contraction_s']:>15.4f} "
            f"{r['autograd_contraction_s']:>9.4f} {r['speedup_contraction']:>6.1f} "
            f"{fmt(r['fused_contraction_err'], '10.1e')} "
            f"{fmt(r['autograd_contraction_err'], '10.1e')}")
    log(f"JSON: {out}")
    return record


if __name__ == "__main__":
    main()
