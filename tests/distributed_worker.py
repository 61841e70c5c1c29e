"""One rank of the distributed tests (tests/test_distributed.py starts 2 or 3 of these).

Run as ``python tests/distributed_worker.py DIR [SCENARIO [DEVICE]]`` with RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT set (env:// rendezvous, gloo over CPU tensors). Every check of a
scenario runs in this one process (start-up dominates); the results go to
``DIR/rank<R>.npz`` and the errors each check raised to ``DIR/rank<R>.json``, for the test to
compare with the single-process or float64 reference results it computes itself. Inputs come
from :func:`inputs`, shared with the test. The checks of the Triton products (kernel_matvec,
KernelRidge's Triton products, the GP's fused gradient pass) run on DEVICE: "cpu" (the Triton
interpreter: the test sets TRITON_INTERPRET=1) or "cuda"; everything else on the CPU. With
SCENARIO ``die`` the last rank ends its process (os._exit) while writing a Gram file, and the
others record what they raised. SCENARIO ``svm`` runs the checks of the support vector machines
(:func:`svm_fits` and the errors; tests/test_distributed_svm.py), their kernel rows on DEVICE.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import sys
import time

import numpy as np


def inputs():
    """The data of every check, the same in the test and on every rank."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(7, 3)) + 1000.0  # offset data
    Y = rng.normal(size=(5, 3))
    V = rng.normal(size=(5, 2))
    U = rng.normal(size=(7, 2))
    Xr = rng.uniform(-2, 2, size=(40, 2))
    yr = np.stack([np.sin(Xr[:, 0]), np.cos(Xr[:, 1])], axis=1)
    w = rng.uniform(0.5, 2.0, size=40)
    Xg = rng.normal(size=(37, 5))  # the Gram file of every registry kernel
    Yg = rng.normal(size=(11, 5))
    Xi = rng.integers(-5, 6, size=(6, 3))  # integer data: a permutation keeps every sum
    return dict(X=X, Y=Y, V=V, U=U, X2=X[:2], Xr=Xr, yr=yr, w=w, Xg=Xg, Yg=Yg, Xi=Xi)


#: Block sizes of the Gram files of every registry kernel: the default (256 on the CPU) and one
#: larger than ceil(37 / world) for 2 and 3 ranks (such a block is not cut for the ranks).
GRAM_BLOCK_SIZES = (None, 20)


def ridge(device="cpu", **kw):
    from kernelkit import KernelRidge

    kw = {"alpha": 1e-2, "kernel": "rbf", "gamma": 0.5, "tol": 1e-10, "max_iter": 200, **kw}
    return KernelRidge(device=device, **kw)


def gp(kernel=None, device="cpu", **kw):
    """The GP of the distributed checks (float64): iterative path unless told otherwise,
    a preconditioner of rank 5 (so CG iterates), CG to 1e-10 (so runs that stop an iteration
    apart still agree to 1e-7)."""
    from sklearn.gaussian_process.kernels import RBF, WhiteKernel
    from sklearn.gaussian_process.kernels import ConstantKernel as C

    from kernelkit import GaussianProcessRegressor

    kernel = (C(1.0) * RBF([1.0, 1.0]) + WhiteKernel(0.1, noise_level_bounds=(1e-2, 1.0))
              if kernel is None else kernel)
    kw = {"exact_max_n": 0, "random_state": 0, "preconditioner_rank": 5, "cg_tol": 1e-10,
          "max_cg_iter": 200, **kw}
    return GaussianProcessRegressor(kernel=kernel, device=device, **kw)


def gp_summary(model, Z, grad=True):
    """Fitted hyperparameters, log-likelihood, alpha_, the predictive mean and std at Z, and the
    log-likelihood gradient at the fitted theta, as one flat array."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mean, std = model.predict(Z, return_std=True)
        parts = [model.kernel_.theta, [model.log_marginal_likelihood_value_],
                 model.alpha_.ravel(), mean.ravel(), std.ravel()]
        if grad:
            parts.append(model.log_marginal_likelihood(model.kernel_.theta, True)[1])
    return np.concatenate([np.ravel(p) for p in parts])


def gp_fits(data, fused_device=None):
    """``{name: callable}`` of the GP checks, shared by the worker and the test (one process).

    ``fused_device``: where "gp_fused" runs the fused gradient pass ("cpu": the interpreter, or
    "cuda"); None (the test's reference) fits the same GP on the CPU without it."""
    import warnings

    from sklearn.gaussian_process.kernels import RBF, WhiteKernel

    Xr, yr, X, U = data["Xr"], data["yr"], data["X"], data["U"]
    iso = RBF(1.0) + WhiteKernel(0.1)

    def fit(model, X, y):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # L-BFGS stopped early, on purpose
            return model.fit(X, y)

    def chunked():
        """K never dense, row chunks of 2 rows: chunk boundaries inside the ranks' shards."""
        from kernelkit.operators import covariance

        saved = covariance.DENSE_CPU_BYTES, covariance.BLOCK_ELEMENTS
        covariance.DENSE_CPU_BYTES, covariance.BLOCK_ELEMENTS = 0, 14
        try:
            return gp_summary(fit(gp(iso, optimizer=None), X, U[:, 1]), X[:3])
        finally:
            covariance.DENSE_CPU_BYTES, covariance.BLOCK_ELEMENTS = saved

    def fused():
        """The gradient's contractions from the fused Triton pass on ``fused_device`` (float64),
        each rank on its rows, sums all-reduced; fails unless the pass ran (not the autograd
        fallback). Without ``fused_device``: the same fit on the CPU, autograd."""
        if fused_device is None:
            return gp_summary(fit(gp(optimizer=None), Xr[:23], yr[:23, 0]), Xr[:3])
        from kernelkit.operators import fused_tree
        from kernelkit_gpu.pairwise import contract_fused

        saved, original = fused_tree.DEVICES, contract_fused.kernel_contractions
        calls = []

        def counted(*args, **kwargs):
            calls.append(kwargs.get("rows"))
            return original(*args, **kwargs)

        fused_tree.DEVICES, contract_fused.kernel_contractions = (fused_device,), counted
        try:
            model = gp(optimizer=None, device=fused_device, dtype="float64")
            out = gp_summary(fit(model, Xr[:23], yr[:23, 0]), Xr[:3])
        finally:
            fused_tree.DEVICES, contract_fused.kernel_contractions = saved, original
        assert calls, "the fused pass did not run"
        return out

    return {
        "gp_fused": fused,
        "gp_chunked": chunked,
        "gp_fit": lambda: gp_summary(fit(gp(optimizer_max_iter=2), Xr[:20], yr[:20, 0]),
                                     Xr[:5]),
        "gp_uneven": lambda: gp_summary(fit(gp(iso, optimizer=None), X, U), X[:3]),
        "gp_small": lambda: gp_summary(fit(gp(iso, optimizer=None), X[:2], U[:2, 0]), X[:3]),
        "gp_float32": lambda: gp_summary(fit(gp(iso, optimizer=None, dtype="float32",
                                                cg_tol=1e-6), X, U[:, 0]), X[:3]),
        "gp_exact": lambda: gp_summary(fit(gp(exact_max_n=None, optimizer_max_iter=3), Xr,
                                           yr[:, 1]), Xr[:5]),
    }


def svm_inputs():
    """The data of the SVM checks, the same in the test and on every rank."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(700, 3))  # more than a working set (512): candidates from every rank
    y = (X[:, 0] * X[:, 1] + 0.3 * rng.normal(size=700) > 0).astype(int)
    Xm = rng.normal(size=(90, 2))
    ym = np.digitize(Xm[:, 0] + 0.3 * rng.normal(size=90), [-0.5, 0.5])  # three classes
    wm = rng.uniform(0.2, 2.0, size=90)
    wm[::9] = 0.0  # left out of the fit, as libsvm does
    Xs = rng.uniform(-3.0, 3.0, size=(300, 2))  # SVR: 600 variables
    ys = np.sin(Xs[:, 0]) + 0.1 * Xs[:, 1]
    return dict(X=X, y=y, Xm=Xm, ym=ym, wm=wm, Xs=Xs, ys=ys)


def svm_summary(model):
    """The fitted attributes of an SVM as one flat float64 array (integers exactly): the number
    of support vectors, ``support_``, ``n_support_``, ``dual_coef_``, ``intercept_``,
    ``n_iter_``, ``fit_status_`` and, where fitted, ``probA_`` and ``probB_``."""
    parts = [[len(model.support_)], model.support_, model.n_support_, model.dual_coef_,
             model.intercept_, model.n_iter_, [model.fit_status_],
             getattr(model, "probA_", []), getattr(model, "probB_", [])]
    return np.concatenate([np.ravel(np.asarray(p, dtype=np.float64)) for p in parts])


def svm_fits(data, device="cpu"):
    """``{name: callable}`` of the SVM checks, shared by the worker and the test (one process):
    each fits on ``device`` and returns :func:`svm_summary`. svc_tiny and one_class_tiny have 2
    points, so on 3 ranks one rank owns none."""
    from kernelkit import SVC, SVR, OneClassSVM
    from kernelkit_math import get_kernel

    X, y, Xm, ym, wm, Xs, ys = (data[k] for k in ("X", "y", "Xm", "ym", "wm", "Xs", "ys"))

    def fit(model, *args, **kwargs):
        return svm_summary(model.fit(*args, **kwargs))

    K = get_kernel("rbf").value(Xm[:50], gamma=0.5)
    return {
        "svc": lambda: fit(SVC(C=10.0, device=device), X, y),
        "svc_multiclass": lambda: fit(SVC(C=3.0, class_weight="balanced", device=device), Xm,
                                      ym, sample_weight=wm),
        "svc_precomputed": lambda: fit(SVC(kernel="precomputed"), K, ym[:50]),
        "svc_probability": lambda: fit(SVC(probability=True, random_state=0, device=device),
                                       X[:40], y[:40]),
        "svr": lambda: fit(SVR(C=3.0, epsilon=0.05, device=device), Xs, ys),
        "one_class": lambda: fit(OneClassSVM(nu=0.2, device=device), Xs[:200]),
        "svc_tiny": lambda: fit(SVC(device=device), X[:2], [0, 1]),
        "one_class_tiny": lambda: fit(OneClassSVM(nu=0.5, device=device), X[:2]),
    }


def _svm_columns(data, device):
    """The widths (columns) of the kernel blocks an SVC fit computed on this rank: [fewest,
    most, calls]."""
    from kernelkit import SVC
    from kernelkit.operators.kernel_operator import KernelOperator

    widths, block = [], KernelOperator.block

    def spy(self, A, B=None):
        widths.append(len(A if B is None else B))
        return block(self, A, B)

    KernelOperator.block = spy
    try:
        SVC(C=10.0, device=device).fit(data["X"], data["y"])
    finally:
        KernelOperator.block = block
    return np.array([min(widths), max(widths), len(widths)])


def _svm_rows_fail(data, rank, size, device):
    """The last rank runs out of memory in its kernel rows (the first, of the start's gradient):
    every rank must raise."""
    from kernelkit import OneClassSVM
    from kernelkit.operators.kernel_operator import KernelOperator

    block = KernelOperator.block

    def fail(self, A, B=None):
        raise MemoryError("injected: no memory for this rank's kernel rows")

    if rank == size - 1:
        KernelOperator.block = fail
    try:
        return svm_summary(OneClassSVM(device=device).fit(data["Xs"][:50]))
    finally:
        KernelOperator.block = block


def _svm_checks(rank, size, device):
    """``{name: callable returning an array}`` of the SVM scenario; each runs on every rank."""
    from kernelkit import SVC, SVR

    data = svm_inputs()
    X, y, Xs, ys = data["X"][:60], data["y"][:60], data["Xs"][:30], data["ys"][:30]
    X_nan = X.copy()
    X_nan[5, 1] = np.nan if rank == size - 1 else X_nan[5, 1]  # in the last rank's copy only
    return {
        **svm_fits(data, device),
        # random_state=None: rank 0's seed of the cross-validation folds on every rank
        "svc_unseeded": lambda: svm_summary(SVC(probability=True, device=device).fit(X[:40],
                                                                                     y[:40])),
        "svm_columns": lambda: _svm_columns(data, device),
        "error_svc_data": lambda: svm_summary(SVC(device=device).fit(X, np.roll(y, rank))),
        "error_svr_params": lambda: svm_summary(SVR(C=1.0 + rank, device=device).fit(Xs, ys)),
        "error_svc_nan": lambda: svm_summary(SVC(device=device).fit(X_nan, y)),
        "error_svm_rows": lambda: _svm_rows_fail(data, rank, size, device),
    }


def _gp_rows(data):
    """This rank's (lo, hi) and the row counts its K @ V products computed."""
    from kernelkit.operators.covariance_sharded import ShardedCovarianceOperator

    seen = []
    original = ShardedCovarianceOperator._matmul_rows

    def counted(self, V, params):
        out = original(self, V, params)
        seen.append(out.shape[0])
        return out

    ShardedCovarianceOperator._matmul_rows = counted
    try:
        model = gp(optimizer=None).fit(data["Xr"][:7], data["yr"][:7, 0])
        op = model._operator(_structure(model))
    finally:
        ShardedCovarianceOperator._matmul_rows = original
    # the predictive mean: blocks k(Z, X) over this rank's training rows only
    cross, block = [], ShardedCovarianceOperator.block

    def cross_block(self, A, B, *args, **kwargs):
        cross.append(B.shape[0])
        return block(self, A, B, *args, **kwargs)

    ShardedCovarianceOperator.block = cross_block
    try:
        model.predict(data["Xr"][:5])
    finally:
        ShardedCovarianceOperator.block = block
    return np.array([*op.rows, min(seen), max(seen), len(seen), min(cross), max(cross)])


def _structure(model):
    from kernelkit.operators.kernel_tree import parse_kernel

    return parse_kernel(model.kernel_, model.X_train_.shape[1])


def _gp_raises(data, rank, size):
    """The last rank runs out of memory in its rows of K @ V: every rank must raise."""
    from kernelkit.operators.covariance_sharded import ShardedCovarianceOperator

    original = ShardedCovarianceOperator._matmul_rows

    def fail(self, V, params):
        raise MemoryError("injected: no memory for this rank's rows")

    if rank == size - 1:
        ShardedCovarianceOperator._matmul_rows = fail
    try:
        return gp(optimizer=None).fit(data["Xr"], data["yr"][:, 0]).alpha_
    finally:
        ShardedCovarianceOperator._matmul_rows = original


def _gp_linalg(data, rank, size):
    """The last rank's preconditioner is not positive definite: every rank raises
    LinAlgError (which the regressor's L-BFGS objective turns into -inf)."""
    import torch

    from kernelkit.estimators.gp import _lml
    from kernelkit.estimators.gp._checks import check_params

    original = _lml.preconditioner

    def fail(*args, **kwargs):
        raise torch.linalg.LinAlgError("injected: not positive definite")

    if rank == size - 1:
        _lml.preconditioner = fail
    try:
        model = gp(optimizer=None)
        objective = []
        try:
            model.fit(data["Xr"], data["yr"][:, 0])
        except torch.linalg.LinAlgError as exc:  # the final LML at the fixed theta
            objective.append(str(exc))
        structure = _structure(model)
        lml_at = model._lml_function(model._operator(structure), check_params(model))
        return np.array([len(objective), lml_at(model.kernel_.theta, True)[0]])
    finally:
        _lml.preconditioner = original


def _checks(data, outdir, rank, size, device):
    """``{name: callable returning an array}``; each runs on every rank. The Triton products
    run on ``device``."""
    import torch

    import kernelkit
    import kernelkit_gpu
    from kernelkit_gpu import distributed as D

    X, Y, V, U, X2 = (data[k] for k in ("X", "Y", "V", "U", "X2"))
    last = rank == size - 1
    ordered = np.roll(data["Xi"], rank, axis=0)  # the same rows, in another order on rank > 0
    y_nan = data["yr"][:, 0].copy()
    y_nan[3] = np.nan if last else y_nan[3]  # a NaN in the last rank's copy only

    def t(a):
        return torch.from_numpy(a).to(device)

    def matvec(*args, **kw):
        return kernelkit_gpu.kernel_matvec(*args, **kw).cpu().numpy()

    def gram_file(name, A, B=None, **kw):
        path = os.path.join(outdir, name)
        assert kernelkit.gram(A, B, out=path, **kw) == path
        return np.load(path)

    def gram_kernels(B):
        """The Gram file K(Xg, B) of every registry kernel, at each of GRAM_BLOCK_SIZES, on the
        run's device."""
        from kernelkit_math import kernel_names

        return np.stack([gram_file(f"K-{name}-{bs}.npy", data["Xg"], B, kernel=name,
                                   block_size=bs, device=device)
                         for name in kernel_names() for bs in GRAM_BLOCK_SIZES])

    def streamed():
        from kernelkit_gpu.pairwise.matvec_streamed import kernel_matvec_streamed

        lo, hi = D.shard(X.shape[0])
        mo, mi = D.shard(Y.shape[0])
        part = kernel_matvec_streamed(t(X[lo:hi]), t(Y[mo:mi]), t(V[mo:mi]), "rbf", gamma=0.5)
        return D.all_gather_rows(part, X.shape[0]).cpu().numpy()

    def cli():
        from kernelkit.cli import main

        np.save(os.path.join(outdir, "Xcli.npy"), X)
        out = os.path.join(outdir, "Kcli.npy")
        code = main(["gram", os.path.join(outdir, "Xcli.npy"), "--kernel", "laplacian",
                     "--block-size", "2", "--device", "cpu", "--out", out])
        assert code == 0
        return np.load(out)

    @functools.lru_cache(maxsize=None)
    def gp_model():  # one fitted GP for the checks of its other calls
        return gp(optimizer=None).fit(data["Xr"][:9], data["yr"][:9, 0])

    return {
        "gram_xx": lambda: kernelkit.gram(X, kernel="rbf", gamma=0.3, block_size=2, device="cpu"),
        "gram_xy": lambda: kernelkit.gram(X, Y, kernel="matern", nu=1.5, device="cpu"),
        "gram_small": lambda: kernelkit.gram(X2, kernel="rbf", block_size=1, device="cpu"),
        "gram_file_xx": lambda: gram_file("K.npy", X.astype(np.float32), kernel="laplacian",
                                          block_size=2, device="cpu"),
        "gram_file_small": lambda: gram_file("K2.npy", X2, block_size=1, device="cpu"),
        "gram_kernels_xx": lambda: gram_kernels(None),
        "gram_kernels_xy": lambda: gram_kernels(data["Yg"]),
        "matvec64": lambda: matvec(t(X), t(Y), t(V), "rbf", gamma=0.5),
        "matvec32": lambda: matvec(t(X).float(), t(Y).float(), t(V[:, 0]).float(), "linear"),
        "matvec_t": lambda: matvec(t(X), t(Y), t(U), "laplacian", transpose=True),
        "matvec_small": lambda: matvec(t(X2), t(Y), t(V), "rbf"),
        "matvec_streamed": streamed,
        "cli_gram": cli,
        "ridge_nystrom": lambda: ridge(solver="nystrom", n_components=12, random_state=0).fit(
            data["Xr"], data["yr"], sample_weight=data["w"]).predict(data["Xr"][:5]),
        "ridge_nystrom_coef": lambda: ridge(solver="nystrom", n_components=12, random_state=0).fit(
            data["Xr"], data["yr"][:, 0]).dual_coef_,
        "ridge_unseeded": lambda: ridge(solver="nystrom", n_components=12).fit(
            data["Xr"], data["yr"][:, 0]).dual_coef_,
        "ridge_cg": lambda: ridge(solver="cg", n_components=8, random_state=0).fit(
            data["Xr"], data["yr"][:, 0]).dual_coef_,
        "ridge_cg_triton": lambda: _ridge_triton(data, device),
        "ridge_memory": lambda: _ridge_memory(data, rank),
        # every rank must raise the same error: the NaN is in the last rank's rows only
        "error_nan_rows": lambda: matvec(t(np.vstack([X[:-1], [[np.nan] * 3]])), t(Y), t(V),
                                         "rbf"),
        "error_shapes": lambda: matvec(t(X[:5 + rank]), t(Y), t(V), "rbf"),
        "error_values": lambda: matvec(t(X), t(Y), t(V + rank), "rbf"),  # unseeded probes
        "error_matvec_order": lambda: matvec(t(ordered.astype(np.float64)), t(Y), t(V),
                                             "rbf"),
        "error_gram_order": lambda: kernelkit.gram(ordered, kernel="linear", device="cpu"),
        "error_gram_out": lambda: kernelkit.gram(X, out=os.path.join(outdir, f"out{rank}.npy"),
                                                 device="cpu"),
        "error_write": lambda: _failing_write(X, outdir, rank, size),
        "error_unicode": lambda: D.agree(lambda: b"\xff".decode() if last else ""),
        "error_foreign_value": lambda: D.agree(_raise_foreign, last),
        "error_ridge_nan": lambda: ridge(solver="nystrom", n_components=12, random_state=0).fit(
            data["Xr"], y_nan),
        "error_ridge_data": lambda: ridge(solver="nystrom", n_components=12, random_state=0).fit(
            data["Xr"], data["yr"][:, 0] + rank),
        "error_ridge_plan": lambda: _ridge_memory(data, rank, refuse=0),
        "local": lambda: _local(X, Y, V, device),
        **gp_fits(data, fused_device=device),
        "gp_rows": lambda: _gp_rows(data),
        "error_gp_rank": lambda: _gp_raises(data, rank, size),
        "gp_linalg": lambda: _gp_linalg(data, rank, size),
        # random_state=None: rank 0's probes and restart points on every rank
        "gp_unseeded": lambda: gp(random_state=None, n_restarts_optimizer=1,
                                  optimizer_max_iter=1).fit(data["Xr"][:9], data["yr"][:9, 0]
                                                            ).alpha_,
        "error_gp_data": lambda: gp(optimizer=None).fit(data["Xr"], data["yr"][:, 0] + rank
                                                        ).alpha_,
        "error_gp_nan": lambda: gp(optimizer=None).fit(data["Xr"], y_nan).alpha_,
        "error_gp_predict": lambda: gp_model().predict(data["Xr"][:3] + rank),
        "error_gp_predict_rows": lambda: gp_model().predict(data["Xr"][:3 + rank],
                                                            return_std=True)[1],
        "error_gp_sample": lambda: gp_model().sample_y(data["Xr"][:3], n_samples=1 + rank),
        "gp_sample_unseeded": lambda: gp_model().sample_y(data["Xr"][:3], n_samples=2,
                                                          random_state=None),
        "error_gp_lml": lambda: gp_model().log_marginal_likelihood(
            gp_model().kernel_.theta + rank, eval_gradient=True)[1],
    }


class _Refused(ValueError):
    """A ValueError subclass from outside the built-ins (as scikit-learn's NotFittedError)."""


def _raise_foreign(last):
    if last:
        raise _Refused("refused on purpose")


def _ridge_triton(data, device):
    """solver="cg" with the Triton products (on the CPU through kernel_matvec under the
    interpreter, on "cuda" the GPU path) and the exact Nyström preconditioner."""
    from kernelkit.operators import kernel_operator

    kernel_operator.TRITON_ON_CPU = device == "cpu"
    try:
        model = ridge(device=device, solver="cg", n_components=10, random_state=0)
        return model.fit(data["Xr"][:10], data["yr"][:10, 0]).dual_coef_
    finally:
        kernel_operator.TRITON_ON_CPU = False


def _ridge_memory(data, rank, refuse=None):
    """A Nyström fit with a dense fallback (tol=1e-30, out of CG's reach: "auto" takes all
    n = 40 rows as landmarks, a system CG solves to 1e-10 in one step) while the ranks read
    different free memory: rank ``refuse`` (None: every rank but 0, with
    n_components="auto") reads 1 byte, too little for any plan. Returns [M, dense fallback,
    coefficients]."""
    from kernelkit.estimators import _ridge_memory as _memory

    real = _memory.available_bytes
    if rank == refuse or (refuse is None and rank != 0):
        _memory.available_bytes = lambda where: 1
    try:
        model = ridge(solver="nystrom", n_components="auto" if refuse is None else 12,
                      max_iter=2, tol=1e-30, random_state=0).fit(data["Xr"], data["yr"][:, 0])
    finally:
        _memory.available_bytes = real
    return np.concatenate([[model.n_components_, model.dense_fallback_], model.dual_coef_])


def _failing_write(X, outdir, rank, size):
    """The last rank fails while writing its rows: no file, no temporary file may remain."""
    from kernelkit import blocked_gram

    real = blocked_gram._fill_rows_sequential

    def fail(*args, **kwargs):
        if rank == size - 1:
            raise OSError("disk went away on purpose")
        return real(*args, **kwargs)

    blocked_gram._fill_rows_sequential = fail
    try:
        import kernelkit

        kernelkit.gram(X, out=os.path.join(outdir, "failed", "K.npy"), block_size=1, device="cpu")
    finally:
        blocked_gram._fill_rows_sequential = real


def _local(X, Y, V, device):
    """Inside local() each rank computes alone (a different X per rank proves it)."""
    import torch

    import kernelkit_gpu
    from kernelkit_gpu import distributed as D

    rank, _ = D.world()
    x, y, v = (torch.from_numpy(a).to(device) for a in (X[rank:rank + 1], Y, V))
    with D.local():
        assert not D.active()
        out = kernelkit_gpu.kernel_matvec(x, y, v, "rbf")
    return out.cpu().numpy()


def _die(X, outdir, rank, size):
    from kernelkit import blocked_gram

    real = blocked_gram._fill_rows_sequential

    def die(*args, **kwargs):
        if rank == size - 1:
            os._exit(3)
        return real(*args, **kwargs)

    blocked_gram._fill_rows_sequential = die
    import kernelkit

    kernelkit.gram(X, out=os.path.join(outdir, "died", "K.npy"), block_size=1, device="cpu")


#: Work this rank did in the current check: Gram entries (kernelkit.gram's block function),
#: output rows of the Triton K @ V launcher (in all, and the most in one call), the most rows of
#: one call of the solvers' kernel row blocks.
WORK = np.zeros(4, dtype=np.int64)


def _install_spies():
    """Count the work each rank does, to prove that the ranks shared it out."""
    from kernelkit import blocked_gram
    from kernelkit.operators import kernel_operator
    from kernelkit_gpu.pairwise import matvec_fused

    block_value, matvec_fwd = blocked_gram._block_value, matvec_fused.matvec_fwd
    row_blocks = kernel_operator.KernelOperator.row_blocks

    def counted_block(spec, A, B, *args, **kwargs):
        WORK[0] += A.shape[0] * (A.shape[0] if B is None else B.shape[0])
        return block_value(spec, A, B, *args, **kwargs)

    def counted_matvec(ops, plan, v2, out, *args, **kwargs):
        WORK[1] += out.shape[0]
        WORK[2] = max(WORK[2], out.shape[0])
        return matvec_fwd(ops, plan, v2, out, *args, **kwargs)

    def counted_rows(self, A, B):
        WORK[3] = max(WORK[3], A.shape[0])
        return row_blocks(self, A, B)

    blocked_gram._block_value = counted_block
    matvec_fused.matvec_fwd = counted_matvec
    kernel_operator.KernelOperator.row_blocks = counted_rows


def main(outdir, scenario="checks", device="cpu"):
    import torch

    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)  # 2 or 3 ranks share the CI's 2 cores
    torch.distributed.init_process_group(
        "gloo", init_method="env://", timeout=datetime.timedelta(seconds=30))
    import kernelkit

    assert kernelkit.distributed.active()
    _install_spies()
    results, errors = {}, {}
    data = inputs()
    if scenario == "checks":
        checks = _checks(data, outdir, rank, size, device)
    elif scenario == "svm":
        checks = _svm_checks(rank, size, device)
    else:
        checks = {"die": lambda: _die(data["X"], outdir, rank, size)}
    for name, check in checks.items():
        start = time.perf_counter()
        WORK[:] = 0
        try:
            results[name] = np.asarray(check())
            results[f"{name}:work"] = WORK.copy()
        except Exception as exc:  # noqa: BLE001 - recorded for the test
            errors[name] = [type(exc).__name__, str(exc)]
        print(f"{name}: {time.perf_counter() - start:.2f} s")
    np.savez(os.path.join(outdir, f"rank{rank}.npz"), **results)
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(errors, f)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
