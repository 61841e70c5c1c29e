r"""The training covariance K = outputscale * k(X, X) + (noise + jitter) I as an operator.

Products with K: when the n x n kernel matrix fits in the dense budget (:func:`dense_budget`: half
the free GPU memory, or :data:`DENSE_CPU_BYTES` on the CPU) it is formed once per hyperparameter
setting and every CG product is one matrix product; otherwise nothing of size n x n is stored and
every product walks row chunks of at most :data:`BLOCK_ELEMENTS` kernel values (``chunk`` x n),
computed on the fly. Torch on any device, float32 or float64.

Kernel values come from the library's own kernel evaluation: the registry kernel's torch epilogue
(:data:`kernelkit_gpu._epilogues.EPILOGUES`, packed by the same ``pack`` the Triton launchers use)
applied to the squared distance of operands prepared as the library prepares them
(:func:`kernelkit_gpu._prepare.centre_and_scale`): centred on the float64 column mean of X, scaled
per feature in float64, rounded once to the block dtype. Up to
:data:`kernelkit_gpu._prepare.DIRECT_MAX_D` features the squared distance is summed from direct
differences (exact for the rounded operands, whatever the offset and spread of the data; the
diagonal of K(X, X) is exactly k(0) and K(X, X) exactly symmetric); above it by the expansion
|a|^2 + |b|^2 - 2 a.b of the centred operands, clamped at 0, with the diagonal pairs set to 0 (the
accuracy class of the library's float32 tensor-core Gram).

Derivatives with respect to the log-hyperparameters come from torch.autograd through
:func:`bilinear`: the scalar sum_j a_j^T K(theta) b_j for many column pairs at once, whose
backward recomputes one row chunk at a time, so its memory also stays chunk x n (times the number
of features with per-feature length scales) and no (n, n, n_theta) tensor exists.
"""

from __future__ import annotations

import numpy as np
import torch

from kernelkit_gpu import _epilogues as E
from kernelkit_gpu import _prepare as P

__all__ = ["CovarianceOperator", "bilinear", "theta_gradient", "BLOCK_ELEMENTS", "dense_budget"]

#: Kernel values in one row chunk (times a few temporaries of the same size during backward).
BLOCK_ELEMENTS = 2**24
#: Share of the free GPU memory a dense K may take (CG vectors, probes and the preconditioner
#: are O(n) columns and fit in the rest).
DENSE_GPU_SHARE = 0.5
#: Largest dense K on the CPU, in bytes.
DENSE_CPU_BYTES = 2**30

#: GP kernel kind -> registry kernel name.
_REGISTRY_NAME = {"rbf": "rbf", "matern": "matern", "rq": "rational_quadratic"}


def dense_budget(device):
    """Bytes a dense K may take on ``device``; 0 turns the dense path off."""
    if device.type == "cuda":
        return int(DENSE_GPU_SHARE * torch.cuda.mem_get_info(device)[0])
    return DENSE_CPU_BYTES


def _registry_params(structure, params):
    """The registry parameters of the base kernel (tensors, differentiable) for ``pack``."""
    ls = params["length_scale"]
    if structure.kind == "rbf":
        return {"gamma": 0.5 / (ls * ls)}
    if structure.kind == "matern":
        return {"length_scale": ls, "nu": structure.nu}
    return {"length_scale": ls, "alpha": params["rq_alpha"]}


def _squared_distances(A, B, diagonal_offset):
    """||a_i - b_j||^2 of prepared operands: direct differences up to DIRECT_MAX_D features."""
    if A.shape[1] <= P.DIRECT_MAX_D:
        s = torch.zeros((A.shape[0], B.shape[0]), dtype=A.dtype, device=A.device)
        for k in range(A.shape[1]):
            t = A[:, k, None] - B[None, :, k]
            s = s + t * t
        return s
    s = ((A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * (A @ B.T)).clamp_min(0.0)
    if diagonal_offset is not None:
        rows = torch.arange(A.shape[0], device=A.device)
        mask = torch.zeros_like(s, dtype=torch.bool)
        mask[rows, rows + diagonal_offset] = True
        s = s.masked_fill(mask, 0.0)
    return s


class CovarianceOperator:
    """Products with K_theta = outputscale * k(X, X) + (noise + jitter) I, chunk by chunk.

    Parameters
    ----------
    X : ndarray of shape (n, d)
        Training inputs (float64; centred here, the caller's array is not modified).
    structure : KernelStructure
        The parsed kernel (:func:`kernelkit.gp._structure.parse_kernel`).
    jitter : float
        The regressor's ``alpha``, added to the diagonal.
    device : torch.device
    dtype : torch.dtype
        float32 or float64: the dtype of the kernel blocks and of the CG vectors.
    block_elements : int, optional
        Kernel values per row chunk; default :data:`BLOCK_ELEMENTS`.
    """

    def __init__(self, X, structure, jitter, device, dtype, block_elements=None):
        X64 = torch.from_numpy(np.array(X, dtype=np.float64))
        self.center = X64.mean(0, keepdim=True)
        self.device = torch.device(device)
        self.X64 = (X64 - self.center).to(self.device)
        self.center = self.center.to(self.device)
        self.structure = structure
        self.jitter = float(jitter)
        self.dtype = dtype
        self.block_elements = int(block_elements or BLOCK_ELEMENTS)
        itemsize = torch.empty((), dtype=dtype).element_size()
        self.dense = self.n * self.n * itemsize <= dense_budget(self.device)
        self._dense_key, self._dense_K = None, None

    @property
    def n(self):
        return self.X64.shape[0]

    def chunk_rows(self, n_cols):
        """Rows per chunk so that one chunk holds at most ``block_elements`` values."""
        return max(1, self.block_elements // max(1, n_cols))

    def centred(self, Z):
        """Test inputs (NumPy, any writability) centred like the training data: float64 tensor."""
        Z = torch.from_numpy(np.array(Z, dtype=np.float64))  # a copy: read-only input is fine
        return Z.to(self.device) - self.center

    def block(self, A, B, params, diagonal_offset=None, dtype=None):
        """Kernel block outputscale * k(A, B) for centred float64 rows A, B (no noise term).

        Differentiable with respect to the tensors in ``params``. ``diagonal_offset=lo`` says that
        A = X[lo:lo + len(A)] and B = X, so the pairs (i, lo + i) are at distance exactly 0.
        ``dtype`` (default: this operator's) is the dtype the operands are rounded to and the
        block is computed in.
        """
        s = self.structure
        name = _REGISTRY_NAME[s.kind]
        row = E.EPILOGUES[name]
        numbers = _registry_params(s, params)
        prm, scale = row.pack(numbers)
        dtype = dtype or self.dtype
        A = P.centre_and_scale(A, None, scale, dtype)
        B = P.centre_and_scale(B, None, scale, dtype)
        sq = _squared_distances(A, B, diagonal_offset)
        value = row.torch(sq, *(torch.as_tensor(p, dtype=torch.float64, device=A.device)
                                for p in prm), 0, row.kind(numbers))
        return params["outputscale"].to(dtype) * value

    def kernel_matrix(self, params):
        """outputscale * k(X, X) (dense mode only), formed once per hyperparameter setting."""
        key = torch.cat([v.detach().reshape(-1).to(torch.float64).cpu()
                         for name, v in sorted(params.items()) if name != "noise"]).tolist()
        if key != self._dense_key:
            self._dense_K = None  # free the old matrix before forming the new one
            with torch.no_grad():
                K = torch.empty((self.n, self.n), dtype=self.dtype, device=self.device)
                step = self.chunk_rows(self.n)
                for lo in range(0, self.n, step):
                    hi = min(lo + step, self.n)
                    K[lo:hi] = self.block(self.X64[lo:hi], self.X64, params, diagonal_offset=lo)
            self._dense_key, self._dense_K = key, K
        return self._dense_K

    def matmul(self, V, params):
        """K_theta @ V for V of shape (n, t) in this operator's dtype (no autograd)."""
        with torch.no_grad():
            if self.dense:
                return torch.addmm(V, self.kernel_matrix(params), V,
                                   beta=float(params["noise"] + self.jitter))
            out = torch.empty_like(V)
            step = self.chunk_rows(self.n)
            for lo in range(0, self.n, step):
                hi = min(lo + step, self.n)
                Kb = self.block(self.X64[lo:hi], self.X64, params, diagonal_offset=lo)
                out[lo:hi] = Kb @ V
            out += (params["noise"] + self.jitter).to(V.dtype) * V
        return out

    def cross_matmul(self, Z, V, params):
        """outputscale * k(Z, X) @ V for centred float64 test rows Z, in V's dtype (no autograd,
        no noise)."""
        with torch.no_grad():
            out = torch.empty(Z.shape[0], V.shape[1], dtype=V.dtype, device=V.device)
            step = self.chunk_rows(self.n)
            for lo in range(0, Z.shape[0], step):
                hi = min(lo + step, Z.shape[0])
                out[lo:hi] = self.block(Z[lo:hi], self.X64, params, dtype=V.dtype) @ V
        return out

    def cross_block_T(self, Z, params, dtype=None):
        """outputscale * k(X, Z), shape (n, m), for centred float64 test rows Z (no autograd)."""
        with torch.no_grad():
            return self.block(self.X64, Z, params, dtype=dtype)


class _Bilinear(torch.autograd.Function):
    """sum_j a_j^T (outputscale * k(X, X)) b_j; backward recomputes one row chunk at a time."""

    @staticmethod
    def forward(ctx, theta, op, A, B):
        params = op.structure.params(theta)
        if op.dense:
            total = (A * (op.kernel_matrix(params) @ B)).sum(dtype=torch.float64)
        else:
            total = torch.zeros((), dtype=torch.float64, device=A.device)
            step = op.chunk_rows(op.n)
            for lo in range(0, op.n, step):
                hi = min(lo + step, op.n)
                Kb = op.block(op.X64[lo:hi], op.X64, params, diagonal_offset=lo)
                total += (A[lo:hi] * (Kb @ B)).sum(dtype=torch.float64)
        ctx.save_for_backward(theta)
        ctx.op, ctx.A, ctx.B = op, A, B
        return total

    @staticmethod
    def backward(ctx, grad_output):
        (theta,) = ctx.saved_tensors
        op, A, B = ctx.op, ctx.A, ctx.B
        grad = theta_gradient(op, theta, lambda lo, hi, Kb: (A[lo:hi] * (Kb @ B)).sum(
            dtype=torch.float64))
        return grad_output * grad, None, None, None


def theta_gradient(op, theta, contract, dtype=None):
    """d/dtheta of sum over row chunks of ``contract(lo, hi, K[lo:hi])``, K = outputscale k(X, X).

    One autograd backward per row chunk of ``dtype`` (default the operator's) kernel rows; a
    chunk holds at most ``block_elements / d`` values, since the backward of per-feature length
    scales keeps one difference per feature.
    """
    grad = torch.zeros_like(theta)
    step = op.chunk_rows(op.n * op.X64.shape[1])
    with torch.enable_grad():
        leaf = theta.detach().requires_grad_(True)
        for lo in range(0, op.n, step):
            hi = min(lo + step, op.n)
            params = op.structure.params(leaf)
            Kb = op.block(op.X64[lo:hi], op.X64, params, diagonal_offset=lo, dtype=dtype)
            (g,) = torch.autograd.grad(contract(lo, hi, Kb), leaf, allow_unused=True)
            if g is not None:
                grad += g
    return grad


def bilinear(op, theta, A, B):
    r"""The scalar sum_j a_j^T K_theta b_j, differentiable with respect to ``theta``.

    .. math:: s(\theta) = \sum_j a_j^\top K_\theta b_j,\quad
              K_\theta = \sigma_f^2 k_\theta(X, X) + (\sigma_n^2 + \text{jitter}) I

    Parameters
    ----------
    op : CovarianceOperator
    theta : torch.Tensor of shape (n_theta,), float64
        Log-hyperparameters laid out as ``kernel.theta``.
    A, B : torch.Tensor of shape (n, t)
        Constant columns (detached), in the operator's dtype.

    Returns
    -------
    torch.Tensor, 0-d float64
        Its gradient is sum_j a_j^T (dK/dtheta_i) b_j for every i, from one backward pass that
        recomputes the kernel one row chunk at a time (memory chunk x n).
    """
    A, B = A.detach().to(op.dtype), B.detach().to(op.dtype)
    kernel_part = _Bilinear.apply(theta, op, A, B)
    params = op.structure.params(theta)
    diag = (A.to(torch.float64) * B.to(torch.float64)).sum()
    return kernel_part + (params["noise"] + op.jitter) * diag
