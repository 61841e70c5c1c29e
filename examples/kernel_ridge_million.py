"""Kernel ridge regression on a million points in seconds on one GPU (Nystrom, M = 10^4).

    python examples/kernel_ridge_million.py [N [M]]

N training points (default 10^6 with a CUDA GPU, 10 000 on the CPU), M Nystrom landmarks (default
10^4 with a GPU, 1000 on the CPU); CG tolerance 1e-4 (the estimator's default is 1e-6). A progress
bar shows the conjugate-gradient iterations. Measured fit times at n = 10^6 are in
docs/benchmarks.md ("Kernel ridge regression"). On the CPU a million points would take many
minutes and several GB of memory; the defaults take about 6 s of CPU time.
"""
import sys

import torch
from sklearn.datasets import make_friedman1

from kernelkit import KernelRidge

gpu = torch.cuda.is_available()
n = int(float(sys.argv[1])) if len(sys.argv) > 1 else (1_000_000 if gpu else 10_000)
m = int(float(sys.argv[2])) if len(sys.argv) > 2 else (10_000 if gpu else 1000)
print(f"{'GPU' if gpu else 'CPU'}: n = {n}, M = {min(n, m)} landmarks", flush=True)
X, y = make_friedman1(n, n_features=20, noise=1.0, random_state=0)
X_test, y_test = make_friedman1(10_000, n_features=20, noise=1.0, random_state=1000)
model = KernelRidge(alpha=1e-6 * n, gamma=0.1, solver="nystrom", n_components=min(n, m),
                    tol=1e-4, verbose=True)
rmse = ((model.fit(X, y).predict(X_test) - y_test) ** 2).mean() ** 0.5
print(f"n = {n}: {model.n_iter_} CG iterations, test RMSE {rmse:.4f} (noise floor 1.0)")
