"""Where the GP's exact path stops being the faster one: one LML + gradient evaluation, exact
(dense float64 Cholesky) vs iterative (default settings), at fixed hyperparameters.

Sets :data:`kernelkit.estimators.gp._exact.EXACT_MAX_N`. GPU: ``python benchmarks/gp_exact_threshold.py``
(n = 2000 ... 20 000, d = 8, ARD RBF + noise); ``--cpu`` times the CPU's paths (float64, no
Triton) at ``--sizes``, one run each after a warm-up; ``--smoke`` runs small sizes on the CPU
interpreter. Both paths' LML values are recorded (the iterative one is an estimate).
Writes ``results/gp-exact-threshold-<device>-<date>.json``.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
from _common import (check_mode, default_out, device_facts, log, now, versions, wall_s,
                     write_json_atomic)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="2000,5000,10000,15000,20000")
    p.add_argument("--features", type=int, default=8)
    p.add_argument("--smoke", action="store_true", help="CPU, n = 200 and 400")
    p.add_argument("--cpu", action="store_true", help="time the CPU paths at --sizes")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    dev = "cpu" if args.cpu else check_mode(__file__, args.smoke)
    sizes = [200, 400] if args.smoke else [int(s) for s in args.sizes.split(",")]

    from sklearn.gaussian_process.kernels import ConstantKernel, WhiteKernel

    import kernelkit as kk

    facts = device_facts(dev)
    if args.cpu:
        import os

        import torch
        facts = dict(name=f"cpu-{os.cpu_count()}-cores", threads=torch.get_num_threads())
    out = args.out or default_out("gp-exact-threshold", facts["name"])
    record = dict(date=now(), device=facts, versions=versions(), rows=[])
    kernel = ConstantKernel(1.0) * kk.RBF(np.ones(args.features)) + WhiteKernel(0.1)
    theta = kernel.theta + 0.1
    for n in sizes:
        rng = np.random.default_rng(0)
        X = rng.uniform(-3.0, 3.0, (n, args.features))
        y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)
        row = dict(n=n)
        for path, limit in (("exact", n), ("iterative", 0)):
            gp = kk.GaussianProcessRegressor(kernel, optimizer=None, device=dev, random_state=0,
                                             exact_max_n=limit)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                gp.fit(X, y)
                lml, _ = gp.log_marginal_likelihood(theta, eval_gradient=True)  # warm-up
                row[f"{path}_lml"] = float(lml)
                row[f"{path}_s"] = wall_s(
                    lambda: gp.log_marginal_likelihood(theta, eval_gradient=True), dev,
                    runs=1 if args.cpu else 3)
        log(row)
        record["rows"].append(row)
        write_json_atomic(out, record)


if __name__ == "__main__":
    main()
