"""Triton building blocks shared by the Gram and matrix-free kernels: one source of truth per formula.

Two kinds of ``@triton.jit`` helpers live here and nowhere else:

* the *pairwise tile*: for a (BLOCK_M, BLOCK_N) tile of pairs, the pairwise quantity the kernel is a
  function of — the dot product x·y, the squared distance ||x - y||² or the L1 distance |x - y|_1 —
  accumulated in float32 (float64 for float64 input);
* the *epilogue*: the kernel's formula applied elementwise to that quantity, chosen by the ``KIND``
  constexpr, one row of :data:`EPILOGUES` per registry kernel (cosine is linear on rows
  normalised by the preparation);
* the Gram kernels' output tiles: program id -> tile (upper block triangle in L2-friendly
  super-tiles), the exact diagonal, and the (transposed) stores.

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

import math
from dataclasses import dataclass
from typing import Callable

import torch

from kernelkit_gpu._launch import tl, triton  # stand-ins where triton is not installed

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
K_PERIODIC = tl.constexpr(10)

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
    return tl.dot(tl.zeros((BLOCK_M, 16), ACC), tl.zeros((16, BLOCK_N), ACC), input_precision="ieee",
                  out_dtype=ACC)


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
        # four features per trip (same order as one at a time: bitwise the same sums), then the rest
        d4 = (D // 4) * 4
        for k in range(0, d4, 4):
            for u in tl.static_range(4):
                a = tl.load(xp, mask=mask_m, other=0.0).to(ACC)
                b = tl.load(yp, mask=mask_n, other=0.0).to(ACC)
                acc = _feature_update(acc, a, b, PAIRWISE)
                xp += stride_xk
                yp += stride_yk
        for k in range(d4, D):
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
        acc = tl.dot(a, b, acc, input_precision=DOT_PREC, out_dtype=ACC)
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
    distances only; there a tile with a pair closer than ``TAU_`` times its norms (the expansion
    cancels) is recomputed by direct differences. ``SKIP_DIAG``: pairs with row == column (K(X, X)) never trigger the direct
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
def _int_power(base, DEG):
    """base ** DEG for an integer DEG >= 0 by exponentiation by squaring: O(log2 DEG) multiplies
    (a 10^6 degree takes 20 squarings, not 10^6 products). Only products, so the sign is exact for
    negative bases (odd DEG negative, even DEG positive) and base ** 0 == 1 (0 ** 0 too, as
    NumPy); rounding grows like DEG u, as for repeated multiplication."""
    k = tl.full(base.shape, 1.0, base.dtype)
    sq = base
    e = tl.zeros((), tl.int32) + DEG  # a loop-carried int32 even where DEG arrives as a constant
    while e > 0:
        if e % 2 == 1:
            k = k * sq
        e = e // 2
        if e > 0:  # the last square is never needed (it could overflow for nothing)
            sq = sq * sq
    return k


@triton.jit
def _epilogue(s, p0, p1, p2, DEG, KIND: tl.constexpr):
    """The kernel value from the pairwise quantity ``s`` (elementwise; any shape).

    ``p0, p1, p2`` as packed by the kernel's row of :data:`EPILOGUES`:

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
    periodic                  pi / periodicity          2 log2(e) / l²       -
    ========================  ========================  ===================  =============

    (For per-feature gamma / length_scale the columns are pre-scaled and the scalar is 1.)
    """
    if KIND == K_LINEAR:
        k = s
    elif KIND == K_POLYNOMIAL:
        k = _int_power(p0 * s + p1, DEG)
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
        e = tl.exp2(-p1 * t)
        k = tl.where(e > 0.0, (1.0 + t) * e, 0.0)  # t = inf (p0 s overflows): 0, not inf * 0
    elif KIND == K_MATERN25:
        t = tl.sqrt(p0 * s)
        e = tl.exp2(-p1 * t)
        k = tl.where(e > 0.0, (1.0 + t + p2 * (t * t)) * e, 0.0)
    elif KIND == K_PERIODIC:
        sn = tl.sin(p0 * tl.sqrt(s))
        k = tl.exp2(-p1 * (sn * sn))
    else:  # K_RATIONAL_QUADRATIC
        # (1 + u) ** -alpha = exp2(-alpha log2(1 + u)); log2(1 + u) via Goldberg's log1p trick,
        # accurate to rounding even where 1 + u rounds to 1.
        u = p0 * s
        w = 1.0 + u
        one = w == 1.0
        den = tl.where(one, 1.0, w - 1.0)
        l2 = tl.where(one, u * p2, tl.log2(w) * (u / den))
        # u = inf (p0 s overflows): log2(1 + u) = log2(p0) + log2(s) to rounding
        big = tl.log2(p0) + tl.log2(tl.where(one, 1.0, s))
        l2 = tl.where(u < float("inf"), l2, big)
        k = tl.exp2(-p1 * l2)
    return k


@triton.jit
def _log_derivative(k, s, p0, p1, p2, KIND: tl.constexpr):
    """phi of the fused gradient contractions (:mod:`kernelkit_gpu.pairwise.contract_fused`), from
    the kernel value ``k`` and the pairwise quantity ``s`` of operands scaled per feature by the
    row's first ``fused_derivatives`` parameter theta_k: dK / dlog theta_k = phi Delta_k^2
    (phi |Delta_k| for the L1 distance), Delta_k the scaled difference in feature k. ``p0, p1,
    p2`` as :func:`_epilogue` (per-feature packing). One branch per KIND whose row of
    :data:`EPILOGUES` has ``fused_derivatives`` (x~ = x sqrt(gamma) for rbf, x gamma for
    laplacian, x / length_scale otherwise; r = sqrt(s)):

    ====================  ==========================================
    KIND                  phi
    ====================  ==========================================
    rbf, laplacian        -K
    matern 0.5            K / r  (0 at r = 0)
    matern 1.5            3 K / (1 + t),  t = sqrt(3) r
    matern 2.5            (5/3) (1 + t) K / (1 + t + t^2/3),  t = sqrt(5) r
    rational quadratic    K / (1 + q),  q = s / (2 alpha)
    ====================  ==========================================
    """
    if KIND == K_RBF or KIND == K_LAPLACIAN:
        f = -k
    elif KIND == K_MATERN05:
        pos = s > 0.0
        f = tl.where(pos, k / tl.sqrt(tl.where(pos, s, 1.0)), 0.0)
    elif KIND == K_MATERN15:
        t = tl.sqrt(p0 * s)
        f = 3.0 * k / (1.0 + t)
    elif KIND == K_MATERN25:
        t = tl.sqrt(p0 * s)
        f = (5.0 / 3.0) * (1.0 + t) * k / (1.0 + t + t * t / 3.0)
    else:  # rational quadratic: p0 = 1 / (2 alpha)
        f = k / (1.0 + p0 * s)
    return f


@triton.jit
def _extra_log_derivative(k, s, p0, p1, p2, KIND: tl.constexpr):
    """psi = dK / dlog of the second ``fused_derivatives`` parameter of the KIND's row (a scalar
    one), from ``k`` and ``s`` as :func:`_log_derivative`: the rational quadratic kernel's
    alpha, psi = alpha K (q / (1 + q) - log1p(q)), q = s / (2 alpha) (p0 = 1 / (2 alpha),
    p1 = alpha), the one KIND with a second fused parameter (another would branch on KIND
    here)."""
    q = p0 * s
    w = 1.0 + q
    # log1p(q) to full precision: log(w) q / (w - 1), q itself where w rounds to 1
    lg = tl.where(w == 1.0, q, tl.log(w) * q / tl.where(w == 1.0, 1.0, w - 1.0))
    return p1 * k * (q / w - lg)


# ------------------------------------------------------------------------ the kernel table
#: log2(e): the epilogues use exp2, so natural exponents are scaled by it.
LOG2E = 1.0 / math.log(2.0)


def _per_feature(v):
    return len(getattr(v, "shape", ())) > 0


def _safe_sqrt(u):
    """sqrt(u) for u >= 0 whose forward-mode derivative is 0, not 0 * inf, where u == 0."""
    positive = u > 0
    return torch.where(positive, torch.sqrt(torch.where(positive, u, 1.0)), 0.0)


@dataclass(frozen=True)
class Epilogue:
    """How one registry kernel runs on the GPU: a row of :data:`EPILOGUES`.

    ``kind(params)``: the ``KIND`` constexpr of :func:`_epilogue`. ``pack(params)``: its
    ``(p0, p1, p2)`` and the per-column data scale (per-feature gamma / length_scale; None
    otherwise), from the registry parameters with defaults made explicit
    (:meth:`~kernelkit_math.registry.KernelSpec.explicit`); plain arithmetic, so the values may be
    floats, NumPy arrays or torch tensors (:mod:`kernelkit_gpu.pairwise.log_gradient` differentiates through
    it). ``torch(s, p0, p1, p2, deg, kind)``: the torch twin of :func:`_epilogue`.
    ``fused_derivatives``: the registry hyperparameters, in registry order, whose
    log-derivatives :func:`_log_derivative` (the first, a per-feature one the operands are scaled
    by) and :func:`_extra_log_derivative` (a second, scalar one) give: the kernels of the fused
    gradient contractions (:data:`kernelkit_gpu.pairwise.contract_fused.FUSED_KERNELS`, the GP's
    fused gradient); empty for the others, whose contractions the torch twin computes.
    """

    kind: Callable
    pack: Callable
    torch: Callable
    fused_derivatives: tuple = ()


def _fixed(kind):
    return lambda params: int(kind.value)


def _no_numbers(params):
    return (0.0, 0.0, 0.0), None


def _pack_exp_of_distance(name):
    def pack(params):
        gamma = params["gamma"]
        if _per_feature(gamma):
            # sum_k g_k (x_k - y_k)^2 = ||sqrt(g) x - sqrt(g) y||^2; sum_k g_k |x_k - y_k| = |g x - g y|_1
            return (LOG2E, 0.0, 0.0), (gamma**0.5 if name == "rbf" else gamma)
        return (gamma * LOG2E, 0.0, 0.0), None
    return pack


def _pack_length_scaled(p0_isotropic, p0_per_feature, p1, p2):
    """Kernels of ||x - y|| / length_scale: per-feature length scales scale the columns."""
    def pack(params):
        ls = params["length_scale"]
        if _per_feature(ls):
            return (p0_per_feature(params), p1(params), p2), 1.0 / ls
        return (p0_isotropic(params), p1(params), p2), None
    return pack


_MATERN_C = {0.5: 1.0, 1.5: 3.0, 2.5: 5.0}


def _matern_torch(s, p0, p1, p2, deg, kind):
    t = _safe_sqrt(p0 * s)
    e = torch.exp(-t)
    if kind == K_MATERN05.value:
        return e
    poly = (1.0 + t) if kind == K_MATERN15.value else (1.0 + t + t * t / 3.0)
    return torch.where(e > 0, poly * e, 0.0)  # t = inf (p0 s overflows): 0, not inf * 0


def _rational_quadratic_torch(s, p0, p1, p2, deg, kind):
    u = p0 * s
    # u = inf (p0 s overflows): log(1 + u) = log(p0) + log(s) to rounding; log(s) only read
    # there (s > 0), so its autograd sees no log(0) (whose inf times where's 0 gave NaN gradients)
    inf = torch.isinf(u)
    big = (torch.log(torch.as_tensor(p0, dtype=s.dtype, device=s.device))
           + torch.log(torch.where(inf, s, torch.ones_like(s))))
    return torch.exp(-p1 * torch.where(inf, big, torch.log1p(u)))


_LINEAR = Epilogue(_fixed(K_LINEAR), _no_numbers, lambda s, p0, p1, p2, deg, kind: s)

#: One row per registry kernel (cosine is the linear epilogue on rows the launchers normalise).
EPILOGUES = {
    "linear": _LINEAR,
    "cosine": _LINEAR,
    "polynomial": Epilogue(
        _fixed(K_POLYNOMIAL),
        lambda params: ((params["gamma"], params["coef0"], 0.0), None),
        lambda s, p0, p1, p2, deg, kind: (p0 * s + p1) ** deg),
    "sigmoid": Epilogue(
        _fixed(K_SIGMOID),
        lambda params: ((params["gamma"], params["coef0"], 2.0 * LOG2E), None),
        lambda s, p0, p1, p2, deg, kind: torch.tanh(p0 * s + p1)),
    "exponential": Epilogue(
        _fixed(K_EXPONENTIAL),
        lambda params: ((params["scale"] * LOG2E, 0.0, 0.0), None),
        lambda s, p0, p1, p2, deg, kind: torch.exp2(p0 * s)),
    "rbf": Epilogue(_fixed(K_RBF), _pack_exp_of_distance("rbf"),
                    lambda s, p0, p1, p2, deg, kind: torch.exp2(-p0 * s), ("gamma",)),
    "laplacian": Epilogue(_fixed(K_LAPLACIAN), _pack_exp_of_distance("laplacian"),
                          lambda s, p0, p1, p2, deg, kind: torch.exp2(-p0 * s), ("gamma",)),
    "matern": Epilogue(
        lambda params: int({0.5: K_MATERN05, 1.5: K_MATERN15, 2.5: K_MATERN25}[params["nu"]].value),
        _pack_length_scaled(
            lambda p: _MATERN_C[p["nu"]] / (p["length_scale"] * p["length_scale"]),
            lambda p: _MATERN_C[p["nu"]], lambda p: LOG2E, 1.0 / 3.0),
        _matern_torch, ("length_scale",)),
    "rational_quadratic": Epilogue(
        _fixed(K_RATIONAL_QUADRATIC),
        _pack_length_scaled(
            lambda p: 1.0 / (2.0 * p["alpha"] * p["length_scale"] * p["length_scale"]),
            lambda p: 1.0 / (2.0 * p["alpha"]), lambda p: p["alpha"], LOG2E),
        _rational_quadratic_torch, ("length_scale", "alpha")),
    "periodic": Epilogue(
        _fixed(K_PERIODIC),
        lambda params: ((math.pi / params["periodicity"],
                         2.0 * LOG2E / (params["length_scale"] * params["length_scale"]), 0.0), None),
        lambda s, p0, p1, p2, deg, kind: torch.exp2(-p1 * torch.sin(p0 * _safe_sqrt(s)) ** 2)),
}


# --------------------------------------------------------------------- Gram output tiles
#: Row blocks that share a column block in the grouped order of K(X, Y) (``_tile_coords``).
GROUP_M = tl.constexpr(8)


@triton.jit
def _tri_decode(p):
    """p -> (a, b) with p = a (a + 1) / 2 + b, 0 <= b <= a."""
    p = tl.cast(p, tl.int64)
    a = ((tl.sqrt((8 * p + 1).to(tl.float32)) - 1.0) * 0.5).to(tl.int64)
    a = tl.where(a * (a + 1) // 2 > p, a - 1, a)
    a = tl.where((a + 1) * (a + 2) // 2 <= p, a + 1, a)
    return a.to(tl.int32), (p - a * (a + 1) // 2).to(tl.int32)


@triton.jit
def _tile_coords(t, N, M, group, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 TRIANGLE: tl.constexpr):
    """Program id -> (row block, column block, whether that tile exists).

    TRIANGLE (K(X, X)): the upper block triangle in super-tiles of ``group`` x ``group`` blocks
    (a run-time value: no recompilation), themselves enumerated over the upper triangle of
    super-blocks; consecutive programs stay inside one super-tile, so its 2 ``group`` operand
    blocks are read from DRAM about once and reused ``group`` times from L2 while the output
    streams past (in plain triangle order, group = 1, the output evicts the operands and they are
    re-read from DRAM for every tile). Programs that land below the diagonal or past the edge have
    no tile (``valid`` false).
    Otherwise grouped ordering: GROUP_M row blocks share each column block while it is in L2.
    """
    if TRIANGLE:
        gg = group * group
        sa, sb = _tri_decode(t // gg)
        inner = t % gg
        pid_m = sb * group + inner // group
        pid_n = sa * group + inner % group
        valid = (pid_m <= pid_n) & (pid_n < tl.cdiv(M, BLOCK_N))
    else:
        num_pid_m = tl.cdiv(N, BLOCK_M)
        num_pid_n = tl.cdiv(M, BLOCK_N)
        gsize = GROUP_M * num_pid_n
        first_m = (t // gsize) * GROUP_M
        size_m = tl.minimum(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (t % gsize) % size_m
        pid_n = (t % gsize) // size_m
        valid = pid_m < num_pid_m
    return pid_m, pid_n, valid


@triton.jit
def _store_tile(out_ptr, k, row0, col0, lm, ln, mask, stride_om, stride_on,
                TRANSPOSED: tl.constexpr, OFF64: tl.constexpr):
    """Store the tile at (row0, col0), or (TRANSPOSED) its transpose at (col0, row0).

    Addresses are a 64-bit tile base plus 32-bit offsets inside the tile (OFF64: 64-bit offsets,
    for outputs whose strides times the block size overflow 32 bits): fewer registers than a
    64-bit pointer per element. Streaming stores (``st.global.cs``: evict-first in L2, so the
    output does not push the operands out).
    """
    if OFF64:
        lm = lm.to(tl.int64)
        ln = ln.to(tl.int64)
    if TRANSPOSED:
        base = out_ptr + col0.to(tl.int64) * stride_om + row0.to(tl.int64) * stride_on
        tl.store(base + (ln[None, :] * stride_om + lm[:, None] * stride_on), k, mask=mask,
                 cache_modifier=".cs")
    else:
        base = out_ptr + row0.to(tl.int64) * stride_om + col0.to(tl.int64) * stride_on
        tl.store(base + (lm[:, None] * stride_om + ln[None, :] * stride_on), k, mask=mask,
                 cache_modifier=".cs")


@triton.jit
def _finish_tile(s, nx_ptr, p0, p1, p2, DEG, out_ptr, pid_m, pid_n, N, M, stride_om, stride_on,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, KIND: tl.constexpr,
                 NORM_DIAG: tl.constexpr, TRIANGLE: tl.constexpr, DIAG: tl.constexpr,
                 UNIT_DIAG: tl.constexpr, OFF64: tl.constexpr):
    """Epilogue and stores of one tile of the pairwise quantity ``s``.

    DIAG (K(X, X), square blocks): tiles on the block diagonal write the diagonal exactly: 1
    under UNIT_DIAG (the registry's ``normalized`` kernels); with NORM_DIAG, the epilogue of the
    row norms ``nx``, for dot-product kernels of uncentred operands.
    TRIANGLE: each tile is stored at (i, j) and transposed at (j, i); diagonal tiles mirror their
    upper triangle onto the lower one, so K is exactly symmetric.
    Under TRIANGLE N == M; masking rows by M lets the transposed store vectorise too (M is
    specialised on divisibility by 16, N is not).
    """
    row0 = pid_m * BLOCK_M
    col0 = pid_n * BLOCK_N
    lm = tl.arange(0, BLOCK_M)
    ln = tl.arange(0, BLOCK_N)
    mask_m = row0 + lm < (M if TRIANGLE else N)
    mask_n = col0 + ln < M
    mask = mask_m[:, None] & mask_n[None, :]
    k = _epilogue(s, p0, p1, p2, DEG, KIND)
    OT: tl.constexpr = out_ptr.dtype.element_ty
    if DIAG:
        if pid_m == pid_n:
            on_diag = lm[:, None] == ln[None, :]
            if NORM_DIAG:
                nx = tl.load(nx_ptr + row0 + lm, mask=mask_m, other=0.0)
                kd = _epilogue(tl.where(on_diag, nx[:, None] + tl.zeros_like(s), s), p0, p1, p2,
                               DEG, KIND)
            else:
                kd = k
            if UNIT_DIAG:
                kd = tl.where(on_diag, 1.0, kd)  # k(x, x) = 1: the registry flag `normalized`
            if TRIANGLE:
                # mirror the upper triangle of the tile onto its lower one: one store, symmetric
                kd = tl.where(lm[:, None] <= ln[None, :], kd, tl.trans(kd))
            kd = kd.to(OT)
            _store_tile(out_ptr, kd, row0, col0, lm, ln, mask, stride_om, stride_on, False, OFF64)
        else:
            k = k.to(OT)
            _store_tile(out_ptr, k, row0, col0, lm, ln, mask, stride_om, stride_on, False, OFF64)
            if TRIANGLE:
                _store_tile(out_ptr, k, row0, col0, lm, ln, mask, stride_om, stride_on, True, OFF64)
    else:
        k = k.to(OT)
        _store_tile(out_ptr, k, row0, col0, lm, ln, mask, stride_om, stride_on, False, OFF64)
