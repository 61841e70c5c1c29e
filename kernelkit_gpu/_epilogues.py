"""Triton building blocks shared by the Gram and matrix-free kernels: one source of truth per formula.

Two kinds of ``@triton.jit`` helpers live here and nowhere else:

* the *pairwise tile*: for a (BLOCK_M, BLOCK_N) tile of pairs, the pairwise quantity the kernel is a
  function of — the dot product x·y, the squared distance ||x - y||² or the L1 distance |x - y|_1 —
  accumulated in float32 (float64 for float64 input);
* the *epilogue*: the kernel's formula applied elementwise to that quantity, chosen by the ``KIND``
  constexpr (rbf, laplacian, polynomial, sigmoid, exponential, Matérn 0.5/1.5/2.5, rational
  quadratic, linear; cosine is linear on rows normalised by the launcher).

How the pairwise quantity is computed (``MODE``):

* ``MODE_DIRECT``: one feature at a time, differences (or products) formed directly in registers
  from the inputs themselves (with per-feature scales: from the centred, scaled inputs, rounded
  once), so no cancellation at any offset; used for D <= 16 and always for the L1 distance. The
  launcher passes the data feature-major ((D, N) contiguous) so each feature is a coalesced load.
* ``MODE_MMA``: ``tl.dot`` over BLOCK_K chunks of the feature axis (tensor cores). For squared
  distances the launcher centres the data (subtracts the mean of x from x and y; distances do not
  change) and passes the row norms, and the tile computes ||x||² + ||y||² - 2 x·y clamped at 0.
  Where that expansion still cancels (a pair closer than ``TAU`` times its norms: near-duplicates,
  tight clusters) the whole tile is recomputed with direct differences (a data-dependent branch that
  costs nothing when no pair in the tile is that close).

Kernel parameters arrive through a small tensor ``prm`` in the accumulation dtype (so float64
kernels get float64 parameters and constants such as log2(e); a Python float argument or literal
would be rounded to float32 by Triton), plus the integer ``DEG`` of the polynomial kernel.
"""

import triton
import triton.language as tl

# --------------------------------------------------------------------------------------- ids
# Pairwise quantity (PAIRWISE constexpr).
PW_DOT = tl.constexpr(0)
PW_SQEUCLIDEAN = tl.constexpr(1)
PW_MANHATTAN = tl.constexpr(2)

# How the pairwise quantity is computed (MODE constexpr).
MODE_MMA = tl.constexpr(0)
MODE_DIRECT = tl.constexpr(1)

# Epilogues (KIND constexpr).
K_LINEAR = tl.constexpr(0)
K_POLYNOMIAL = tl.constexpr(1)
K_SIGMOID = tl.constexpr(2)
K_EXPONENTIAL = tl.constexpr(3)
K_RBF = tl.constexpr(4)
K_LAPLACIAN = tl.constexpr(5)
K_MATERN05 = tl.constexpr(6)
K_MATERN15 = tl.constexpr(7)
K_MATERN25 = tl.constexpr(8)
K_RATIONAL_QUADRATIC = tl.constexpr(9)

#: Kinds whose kernel depends on x - y only (k(x, x) = k(0) = 1 for every registry entry).
STATIONARY_KINDS = frozenset(
    int(k.value) for k in (K_RBF, K_LAPLACIAN, K_MATERN05, K_MATERN15, K_MATERN25, K_RATIONAL_QUADRATIC)
)

#: A pair is recomputed by direct differences when ||x - y||² < TAU (||x||² + ||y||²) on centred
#: data: there the expansion's rounding error, relative to ||x - y||², exceeds 1 / TAU times the
#: dot product's own relative error. 1/32 keeps that factor at 32 (about 3e-6 relative with IEEE
#: float32 and a few 1e-5 with tf32x3), and random centred data essentially never trigger it.
TAU = 0.03125


# ------------------------------------------------------------------------- pairwise quantity
@triton.jit
def _feature_update(acc, a, b, PAIRWISE: tl.constexpr):
    """Add one feature's contribution for all pairs: a (BM,), b (BN,) -> acc (BM, BN)."""
    if PAIRWISE == PW_DOT:
        acc += a[:, None] * b[None, :]
    elif PAIRWISE == PW_SQEUCLIDEAN:
        d = a[:, None] - b[None, :]
        acc += d * d
    else:
        acc += tl.abs(a[:, None] - b[None, :])
    return acc


@triton.jit
def _layout_anchor(BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    """A zero (BLOCK_M, BLOCK_N) tile produced by an FMA-path ``tl.dot`` of zeros.

    Nothing else anchors the register layout of a tile built from 1-D loads, and Triton's default
    layout gives each thread a column of 64 rows (64 live x values per feature, spills). A dot
    result gets the blocked "FMA dot" layout (each thread a 4 x 4-ish patch: few loads per pair)
    and pulls the elementwise work into it. The compiler folds the product of constant zeros.
    """
    return tl.dot(tl.zeros((BLOCK_M, 16), ACC), tl.zeros((16, BLOCK_N), ACC), input_precision="ieee")


@triton.jit
def _direct_tile(x_ptr, y_ptr, offs_m, offs_n, mask_m, mask_n, D,
                 stride_xm, stride_xk, stride_ym, stride_yk,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PAIRWISE: tl.constexpr,
                 DK: tl.constexpr, ANCHOR: tl.constexpr, ACC: tl.constexpr):
    """Pairwise quantity from one feature at a time (exact differences). DK > 0: D == DK, unrolled.

    ANCHOR: build the tile in the FMA-dot layout (:func:`_layout_anchor`); for kernels whose tile
    has no store or dot to take its layout from (the matrix-free product).
    """
    if ANCHOR:
        acc = _layout_anchor(BLOCK_M, BLOCK_N, ACC)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), ACC)
    # pointers advance feature by feature (64-bit pointer arithmetic: no k * stride overflow)
    xp = x_ptr + offs_m.to(tl.int64) * stride_xm
    yp = y_ptr + offs_n.to(tl.int64) * stride_ym
    if DK > 0:
        for k in tl.static_range(DK):
            a = tl.load(xp, mask=mask_m, other=0.0).to(ACC)
            b = tl.load(yp, mask=mask_n, other=0.0).to(ACC)
            acc = _feature_update(acc, a, b, PAIRWISE)
            xp += stride_xk
            yp += stride_yk
    else:
        for k in range(0, D):
            a = tl.load(xp, mask=mask_m, other=0.0).to(ACC)
            b = tl.load(yp, mask=mask_n, other=0.0).to(ACC)
            acc = _feature_update(acc, a, b, PAIRWISE)
            xp += stride_xk
            yp += stride_yk
    return acc


@triton.jit
def _mma_tile(x_ptr, y_ptr, offs_m, offs_n, mask_m, mask_n, D,
              stride_xm, stride_xk, stride_ym, stride_yk,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              DOT_PREC: tl.constexpr, ACC: tl.constexpr):
    """x_tile @ y_tile.T over the feature axis in BLOCK_K chunks with tl.dot (tensor cores)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), ACC)
    offs_k = tl.arange(0, BLOCK_K)
    xp = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm + offs_k[None, :] * stride_xk
    yp = y_ptr + offs_n.to(tl.int64)[None, :] * stride_ym + offs_k[:, None] * stride_yk
    for k0 in range(0, D, BLOCK_K):
        kmask = offs_k < D - k0
        a = tl.load(xp, mask=mask_m[:, None] & kmask[None, :], other=0.0)
        b = tl.load(yp, mask=kmask[:, None] & mask_n[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=DOT_PREC)
        xp += BLOCK_K * stride_xk
        yp += BLOCK_K * stride_yk
    return acc


@triton.jit
def _pairwise_tile(x_ptr, y_ptr, nx, ny, offs_m, offs_n, mask_m, mask_n, D,
                   stride_xm, stride_xk, stride_ym, stride_yk,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   PAIRWISE: tl.constexpr, MODE: tl.constexpr, DK: tl.constexpr,
                   DOT_PREC: tl.constexpr, SKIP_DIAG: tl.constexpr, TAU_: tl.constexpr,
                   ANCHOR: tl.constexpr, ACC: tl.constexpr):
    """The (BLOCK_M, BLOCK_N) tile of x·y, ||x - y||² (>= 0) or |x - y|_1, in ACC precision.

    ``nx``/``ny`` are the row norms ||x||², ||y||² of the (centred) rows, used by MODE_MMA squared
    distances only. ``SKIP_DIAG``: pairs with row == column (K(X, X)) never trigger the direct
    recomputation, since the caller overwrites them anyway.
    """
    if MODE == MODE_DIRECT:
        s = _direct_tile(x_ptr, y_ptr, offs_m, offs_n, mask_m, mask_n, D,
                         stride_xm, stride_xk, stride_ym, stride_yk,
                         BLOCK_M, BLOCK_N, PAIRWISE, DK, ANCHOR, ACC)
    else:
        s = _mma_tile(x_ptr, y_ptr, offs_m, offs_n, mask_m, mask_n, D,
                      stride_xm, stride_xk, stride_ym, stride_yk,
                      BLOCK_M, BLOCK_N, BLOCK_K, DOT_PREC, ACC)
        if PAIRWISE == PW_SQEUCLIDEAN:
            nsum = nx[:, None] + ny[None, :]
            s = tl.maximum(nsum - 2.0 * s, 0.0)
            if TAU_ > 0:  # TAU_ == 0 compiles the plain expansion (ablation / benchmarks)
                need = s < TAU_ * nsum
                if SKIP_DIAG:
                    need = need & (offs_m[:, None] != offs_n[None, :])
                if tl.max(tl.max(need.to(tl.int32), axis=1), axis=0) > 0:
                    s = _direct_tile(x_ptr, y_ptr, offs_m, offs_n, mask_m, mask_n, D,
                                     stride_xm, stride_xk, stride_ym, stride_yk,
                                     BLOCK_M, BLOCK_N, PW_SQEUCLIDEAN, 0, False, ACC)
    return s


# ---------------------------------------------------------------------------------- epilogue
@triton.jit
def _load_params(prm_ptr):
    """The three kernel parameters (see ``kernel_plan`` for what each KIND stores)."""
    return tl.load(prm_ptr), tl.load(prm_ptr + 1), tl.load(prm_ptr + 2)


@triton.jit
def _epilogue(s, p0, p1, p2, DEG, KIND: tl.constexpr):
    """The kernel value from the pairwise quantity ``s`` (elementwise; any shape).

    ``p0, p1, p2`` as packed by :func:`kernelkit_gpu._prepare.kernel_plan`:

    ========================  ========================  ===================  =============
    KIND                      p0                        p1                   p2
    ========================  ========================  ===================  =============
    linear: s                 -                         -                    -
    polynomial: (p0 s+p1)^DEG gamma                     coef0                -
    sigmoid: tanh(p0 s + p1)  gamma                     coef0                2 log2(e)
    exponential               scale log2(e)             -                    -
    rbf / laplacian           gamma log2(e)             -                    -
    matern nu                 c / l², c = 1, 3, 5       log2(e)              1/3
    rational quadratic        1 / (2 alpha l²)          alpha                log2(e)
    ========================  ========================  ===================  =============

    (For per-feature gamma / length_scale the columns are pre-scaled and the scalar is 1.)
    """
    if KIND == K_LINEAR:
        k = s
    elif KIND == K_POLYNOMIAL:
        base = p0 * s + p1
        k = tl.full(s.shape, 1.0, s.dtype)
        for _ in range(DEG):  # integer power by repeated multiplication: exact sign, any base
            k = k * base
    elif KIND == K_SIGMOID:
        z = p0 * s + p1
        t = tl.exp2(-p2 * tl.abs(z))  # exp(-2|z|) in (0, 1]: never overflows
        th = (1.0 - t) / (1.0 + t)
        k = tl.where(z < 0, -th, th)
    elif KIND == K_EXPONENTIAL:
        k = tl.exp2(p0 * s)
    elif KIND == K_RBF or KIND == K_LAPLACIAN:
        k = tl.exp2(-p0 * s)
    elif KIND == K_MATERN05:
        r = tl.sqrt(p0 * s)
        k = tl.exp2(-p1 * r)
    elif KIND == K_MATERN15:
        t = tl.sqrt(p0 * s)
        k = (1.0 + t) * tl.exp2(-p1 * t)
    elif KIND == K_MATERN25:
        t = tl.sqrt(p0 * s)
        k = (1.0 + t + p2 * (t * t)) * tl.exp2(-p1 * t)
    else:  # K_RATIONAL_QUADRATIC
        # (1 + u) ** -alpha = exp2(-alpha log2(1 + u)); log2(1 + u) via Goldberg's log1p trick,
        # accurate to rounding even where 1 + u rounds to 1.
        u = p0 * s
        w = 1.0 + u
        one = w == 1.0
        den = tl.where(one, 1.0, w - 1.0)
        l2 = tl.where(one, u * p2, tl.log2(w) * (u / den))
        k = tl.exp2(-p1 * l2)
    return k
