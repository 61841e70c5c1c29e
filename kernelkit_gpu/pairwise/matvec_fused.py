"""Matrix-free kernel products K(X, Y) @ V without materialising K.

Layers: ``_matvec_kernel`` (``@triton.jit``: each program owns BLOCK_M rows of X and one chunk of
BLOCK_R columns of V, and sweeps all of Y in BLOCK_N tiles), ``matvec_fwd`` (launcher) and
``kernel_matvec`` (public). The pairwise tile and the epilogue are the same ``@triton.jit``
helpers as :func:`kernelkit_gpu.gram` (:mod:`kernelkit_gpu.epilogues`), so each kernel's formula
has one GPU definition.
"""

from __future__ import annotations

import triton
import triton.language as tl
import torch

from kernelkit_gpu import checks
from kernelkit_gpu import epilogues as E
from kernelkit_gpu import _launch
from kernelkit_gpu import prepare as P
from kernelkit_gpu import distributed
from kernelkit_gpu.epilogues import _epilogue, _load_params, _pairwise_tile

__all__ = ["kernel_matvec", "matvec_fwd"]

#: Largest chunk of V's columns one program handles; wider V uses a second grid axis.
MAX_BLOCK_R = 64
#: Column tiles summed on the tensor cores before their sum joins the accumulator, which is
#: float64 for float32 (and 16-bit) operands (:func:`_matvec_kernel`): the tensor cores truncate
#: where they add (errors, times and the CG stall that float32 group sums caused at M = 1e6:
#: docs/benchmarks.md, figures behind choices in the code).
GROUP_TILES = 16


def _vec_configs():
    if _launch.INTERPRET:
        return [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}, num_warps=4, num_stages=1)]
    # Register use checked with ptxas for sm_90 (D = 3 direct and D = 64 tensor-core tiles):
    # these compile without spills or with a few words at most.
    return [
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=3),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=8, num_stages=3),
        triton.Config({"BLOCK_M": 256, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=8, num_stages=3),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4, num_stages=3),
    ]


def _block_configs():
    if _launch.INTERPRET:
        return [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}, num_warps=4, num_stages=1)]
    return [
        # the default for tensor-core pairwise tiles of float32 and 16-bit operands, and then
        # for float64 ones (:func:`_default_config`)
        triton.Config({"BLOCK_M": 256, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=8, num_stages=2),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=8, num_stages=3),
        # the default for float64 direct-difference operands
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4, num_stages=3),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4, num_stages=3),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=3),
        # the defaults for direct-difference operands (:func:`_default_config`): chunks of 32
        # columns of V, and of at most 16
        triton.Config({"BLOCK_M": 256, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=8, num_stages=2),
        triton.Config({"BLOCK_M": 256, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4, num_stages=2),
    ]


def _default_config(ops, vec, block_r=MAX_BLOCK_R):
    """The config launched without the autotuner. Tensor-core pairwise tiles (D > 16) take
    256 x 64 tiles for chunks of 64 columns of V (13% faster than 128 x 64 at D = 28 and 7% at
    D = 64 on the GPU, the same errors; 128 x 128 was as fast with 1.5x the error: its float32
    group sums are twice as long), 128 x 64 for narrower chunks (not measured with 256 x 64)
    and for float64 operands. Several columns of V with direct-difference operands
    (D <= 16) take 256 x 32 tiles (the tf32x3 product with V dominates there), with 4 warps
    where a program's chunk of V has at most 16 columns; float64 ones 128 x 32 tiles with 4
    warps. The sweeps behind these choices are in docs/benchmarks.md (figures behind choices
    in the code)."""
    if vec:
        return _vec_configs()[0]
    configs = _block_configs()
    if len(configs) == 1:
        return configs[0]
    if ops.mode != E.MODE_DIRECT.value:  # 256 x 64 measured for chunks of 64 columns only
        return configs[0] if ops.acc != torch.float64 and block_r >= 64 else configs[1]
    if ops.acc == torch.float64:
        return configs[2]
    return configs[-1] if block_r <= 16 else configs[-2]


@triton.jit
def _matvec_step(acc, x_ptr, y_ptr, v_ptr, nx, ny_ptr, p0, p1, p2, DEG,
                 offs_m, mask_m, offs_r, mask_r, n0, M, D,
                 stride_xm, stride_xk, stride_ym, stride_yk, stride_vm, stride_vr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 KIND: tl.constexpr, PAIRWISE: tl.constexpr, MODE: tl.constexpr, DK: tl.constexpr,
                 VEC: tl.constexpr, RAGGED: tl.constexpr, DOT_PREC: tl.constexpr,
                 MV_PREC: tl.constexpr, TAU_: tl.constexpr, BIAS: tl.constexpr, ACC: tl.constexpr):
    """acc += K(x_tile, y[n0 : n0 + BLOCK_N]) @ v[n0 : n0 + BLOCK_N, r-chunk].

    BIAS: x and y are centred dot-product operands and nx / ny their per-row offsets
    (x·y = x̃·ỹ + b_x + b_y), added to the tile as :func:`kernelkit_gpu.gram` does.
    """
    offs_n = n0 + tl.arange(0, BLOCK_N)
    mask_n = offs_n < M
    if (PAIRWISE == E.PW_SQEUCLIDEAN and MODE == E.MODE_MMA) or BIAS:
        ny = tl.load(ny_ptr + offs_n, mask=mask_n, other=0.0)
    else:
        ny = tl.zeros((BLOCK_N,), ACC)
    s = _pairwise_tile(x_ptr, y_ptr, nx, ny, offs_m, offs_n, mask_m, mask_n, D,
                       stride_xm, stride_xk, stride_ym, stride_yk,
                       BLOCK_M, BLOCK_N, BLOCK_K, PAIRWISE, MODE, DK, DOT_PREC, False, TAU_, True, ACC)
    if BIAS:
        s = s + (nx[:, None] + ny[None, :])
    k = _epilogue(s, p0, p1, p2, DEG, KIND)
    if RAGGED:
        k = tl.where(mask_n[None, :], k, 0.0)
    if VEC:
        v = tl.load(v_ptr + offs_n.to(tl.int64) * stride_vm, mask=mask_n, other=0.0)
        acc += k * v[None, :]
    else:
        v = tl.load(v_ptr + offs_n.to(tl.int64)[:, None] * stride_vm + offs_r[None, :] * stride_vr,
                    mask=mask_n[:, None] & mask_r[None, :], other=0.0)
        acc = tl.dot(k, v, acc, input_precision=MV_PREC, out_dtype=ACC)
    return acc


@triton.jit(do_not_specialize=["N", "M", "R", "D", "DEG"])
def _matvec_kernel(
    x_ptr, y_ptr, nx_ptr, ny_ptr, prm_ptr, v_ptr, out_ptr,
    N, M, D, R, DEG,
    stride_xm, stride_xk, stride_ym, stride_yk, stride_vm, stride_vr, stride_om, stride_or,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
    KIND: tl.constexpr, PAIRWISE: tl.constexpr, MODE: tl.constexpr, DK: tl.constexpr,
    VEC: tl.constexpr, DOT_PREC: tl.constexpr, MV_PREC: tl.constexpr, D_BUCKET: tl.constexpr,
    TAU_: tl.constexpr, BIAS: tl.constexpr, GROUP_TILES: tl.constexpr,
):
    """out[rows, r-chunk] = sum over all column tiles of K(x_rows, y_tile) @ v[tile, r-chunk].

    VEC (R == 1): the products K * v accumulate elementwise in a (BLOCK_M, BLOCK_N) register tile
    (one FMA per pair) and are reduced once at the end; otherwise K @ V runs on tl.dot, whose
    sums over GROUP_TILES column tiles add into a float64 accumulator.
    The column loop runs unmasked over full tiles and handles a ragged last tile separately.
    """
    ACC: tl.constexpr = out_ptr.dtype.element_ty
    pid_m = tl.program_id(0)
    pid_r = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < N
    offs_r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    mask_r = offs_r < R
    if (PAIRWISE == E.PW_SQEUCLIDEAN and MODE == E.MODE_MMA) or BIAS:
        nx = tl.load(nx_ptr + offs_m, mask=mask_m, other=0.0)
    else:
        nx = tl.zeros((BLOCK_M,), ACC)
    p0, p1, p2 = _load_params(prm_ptr)
    if VEC:
        acc = tl.zeros((BLOCK_M, BLOCK_N), ACC)
    else:  # float64 sums of the groups' tensor-core sums (GROUP_TILES)
        acc = tl.zeros((BLOCK_M, BLOCK_R), tl.float64)

    m_full = (M // BLOCK_N) * BLOCK_N
    GROUP_N: tl.constexpr = GROUP_TILES * BLOCK_N
    for g0 in range(0, m_full, GROUP_N):
        # a group's tiles accumulate on the tensor cores, which truncate where they add; the
        # groups add in IEEE arithmetic in registers (float64 with tl.dot: GROUP_TILES)
        part = tl.zeros(acc.shape, ACC)
        for n0 in range(g0, tl.minimum(g0 + GROUP_N, m_full), BLOCK_N):
            part = _matvec_step(part, x_ptr, y_ptr, v_ptr, nx, ny_ptr, p0, p1, p2, DEG,
                                offs_m, mask_m, offs_r, mask_r, n0, M, D,
                                stride_xm, stride_xk, stride_ym, stride_yk, stride_vm, stride_vr,
                                BLOCK_M, BLOCK_N, BLOCK_K, KIND, PAIRWISE, MODE, DK,
                                VEC, False, DOT_PREC, MV_PREC, TAU_, BIAS, ACC)
        acc += part.to(acc.dtype)
    if m_full < M:
        part = _matvec_step(tl.zeros(acc.shape, ACC), x_ptr, y_ptr, v_ptr, nx, ny_ptr,
                            p0, p1, p2, DEG, offs_m, mask_m, offs_r, mask_r, m_full, M, D,
                            stride_xm, stride_xk, stride_ym, stride_yk, stride_vm, stride_vr,
                            BLOCK_M, BLOCK_N, BLOCK_K, KIND, PAIRWISE, MODE, DK,
                            VEC, True, DOT_PREC, MV_PREC, TAU_, BIAS, ACC)
        acc += part.to(acc.dtype)

    rows = offs_m.to(tl.int64)
    if VEC:
        res = tl.sum(acc, axis=1)
        tl.store(out_ptr + rows * stride_om, res.to(out_ptr.dtype.element_ty), mask=mask_m)
    else:
        tl.store(out_ptr + rows[:, None] * stride_om + offs_r[None, :] * stride_or,
                 acc.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_r[None, :])


def _prune_default_first(configs, named_args, **kwargs):
    """All configs, or the first (the default) when autotuning is off (KERNELKIT_GPU_AUTOTUNE=0)."""
    return _launch.pick_configs(configs, 0)


_KEY = ["D_BUCKET", "KIND", "PAIRWISE", "MODE", "VEC", "BLOCK_R", "DOT_PREC", "MV_PREC", "BIAS"]
_PRUNE = {"early_config_prune": _prune_default_first}
_matvec_vec = triton.autotune(configs=_vec_configs(), key=_KEY, prune_configs_by=_PRUNE)(
    _matvec_kernel)
_matvec_block = triton.autotune(configs=_block_configs(), key=_KEY, prune_configs_by=_PRUNE)(
    _matvec_kernel)


def matvec_fwd(ops, plan, v, out, precision, config=None):
    """Launch the matrix-free product on prepared operands; ``v`` is (M, R), ``out`` (N, R).

    ``config``: a ``triton.Config`` to launch with, bypassing the autotuner (tests run every config).
    Without it: the default (:func:`_default_config`), or with ``KERNELKIT_GPU_AUTOTUNE=1`` the
    autotuned one.
    """
    n, m, r = ops.n, ops.m, v.shape[1]
    vec = r == 1
    block_r = 16 if vec else _launch.block_size(r, hi=MAX_BLOCK_R)
    if ops.acc == torch.float64:
        mv_prec = "ieee"
    else:
        mv_prec = "tf32x3" if precision == "accurate" else "tf32"
    launcher = _matvec_vec if vec else _matvec_block
    extra = {}
    if config is None and not _launch.autotuning():
        # the default config, launched directly: Triton's autotuner would still time a single
        # remaining config (several full runs: seconds at N = M = 10^6) at the first call
        config = _default_config(ops, vec, block_r)
    if config is not None:
        launcher, extra = _matvec_kernel, config.all_kwargs()

    def grid(meta):
        return (triton.cdiv(n, meta["BLOCK_M"]), triton.cdiv(r, block_r))

    launcher[grid](
        ops.x, ops.y, ops.nx, ops.ny, ops.prm, v, out,
        n, m, ops.d, r, plan.deg,
        ops.stride_x[0], ops.stride_x[1], ops.stride_y[0], ops.stride_y[1],
        v.stride(0), v.stride(1), out.stride(0), out.stride(1),
        BLOCK_R=block_r, KIND=plan.kind, PAIRWISE=plan.pairwise, MODE=ops.mode, DK=ops.dk,
        VEC=vec, DOT_PREC=ops.dot_prec, MV_PREC=mv_prec, D_BUCKET=ops.d_bucket, TAU_=E.TAU,
        BIAS=ops.bias, GROUP_TILES=GROUP_TILES, **extra,
    )
    return out


def check_matvec_args(x, y, v, transpose):
    """Validate shapes for K(X, Y) @ V (or K(X, Y).T @ U); return (x_eff, y_eff, v2d, squeeze,
    names, finite): ``names`` those of x_eff and y_eff ("y", "x" with ``transpose``), ``finite``
    the :class:`kernelkit_gpu.checks.FiniteCheck` of x, y, v (u) with v's flag set; the flags of
    x and y are left to the preparation (``_prepare.prepare(..., check=finite)``), then
    ``finite.start_read()``."""
    checks.check_pair(x, y)
    if y is None:
        raise TypeError("y must be a torch.Tensor of shape (M, D); pass y=x for K(X, X) @ V")
    checks.check_flag(transpose, "transpose")
    vname = "u" if transpose else "v"
    checks.check_tensor(v, vname)
    checks.check_floating(v, vname)
    if v.device != x.device:
        raise ValueError(f"{vname} must be on the same device as x; got {v.device} and {x.device}")
    # K(X, Y).T @ U == K(Y, X) @ U: every registry kernel is a symmetric function of (x, y).
    xe, ye = (y, x) if transpose else (x, y)
    want = ye.shape[0]
    if v.ndim not in (1, 2) or v.shape[0] != want:
        shape = "(N,) or (N, R)" if transpose else "(M,) or (M, R)"
        raise ValueError(
            f"{vname} must have shape {shape} with {'N' if transpose else 'M'} = {want}; "
            f"got {tuple(v.shape)}"
        )
    squeeze = v.ndim == 1
    names = ("y", "x") if transpose else ("x", "y")
    # x_eff first: its column mean centres both, so it is named first when both are out of range
    finite = checks.FiniteCheck(**{names[0]: xe, names[1]: ye, vname: v}, deferred=names)
    return xe, ye, (v[:, None] if squeeze else v), squeeze, names, finite


def kernel_matvec(x, y, v, kernel="rbf", *, transpose=False, precision="accurate", **params):
    r"""Matrix-free product K(X, Y) @ V (or K(X, Y).T @ U) in one Triton kernel; K never stored.

    Equivalent to ``get_kernel(kernel).value(X, Y, **params) @ V`` with the float64 references of
    :mod:`kernelkit_math.kernels` (e.g. ``kernelkit_math.kernels.rbf(X, Y, gamma) @ V``) up to
    dtype tolerance, in O((N + M) (D + R)) memory.

    Parameters
    ----------
    x : torch.Tensor, shape (N, D)
        float32, float64, float16 or bfloat16, on a CUDA device (CPU under the interpreter).
    y : torch.Tensor, shape (M, D)
        Same dtype and device; pass ``y=x`` for K(X, X) @ V.
    v : torch.Tensor, shape (M,) or (M, R); with ``transpose=True`` shape (N,) or (N, R)
        Any floating dtype (converted to float32, or float64 for float64 x); any R >= 1.
    kernel : str
        A registry kernel name (see :func:`kernelkit_gpu.gram`).
    transpose : bool
        Compute K(X, Y).T @ U (= K(Y, X) @ U, every registry kernel being symmetric in x, y).
    precision : {"accurate", "fast"}
        As in :func:`kernelkit_gpu.gram`: the pairwise quantities come from the same centred
        data and the same 3xTF32 (accurate; here Triton's tf32x3) or plain TF32 (fast)
        tensor-core dot products, whose measured Gram errors are in :func:`kernelkit_gpu.gram`'s
        Notes (relative Frobenius: accurate 1.5e-7 at D = 64 to 3.4e-7 at D = 512; fast
        2.0e-4 / 6.8e-5 on N(0, 1) data; docs/benchmarks.md). It also selects tf32x3 (accurate) or tf32 (fast)
        for the K @ V tensor-core products when R > 1. The matrix-free product has no GPU error
        measurement of its own yet; the tests bound each float32 element by
        (1e-6 + 4 M u) (|K| |V|) + 1e-6 (u = 2^-24; plus a conditioning term for the
        dot-product kernels), under the interpreter and with ``pytest --device cuda``.
    **params
        Kernel parameters with scikit-learn names, validated by the registry.

    Returns
    -------
    torch.Tensor, shape (N,) or (N, R) (transpose: (M,) or (M, R))
        float32 (float64 for float64 x). With R > 1 the tensor cores sum K @ V over groups of
        :data:`GROUP_TILES` column tiles and the groups add in float64 (float32 sums lost the
        digits a badly conditioned CG needs at M = 1e6); with R = 1 the sums are float32 FMAs,
        whose error grows with M like a float32 dot product of length M.

    Raises
    ------
    TypeError, ValueError
        As :func:`kernelkit_gpu.gram`, naming the offending argument (parameters that overflow
        the accumulation dtype, ``x`` or ``y`` with NaN, infinity or values out of range
        included); ValueError also when ``v`` (``u``) contains NaN or infinity ("v contains NaN
        or infinity; ..."). The data flags are set by the torch preparation (a reduction over
        the prepared x and y, and one over v) and copied to the host before the product is
        queued: the call waits for the preparation only.

    Notes
    -----
    For D <= 16 each pair costs a few FMAs for the distance, one exp2 and one FMA with v (R = 1);
    larger D uses tensor-core dot products on centred data as :func:`kernelkit_gpu.gram` does:
    squared distances of rows centred on x's column mean, and for the dot-product kernels
    (linear, polynomial, sigmoid, exponential; float32 / float64) x and y each centred on their
    own column mean, x·y = x̃·ỹ + b_x + b_y with the same float64 per-row offsets
    (:func:`kernelkit_gpu.prepare.dot_offsets`).

    Under an initialised ``torch.distributed`` process group of several ranks every rank passes
    the same full x, y, v and gets the full result; each computes its block of output rows
    (:func:`kernelkit_gpu.distributed.sharded_rows`; :func:`kernelkit_gpu.distributed.local`
    turns this off).

    Examples
    --------
    >>> import os; os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU: the Triton interpreter
    '1'
    >>> import torch, kernelkit_gpu
    >>> x, y, v = torch.randn(6, 3), torch.randn(4, 3), torch.randn(4)
    >>> kernelkit_gpu.kernel_matvec(x, y, v, "rbf", gamma=0.5).shape
    torch.Size([6])
    """
    if distributed.active():  # a process group: rows shared out (kernelkit_gpu.distributed)
        return distributed.sharded_rows(kernel_matvec, x, y, v, kernel, transpose=transpose,
                                        precision=precision, **params)
    xe, ye, v2, squeeze, names, finite = check_matvec_args(x, y, v, transpose)
    checks.check_precision(precision)
    plan = P.kernel_plan(kernel, x.shape[1], params)
    P.check_params_range(plan, x.dtype)
    checks.check_triton_device(x)
    acc = P.acc_dtype(x.dtype)
    n, m, r = xe.shape[0], ye.shape[0], v2.shape[1]
    out = torch.empty((n, r), dtype=acc, device=x.device)
    if n == 0 or r == 0 or m == 0:
        finite.mark_non_finite("x", "y")
        finite.start_read()
        finite.raise_if_not_finite()
        out.zero_()  # an empty sum when m == 0
        return out[:, 0] if squeeze else out
    ops = P.prepare(xe, ye, plan, precision, symmetric=False, check=finite, names=names)
    finite.start_read()
    v2 = v2.to(acc)
    matvec_fwd(ops, plan, v2, out, precision)
    finite.raise_if_not_finite()  # waits for the preparation only, not for the product
    return out[:, 0] if squeeze else out
