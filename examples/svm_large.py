"""Support vector classification on kernelkit's batched SMO solver, beside scikit-learn's libsvm.

    python examples/svm_large.py [N] [--gpu]

N training points (default 3000: a few seconds of CPU time for each solver); ``--gpu`` runs
kernelkit on the GPU (``device="cuda"``; sizes of 10^4 and more are where it is meant to pay).
Both fit the same model (RBF kernel, the same C, gamma and tol), so their dual objectives and
test accuracies agree to the stopping tolerance.
"""
import sys
import time

import numpy as np
from sklearn.datasets import make_classification
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.svm import SVC as SKSVC

from kernelkit import SVC

args = [a for a in sys.argv[1:] if a != "--gpu"]
n = int(args[0]) if args else 3000
device = "cuda" if "--gpu" in sys.argv[1:] else "cpu"
X, y = make_classification(n + 2000, n_features=20, n_informative=8, flip_y=0.05,
                           random_state=0)
X, X_test, y, y_test = X[:n], X[n:], y[:n], y[n:]
settings = dict(C=1.0, gamma=0.05, tol=1e-3)


def dual_objective(model):
    """1/2 a^T Q a - sum |a| of a fitted binary SVC (dual_coef_ holds y_i a_i)."""
    coef = model.dual_coef_[0]
    K = rbf_kernel(model.support_vectors_, gamma=settings["gamma"])
    return 0.5 * coef @ K @ coef - np.abs(coef).sum()


for name, model in [("kernelkit", SVC(device=device, **settings)), ("sklearn", SKSVC(**settings))]:
    start = time.perf_counter()
    model.fit(X, y)
    seconds = time.perf_counter() - start
    print(f"{name:<10} fit {seconds:6.2f} s  support vectors {len(model.support_):5d}  "
          f"dual objective {dual_objective(model):.6f}  test accuracy "
          f"{model.score(X_test, y_test):.4f}")
