r"""The training covariance K = outputscale * k(X, X) + (noise + jitter) I as an operator.

Products with K: when the n x n kernel matrix fits in the dense budget (:func:`dense_budget`: half
the free GPU memory, or :data:`DENSE_CPU_BYTES` on the CPU) it is formed once per hyperparameter
setting and every CG product is one matrix product; otherwise nothing of size n x n is stored and
every product walks row chunks of at most :data:`BLOCK_ELEMENTS` kernel values (``chunk`` x n),
computed on the fly. Torch on any device, float32 or float64.

The kernel is stationary, so the data are centred once (float64 mean) before the distances r^2 = |a|^2 + |b|^2 - 2 a.b of the length-scaled points are formed; r^2 is clamped
at 0 and set to exactly 0 on the diagonal of K(X, X), so the diagonal equals the outputscale.

Derivatives with respect to the log-hyperparameters come from torch.autograd through
:func:`bilinear`: the scalar sum_j a_j^T K(theta) b_j for many column pairs at once, whose
backward recomputes one row chunk at a time, so its memory also stays chunk x n and no
(n, n, n_theta) tensor exists.
"""

from __future__ import annotations

import math

import torch

__all__ = ["CovarianceOperator", "bilinear", "BLOCK_ELEMENTS", "dense_budget"]

#: Kernel values in one row chunk (times a few temporaries of the same size during backward).
BLOCK_ELEMENTS = 2**24
#: Share of the free GPU memory a dense K may take (CG vectors, probes and the preconditioner
#: are O(n) columns and fit in the rest).
DENSE_GPU_SHARE = 0.5
#: Largest dense K on the CPU, in bytes.
DENSE_CPU_BYTES = 2**30


def dense_budget(device):
    """Bytes a dense K may take on ``device``; 0 turns the dense path off."""
    if device.type == "cuda":
        return int(DENSE_GPU_SHARE * torch.cuda.mem_get_info(device)[0])
    return DENSE_CPU_BYTES


def _kernel_of_r2(r2, kind, nu, rq_alpha):
    """Unit-outputscale stationary kernel as a function of the scaled squared distance."""
    if kind == "rbf":
        return torch.exp(-0.5 * r2)
    if kind == "rq":
        return torch.pow(1.0 + r2 / (2.0 * rq_alpha), -rq_alpha)
    positive = r2 > 0
    # sqrt has an infinite derivative at 0; dk/dr vanishes there, so the gradient there is 0.
    r = torch.where(positive, torch.sqrt(torch.where(positive, r2, torch.ones_like(r2))), 0.0)
    if nu == 0.5:
        return torch.exp(-r)
    if nu == 1.5:
        s = math.sqrt(3.0) * r
        return (1.0 + s) * torch.exp(-s)
    s = math.sqrt(5.0) * r
    return (1.0 + s + s * s / 3.0) * torch.exp(-s)


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
        X64 = torch.as_tensor(X, dtype=torch.float64)
        self.center = X64.mean(0)
        self.X64 = (X64 - self.center).to(device)
        self.X = self.X64.to(dtype)
        self.structure = structure
        self.jitter = float(jitter)
        self.device = torch.device(device)
        self.dtype = dtype
        self.block_elements = int(block_elements or BLOCK_ELEMENTS)
        itemsize = torch.empty((), dtype=dtype).element_size()
        self.dense = self.n * self.n * itemsize <= dense_budget(self.device)
        self._dense_key, self._dense_K = None, None

    @property
    def n(self):
        return self.X.shape[0]

    def chunk_rows(self, n_cols):
        """Rows per chunk so that one chunk holds at most ``block_elements`` values."""
        return max(1, self.block_elements // max(1, n_cols))

    def centred(self, Z, dtype=None):
        """Test inputs (NumPy, float64) centred like the training data, as a tensor."""
        Z = torch.as_tensor(Z, dtype=torch.float64).to(self.device) - self.center.to(self.device)
        return Z.to(dtype or self.dtype)

    def block(self, A, B, params, diagonal_offset=None):
        """Kernel block outputscale * k(A, B) for centred rows A, B (no noise term).

        Differentiable with respect to the tensors in ``params``. ``diagonal_offset=lo`` says that
        A = X[lo:lo + len(A)] and B = X, so the pairs (i, lo + i) are set to distance exactly 0.
        """
        s = self.structure
        ls = params["length_scale"].to(A.dtype)
        As, Bs = A / ls, B / ls
        r2 = (As * As).sum(1)[:, None] + (Bs * Bs).sum(1)[None, :] - 2.0 * (As @ Bs.T)
        r2 = r2.clamp_min(0.0)
        if diagonal_offset is not None:
            rows = torch.arange(A.shape[0], device=A.device)
            mask = torch.zeros_like(r2, dtype=torch.bool)
            mask[rows, rows + diagonal_offset] = True
            r2 = r2.masked_fill(mask, 0.0)
        rq_alpha = params["rq_alpha"].to(A.dtype) if s.kind == "rq" else None
        return params["outputscale"].to(A.dtype) * _kernel_of_r2(r2, s.kind, s.nu, rq_alpha)

    def diagonal_value(self, params):
        """The diagonal of K_theta (a scalar): outputscale + noise + jitter."""
        return params["outputscale"] + params["noise"] + self.jitter

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
                    K[lo:hi] = self.block(self.X[lo:hi], self.X, params, diagonal_offset=lo)
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
                out[lo:hi] = self.block(self.X[lo:hi], self.X, params, diagonal_offset=lo) @ V
            out += (params["noise"] + self.jitter).to(V.dtype) * V
        return out

    def cross_matmul(self, Z, V, params):
        """outputscale * k(Z, X) @ V for centred test rows Z (no autograd, no noise)."""
        with torch.no_grad():
            out = torch.empty(Z.shape[0], V.shape[1], dtype=V.dtype, device=V.device)
            step = self.chunk_rows(self.n)
            for lo in range(0, Z.shape[0], step):
                hi = min(lo + step, Z.shape[0])
                out[lo:hi] = self.block(Z[lo:hi], self.X, params) @ V
        return out

    def cross_block_T(self, Z, params):
        """outputscale * k(X, Z), shape (n, m), for centred test rows Z (no autograd)."""
        with torch.no_grad():
            return self.block(self.X, Z, params)


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
                Kb = op.block(op.X[lo:hi], op.X, params, diagonal_offset=lo)
                total += (A[lo:hi] * (Kb @ B)).sum(dtype=torch.float64)
        ctx.save_for_backward(theta)
        ctx.op, ctx.A, ctx.B = op, A, B
        return total

    @staticmethod
    def backward(ctx, grad_output):
        (theta,) = ctx.saved_tensors
        op, A, B = ctx.op, ctx.A, ctx.B
        grad = torch.zeros_like(theta)
        step = op.chunk_rows(op.n)
        with torch.enable_grad():
            leaf = theta.detach().requires_grad_(True)
            for lo in range(0, op.n, step):
                hi = min(lo + step, op.n)
                params = op.structure.params(leaf)
                Kb = op.block(op.X[lo:hi], op.X, params, diagonal_offset=lo)
                part = (A[lo:hi] * (Kb @ B)).sum(dtype=torch.float64)
                (g,) = torch.autograd.grad(part, leaf, allow_unused=True)
                if g is not None:
                    grad += g
        return grad_output * grad, None, None, None


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
