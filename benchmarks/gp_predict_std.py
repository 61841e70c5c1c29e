"""Predictive mean and standard deviation on the CPU: kernelkit's GaussianProcessRegressor
against scikit-learn's, same data, kernel and hyperparameters (no optimisation).

Issue 17's floor: 10^4 test points at n = 10^4 on the CPU within 2x scikit-learn's time. Data as
``benchmarks/gp.py`` (d = 8), kernel ``ConstantKernel(1) * RBF(ones(8)) + WhiteKernel(0.05)``;
both fits are exact there (kernelkit's exact path covers n <= 10^4). Records the fit and predict
times and the largest difference between the two standard deviations. Usage::

    OMP_NUM_THREADS=2 python benchmarks/gp_predict_std.py --n 10000 --n-test 10000 \\
        --out benchmarks/results/gp-predict-std-cpu-2core-2026-11-26.json
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from _common import log, now, write_json_atomic
from gp import make_data


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--n-test", type=int, default=10_000)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)

    import sklearn
    import torch
    from sklearn.gaussian_process import GaussianProcessRegressor as SklearnGPR
    from sklearn.gaussian_process.kernels import RBF
    from sklearn.gaussian_process.kernels import ConstantKernel as C
    from sklearn.gaussian_process.kernels import WhiteKernel as W

    import kernelkit

    X, y, Xt, _ = make_data(args.n, args.n_test, 8)
    models = {
        "kernelkit": kernelkit.GaussianProcessRegressor(
            C(1.0) * kernelkit.RBF(np.ones(8)) + W(0.05), optimizer=None, device="cpu"),
        "sklearn": SklearnGPR(C(1.0) * RBF(np.ones(8)) + W(0.05), optimizer=None),
    }
    record = dict(date=now(), device=f"cpu-{os.cpu_count()}-cores",
                  threads=torch.get_num_threads(), n=args.n, n_test=args.n_test,
                  versions=dict(torch=torch.__version__, sklearn=sklearn.__version__))
    std = {}
    for name, model in models.items():
        t0 = time.perf_counter()
        model.fit(X, y)
        record[f"{name}_fit_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        _, std[name] = model.predict(Xt, return_std=True)
        record[f"{name}_predict_std_s"] = time.perf_counter() - t0
    record["ratio_predict_std"] = record["kernelkit_predict_std_s"] / record["sklearn_predict_std_s"]
    record["max_std_difference"] = float(np.abs(std["kernelkit"] - std["sklearn"]).max())
    write_json_atomic(args.out, record)
    log({k: (round(v, 3) if isinstance(v, float) else v) for k, v in record.items()})


if __name__ == "__main__":
    main()
