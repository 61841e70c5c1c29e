r"""The training covariance K = k_theta(X, X) + (noise + jitter) I as an operator, for any
kernel tree the estimators accept (:mod:`.kernel_tree`): the Gaussian process's member of the
operator family (:class:`~kernelkit.operators.base.Operator`), differentiable in theta.

Products with K: when the n x n kernel matrix fits in the dense budget (:func:`dense_budget`: half
the free GPU memory, or :data:`DENSE_CPU_BYTES` on the CPU) it is formed once per hyperparameter
setting and every CG product is one matrix product; otherwise nothing of size n x n is stored and
every product walks row chunks of at most :data:`BLOCK_ELEMENTS` kernel values (``chunk`` x n),
computed on the fly. Torch on any device, float32 or float64.

A block K(A, B) evaluates the tree: sums, products and powers of its nodes; constants; white
noise on the pairs that are the same training point; and, for every registry kernel leaf, the
library's own formula: the registry kernel's torch epilogue (:data:`kernelkit_gpu.epilogues.
EPILOGUES`, packed by the same ``pack`` the Triton launchers use) applied to the pairwise
quantity (:func:`kernelkit_gpu.pairwise.naive.pairwise_quantity`, the torch twin's) of operands
prepared as the library prepares them (:mod:`kernelkit_gpu.prepare`):

- distances (squared Euclidean, L1): rows centred on the float64 column mean of X, scaled per
  feature in float64, rounded once to the block dtype. Up to
  :data:`kernelkit_gpu.prepare.DIRECT_MAX_D` features (and always for L1) the distance is summed
  from direct differences (exact for the rounded operands, whatever the offset and spread of the
  data; the diagonal of K(X, X) is exactly k(0) and K(X, X) exactly symmetric); above it by the
  expansion |a|^2 + |b|^2 - 2 a.b of the centred operands, clamped at 0, with the diagonal pairs
  set to 0 (the accuracy class of the library's float32 tensor-core Gram);
- dot products: x.y = (x - m).(y - m) + b_x + b_y with b = (x - m).m + m.m / 2 in float64
  (:func:`kernelkit_gpu.prepare.dot_offsets`), so only the centred part is formed in the block
  dtype;
- cosine: rows normalised in float64 (:func:`kernelkit_gpu.prepare.normalize_rows`), then dotted.

Derivatives with respect to the log-hyperparameters come from
:meth:`CovarianceOperator.contract`: the scalar sum_j a_j^T K(theta) b_j for many column pairs at
once, its kernel part by torch.autograd (whose backward recomputes one row chunk at a time, so
its memory also stays chunk x n, times the number of features with per-feature parameters, and
no (n, n, n_theta) tensor exists) or by the fused Triton pass (:mod:`.fused`).
"""

from __future__ import annotations

import numpy as np
import torch

from kernelkit.operators import fused_tree
from kernelkit.operators.base import TRITON_MATMUL_MAX_COLUMNS, WIDE_BLOCK_ELEMENTS, Operator
from kernelkit_gpu import epilogues as E
from kernelkit_gpu import prepare as P
from kernelkit_gpu.pairwise import naive as N

__all__ = ["CovarianceOperator", "bilinear", "theta_gradient", "BLOCK_ELEMENTS", "dense_budget"]

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


class _Leaves:
    """The leaves and scalars of the kernel tree on the pairs of rows A x B (or on the pairs
    (a_i, a_i) when ``paired``): centred float64 rows in, values in ``dtype`` out
    (:meth:`~kernelkit.operators.base.Operator.values` walks the tree)."""

    def __init__(self, op, A, B, theta, dtype, diagonal_offset, paired, direct=True):
        self.op, self.A, self.B, self.theta = op, A, B, theta
        self.dtype, self.offset, self.paired = dtype, diagonal_offset, paired
        self.direct = direct
        self.shape = (A.shape[0],) if paired else (A.shape[0], B.shape[0])

    def scalar(self, node):
        value = node.number(self.theta)
        if not node.white:
            return value
        if self.paired:
            same = torch.ones(self.shape, dtype=self.dtype, device=self.A.device)
        else:
            same = N.same_point_mask(*self.shape, self.offset, self.A.device).to(self.dtype)
        return value.to(self.dtype) * same

    def leaf(self, leaf):
        spec = leaf.spec
        numbers = leaf.numbers(self.theta, self.A.shape[1])
        row = E.EPILOGUES[spec.name]
        prm, scale = row.pack(numbers)
        A, B, dtype = self.A, self.B, self.dtype
        if spec.pairwise in ("sqeuclidean", "manhattan"):
            a = P.centre_and_scale(A, None, scale, dtype)
            if self.paired:
                s = torch.zeros(self.shape, dtype=dtype, device=A.device)
            else:  # L1 always from direct differences
                b = P.centre_and_scale(B, None, scale, dtype)
                s = N.pairwise_quantity(a, b, spec.pairwise, diagonal_offset=self.offset,
                                        direct=self.direct or spec.pairwise == "manhattan")
        elif spec.pairwise == "dot":
            m = self.op.center.reshape(-1)
            a = P.centre_and_scale(A, None, scale, dtype)
            off_a = A @ m + 0.5 * (m @ m)
            if self.paired:
                s = (a * a).sum(1) + (2.0 * off_a).to(dtype)
            else:
                b = P.centre_and_scale(B, None, scale, dtype)
                off_b = B @ m + 0.5 * (m @ m)
                s = N.pairwise_quantity(a, b, "dot") + (off_a[:, None] + off_b[None, :]).to(dtype)
        else:  # cosine: rows of the uncentred data, normalised in float64
            a, nonzero = P.normalize_rows(A + self.op.center)
            if self.paired:
                return nonzero.to(dtype)
            b = P.normalize_rows(B + self.op.center)[0]
            s = N.pairwise_quantity(a.to(dtype), b.to(dtype), "dot")
        p = [torch.as_tensor(v, dtype=torch.float64, device=A.device) for v in prm]
        return row.torch(s, *p, numbers.get("degree", 0), row.kind(numbers))


def centred_on_device(X, device):
    """``(X - mean, mean)`` as float64 tensors on ``device`` (mean of shape (1, d)): the
    operator's copy of the training inputs, which a caller may keep and pass back as ``data``
    (at n = 2e4 the host-to-device copy was ~2 ms of every public log-likelihood call)."""
    X64 = torch.from_numpy(np.array(X, dtype=np.float64))
    center = X64.mean(0, keepdim=True)
    return (X64 - center).to(device), center.to(device)


class CovarianceOperator(Operator):
    """Products with K_theta = k_theta(X, X) + (noise + jitter) I, chunk by chunk.

    Parameters
    ----------
    X : ndarray of shape (n, d)
        Training inputs (float64; centred here, the caller's array is not modified).
    structure : KernelStructure
        The parsed kernel (:func:`kernelkit.operators.kernel_tree.parse_kernel`).
    jitter : float
        The regressor's ``alpha``, added to the diagonal.
    device : torch.device
    dtype : torch.dtype
        float32 or float64: the dtype of the kernel blocks and of the CG vectors.
    contraction_dtype : torch.dtype, optional
        The dtype of the gradient's fused Triton contractions (:mod:`kernelkit.operators.fused`,
        CUDA); default ``dtype``.
    block_elements : int, optional
        Kernel values per row chunk; default :data:`BLOCK_ELEMENTS`.
    rows : tuple of int, optional
        ``(lo, hi)``: the rows of every n-row product this process computes (default all);
        :meth:`gather`, :meth:`reduce` and :meth:`agree` combine the processes' parts (the
        identity here; over a process group in :mod:`kernelkit.operators.covariance_sharded`).
    data : tuple of torch.Tensor, optional
        :func:`centred_on_device` of ``X`` and ``device``, kept from an earlier operator on the
        same data (:attr:`data`); X is then not read.
    """

    def __init__(self, X, structure, jitter, device, dtype, block_elements=None, rows=None,
                 data=None, contraction_dtype=None):
        super().__init__(structure, device)
        if data is None:
            data = centred_on_device(X, self.device)
        self.X64, self.center = data
        self.jitter = float(jitter)
        self.dtype = dtype
        self.contraction_dtype = contraction_dtype or dtype
        self.block_elements = int(block_elements or BLOCK_ELEMENTS)
        self.rows = (0, self.n) if rows is None else tuple(rows)
        itemsize = torch.empty((), dtype=dtype).element_size()
        n_rows = self.rows[1] - self.rows[0]
        budget = dense_budget(self.device)
        self.dense = n_rows * self.n * itemsize <= budget
        # a float32 operator also holds K in float64 for its exact products where both fit
        self.dense_exact = self.dense and itemsize < 8 and n_rows * self.n * (itemsize + 8) <= budget
        self._dense_key, self._dense_K, self._dense_noise = None, {}, None
        self._leaf_numbers_memo = None  # (theta object, numbers): kept by fused_tree

    @property
    def n(self):
        return self.X64.shape[0]

    @property
    def data(self):
        """``(X64, center)``: what :func:`centred_on_device` gave (the ``data`` argument)."""
        return self.X64, self.center

    def with_dtype(self, dtype):
        """The same operator with blocks (and products) in ``dtype``."""
        if dtype == self.dtype:
            return self
        return type(self)(None, self.structure, self.jitter, self.device, dtype,
                          self.block_elements, data=self.data,
                          contraction_dtype=self.contraction_dtype)

    def gather(self, rows_fn):
        """All n rows of a product whose rows ``self.rows`` ``rows_fn()`` computes."""
        return rows_fn()

    def reduce(self, part_fn):
        """The sum over the row blocks of ``part_fn()`` (this process's rows' share)."""
        return part_fn()

    def agree(self, fn, *args):
        """``fn(*args)``, computed by every process alike (an error on one is raised on all)."""
        return fn(*args)

    def chunk_rows(self, n_cols):
        """Rows per chunk so that one chunk holds at most ``block_elements`` values."""
        return max(1, self.block_elements // max(1, n_cols))

    def centred(self, Z):
        """Test inputs (NumPy, any writability) centred like the training data: float64 tensor."""
        Z = torch.from_numpy(np.array(Z, dtype=np.float64))  # a copy: read-only input is fine
        return Z.to(self.device) - self.center

    def block(self, A, B, params, diagonal_offset=None, dtype=None, direct=True):
        """The kernel part k(A, B) for centred float64 rows A, B (no noise term).

        Differentiable with respect to ``params["theta"]``. ``diagonal_offset=lo`` says that
        A = X[lo:lo + len(A)] and B = X (or A = B for ``lo = 0``), so the pairs (i, lo + i) are
        the same point: distance exactly 0, and a WhiteKernel inside the kernel part counts
        there. ``dtype`` (default: this operator's) is the dtype the operands are rounded to and
        the block is computed in. ``direct=False`` takes squared Euclidean distances from the
        matrix-product form |a|^2 + |b|^2 - 2 a.b at any width (absolute rounding
        eps |a|^2: for blocks that need not be exact, as the preconditioner's).
        """
        dtype = dtype or self.dtype
        leaves = _Leaves(self, A, B, params["theta"], dtype, diagonal_offset, False, direct)
        return self.values(leaves.shape, dtype, leaves.leaf, leaves.scalar)

    def diag(self, Z, params, dtype=torch.float64):
        """k(z_i, z_i) of the kernel part for centred float64 rows Z, shape (m,): scikit-learn's
        ``kernel.diag`` less ``params["noise"]`` (a WhiteKernel left in the kernel part counts:
        z_i is the same point as itself)."""
        leaves = _Leaves(self, Z, Z, params["theta"], dtype, None, True)
        return self.values(leaves.shape, dtype, leaves.leaf, leaves.scalar)

    def _same_theta(self, theta):
        """Whether ``theta`` is the setting of the held dense K: the same tensor object (every
        CG product of one evaluation: no device sync) or equal values."""
        held = self._dense_key
        return held is not None and (held is theta or (held.shape == theta.shape and bool(
            torch.equal(held, theta.detach()))))

    def kernel_matrix(self, params, dtype=None):
        """The rows ``self.rows`` of the kernel part k(X, X) in ``dtype`` (default the
        operator's; float64 also where :attr:`dense_exact`), dense mode only, formed once per
        hyperparameter setting: by the Triton Gram (:func:`kernelkit_gpu.gram`) for the trees of
        :func:`~kernelkit.operators.fused_tree.fused_tree`, else row blocks of the tree evaluator."""
        dtype = dtype or self.dtype
        theta = params["theta"]
        if not self._same_theta(theta):
            self._dense_key, self._dense_K = None, {}  # free the old matrices first
        elif self._dense_key is not theta:  # equal values: later products match by identity
            self._dense_key = theta  # (no device sync per product)
        K = self._dense_K.get(dtype)
        if K is None:
            first, last = self.rows
            with torch.no_grad():
                tree = fused_tree.fused_tree(self)
                if tree is not None:
                    K = fused_tree.kernel_part_gram(self, tree, params, dtype)
                else:
                    K = torch.empty((last - first, self.n), dtype=dtype, device=self.device)
                    for lo, hi in self.row_chunks(self.chunk_rows(self.n), self.rows):
                        K[lo - first:hi - first] = self.block(
                            self.X64[lo:hi], self.X64, params, diagonal_offset=lo, dtype=dtype)
                self._dense_noise = float(params["noise"] + self.jitter)
            self._dense_K[dtype] = K
            if self._dense_key is None:
                self._dense_key = theta  # later products of this setting match by identity
        return K

    def matmul(self, V, params):
        """K_theta @ V for V of shape (n, t) in this operator's dtype (no autograd)."""
        return self.gather(lambda: self._matmul_rows(V, params))

    def _dense_product(self, K, V):
        """The rows ``self.rows`` of (K + noise I) @ V for the held rows K of the kernel part.
        With all rows, K^T @ V: K is symmetric (exactly from the Triton Gram and direct
        differences, to rounding otherwise), and cuBLAS's transposed layout is faster
        (docs/benchmarks.md, "Figures behind choices in the code")."""
        first, last = self.rows
        whole = (first, last) == (0, self.n)
        return torch.addmm(V[first:last], K.T if whole else K, V, beta=self._dense_noise)

    def _matmul_rows(self, V, params):
        """The rows ``self.rows`` of K_theta @ V."""
        first, last = self.rows
        with torch.no_grad():
            if self.dense:
                return self._dense_product(self.kernel_matrix(params), V)
            out = self.kernel_rows_matmul(V, params)
            out += (params["noise"] + self.jitter).to(V.dtype) * V[first:last]
        return out

    def exact_matmul(self, V, params):
        """K_theta @ V in float64 arithmetic for float64 V (no autograd): one GEMM with the
        held float64 K where :attr:`dense_exact` (forming it once costs about one product from X,
        and each product then a quarter of one: docs/benchmarks.md, "Operator and contraction
        design figures"), else :meth:`kernel_rows_matmul` and the noise term."""
        def rows():  # this process's rows (self.rows)
            first, last = self.rows
            with torch.no_grad():
                if self.dense_exact:
                    return self._dense_product(self.kernel_matrix(params, torch.float64), V)
                return (self.kernel_rows_matmul(V, params)
                        + float(params["noise"] + self.jitter) * V[first:last])

        return self.gather(rows)

    def kernel_rows_matmul(self, V, params):
        """The rows ``self.rows`` of k_theta(X, X) @ V (kernel part, no noise), computed in V's
        dtype (no autograd): the Triton K @ V for the common trees on CUDA
        (:func:`~kernelkit.operators.fused_tree.kernel_part_matmul`) with at most
        :data:`TRITON_MATMUL_MAX_COLUMNS` columns, else row blocks (Triton Gram blocks for the
        common trees on CUDA, else the tree evaluator's) and GEMMs."""
        tree = fused_tree.fused_tree(self)
        if tree is not None and V.shape[1] <= TRITON_MATMUL_MAX_COLUMNS:
            return fused_tree.kernel_part_matmul(self, tree, params, V, V.dtype)
        with torch.no_grad():
            if tree is not None:  # wide V: Triton Gram row blocks of GEMM size, then GEMMs
                return self.chunked_matmul(self.rows, max(1, WIDE_BLOCK_ELEMENTS // self.n), V, (
                    lambda lo, hi: fused_tree.kernel_part_block(self, tree, params, lo, hi,
                                                                V.dtype)))
            return self.chunked_matmul(self.rows, self.chunk_rows(self.n), V, (
                lambda lo, hi: self.block(self.X64[lo:hi], self.X64, params, diagonal_offset=lo,
                                          dtype=V.dtype)))

    def cross_matmul(self, Z, V, params):
        """k(Z, X) @ V (kernel part) for centred float64 test rows Z and V of shape (n, k), in
        V's dtype (no autograd). Each process contracts its rows ``self.rows`` of X and V; the
        shares are summed by :meth:`reduce` (float64 under a process group)."""
        first, last = self.rows

        def share():
            with torch.no_grad():
                return self.chunked_matmul((0, Z.shape[0]), self.chunk_rows(last - first),
                                           V[first:last], lambda lo, hi: self.block(
                                               Z[lo:hi], self.X64[first:last], params,
                                               dtype=V.dtype))

        return self.reduce(share).to(V.dtype)

    def cross_block_T(self, Z, params, dtype=None):
        """k(X, Z) (kernel part), shape (n, m), for centred float64 test rows Z (no autograd)."""
        with torch.no_grad():
            return self.block(self.X64, Z, params, dtype=dtype)

    def contract(self, theta, A, B, kernel_part=None, dtype=None):
        r"""The scalar sum_j a_j^T K_theta b_j, differentiable with respect to ``theta``.

        .. math:: s(\theta) = \sum_j a_j^\top K_\theta b_j,\quad
                  K_\theta = k_\theta(X, X) + (\text{noise} + \text{jitter}) I

        Parameters
        ----------
        theta : torch.Tensor of shape (n_theta,), float64
            Log-hyperparameters laid out as ``kernel.theta``.
        A, B : torch.Tensor of shape (n, t)
            Constant columns (detached here, then rounded to ``dtype``).
        kernel_part : callable, optional
            ``kernel_part(theta, A, B)``: sum_j a_j^T k_theta(X, X) b_j, differentiable in theta;
            default autograd through row blocks (:class:`_Bilinear`; the fused Triton pass:
            :func:`kernelkit.operators.fused.bilinear`).
        dtype : torch.dtype, optional
            The dtype of the columns for ``kernel_part``; default the operator's.

        Returns
        -------
        torch.Tensor, 0-d float64
            Its gradient is sum_j a_j^T (dK/dtheta_i) b_j for every i (by default from one
            backward pass that recomputes the kernel one row chunk at a time: memory chunk x n).
        """
        dtype = dtype or self.dtype
        A, B = A.detach().to(dtype), B.detach().to(dtype)
        part = (kernel_part or (lambda t, A, B: _Bilinear.apply(t, self, A, B)))(theta, A, B)
        params = self.structure.params(theta)
        diag = (A.to(torch.float64) * B.to(torch.float64)).sum()
        return part + (params["noise"] + self.jitter) * diag


class _Bilinear(torch.autograd.Function):
    """sum_j a_j^T k(X, X) b_j (kernel part); backward recomputes one row chunk at a time."""

    @staticmethod
    def forward(ctx, theta, op, A, B):
        params = op.structure.params(theta)

        def part():  # this process's rows
            first, last = op.rows
            if op.dense:
                return (A[first:last] * (op.kernel_matrix(params) @ B)).sum(dtype=torch.float64)
            total = torch.zeros((), dtype=torch.float64, device=A.device)
            for lo, hi in op.row_chunks(op.chunk_rows(op.n), op.rows):
                Kb = op.block(op.X64[lo:hi], op.X64, params, diagonal_offset=lo)
                total += (A[lo:hi] * (Kb @ B)).sum(dtype=torch.float64)
            return total

        total = op.reduce(part)
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
    """d/dtheta of sum over row chunks of ``contract(lo, hi, K[lo:hi])``, K = k(X, X) (kernel part).

    One autograd backward per row chunk of ``dtype`` (default the operator's) kernel rows; a
    chunk holds at most ``block_elements / d`` values, since the backward of per-feature length
    scales keeps one difference per feature.
    """
    def part():  # this process's rows
        grad = torch.zeros_like(theta)
        with torch.enable_grad():
            leaf = theta.detach().requires_grad_(True)
            for lo, hi in op.row_chunks(op.chunk_rows(op.n * op.X64.shape[1]), op.rows):
                params = op.structure.params(leaf)
                Kb = op.block(op.X64[lo:hi], op.X64, params, diagonal_offset=lo, dtype=dtype)
                value = contract(lo, hi, Kb)
                if not value.requires_grad:  # a kernel part with no free hyperparameter
                    continue
                (g,) = torch.autograd.grad(value, leaf, allow_unused=True)
                if g is not None:
                    grad += g
        return grad

    return op.reduce(part).to(theta.dtype)


def bilinear(op, theta, A, B):
    """:meth:`CovarianceOperator.contract` with the kernel part by autograd through row blocks,
    on any tree and device: the reference the fused pass (:mod:`.fused`) is checked against."""
    return op.contract(theta, A, B)
