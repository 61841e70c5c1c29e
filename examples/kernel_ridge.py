"""Kernel ridge regression without the n x n matrix: kernelkit.KernelRidge, exact (CG) and Nyström.

    python examples/kernel_ridge.py [N]

N training points (default 2000: about 4 s of CPU time); with a GPU (device="auto") the same code
runs the Triton kernels.
"""
import sys

from sklearn.datasets import make_friedman1
from sklearn.kernel_ridge import KernelRidge as SKKernelRidge

from kernelkit import RBF, KernelRidge

n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
X, y = make_friedman1(n, n_features=10, noise=0.5, random_state=0)
X_test, y_test = make_friedman1(1000, n_features=10, noise=0.5, random_state=1)

exact = KernelRidge(alpha=0.01, kernel=RBF(length_scale=2.0), solver="cg",
                    n_components=min(n, 300), random_state=0).fit(X, y)
nystrom = KernelRidge(alpha=0.01, kernel=RBF(length_scale=2.0), solver="nystrom",
                      n_components=min(n, 600), random_state=0).fit(X, y)
dense = SKKernelRidge(alpha=0.01, kernel="rbf", gamma=1 / 8).fit(X, y)  # same model, O(n^3)
for name, model in [("kernelkit cg", exact), ("kernelkit nystrom", nystrom), ("sklearn", dense)]:
    iters = f"{model.n_iter_:3d} CG iterations" if hasattr(model, "n_iter_") else " " * 17
    print(f"{name:<18} {iters}  test R^2 {model.score(X_test, y_test):.4f}")
