"""Fused Triton Gram matrices K(X, Y) for every registry kernel.

Layers (kernel, launcher, public function: the layout of every kernelkit_gpu op):

* the ``@triton.jit`` kernels, in :mod:`kernelkit_gpu.pairwise.gram_tiles`: ``_gram_prep_kernel``
  (centre / scale / pad / split the operands, squared row norms), ``_gram_mma_kernel``
  (tensor-core tiles; K(X, X) on the upper block triangle), ``_gram_fix_kernel`` (direct
  recomputation of the tiles where the expansion cancels), ``_gram_direct_kernel`` (direct
  differences, feature by feature: D <= 16 and the L1 distance);
* their launch configs (heuristic defaults, or autotuning with ``KERNELKIT_GPU_AUTOTUNE=1``), in
  :mod:`kernelkit_gpu.pairwise.gram_configs`;
* here: the operands (``prepare_mma``, ``prepare_direct``: what :func:`kernelkit_gpu.prepare.recipe`
  decides, computed by the fused preparation kernel), the launchers and their dispatch
  (``gram_fwd``, ``launch_prepared``), and ``gram`` (public: validation, preparation).
  :mod:`kernelkit_gpu.pairwise.gram_rows` launches the same kernels on operands it prepares
  once for many calls.

The launchers reach the kernels through this module's namespace, so a spy set on
``kernelkit_gpu.gram``'s ``_gram_*_kernel`` attributes sees every launch (tests, benchmarks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import triton
import torch

from kernelkit_gpu import checks
from kernelkit_gpu import epilogues as E
from kernelkit_gpu import _launch
from kernelkit_gpu import prepare as P
from kernelkit_gpu.pairwise.gram_configs import (
    autotuned, direct_configs, direct_default_config, mma_configs, mma_default_config,
)
from kernelkit_gpu.pairwise.gram_tiles import (
    _gram_direct_kernel, _gram_fix_kernel, _gram_mma_kernel, _gram_prep_kernel,
)

__all__ = ["gram", "gram_fwd", "launch_prepared"]

#: Operand rows are padded with zeros to a multiple of this (>= every BLOCK_M / BLOCK_N), so the
#: MMA kernel loads whole tiles without masks.
PAD_ROWS = 128
#: The feature axis of MMA operands is padded with zeros to a multiple of this.
PAD_K = 16
#: K(X, X) computes its upper block triangle in super-tiles of SUPER_TILE x SUPER_TILE blocks,
#: so each super-tile's operand blocks are reused from L2 (``_epilogues._tile_coords``).
SUPER_TILE = 8


# ------------------------------------------------------------------------------- preparation
@dataclass
class MMAOperands:
    """Padded operands of ``_gram_mma_kernel`` and what ``_gram_fix_kernel`` needs."""

    x: torch.Tensor
    y: torch.Tensor
    nx: torch.Tensor
    ny: torch.Tensor
    dg: torch.Tensor
    prm: torch.Tensor
    kd: int
    split: bool
    dot_prec: str
    raw_x: torch.Tensor
    raw_y: torch.Tensor
    mean: torch.Tensor
    scale: Optional[torch.Tensor]
    n: int
    m: int
    d: int
    bias: bool = False
    sliced: bool = False


def _round_up(v, q):
    return -(-v // q) * q


def _prep_launch(x, mean, scale, kd, split, buf_dtype, nrm_dtype, feature_major=False, flag=None):
    """Launch ``_gram_prep_kernel``: (rows padded, kd or 2 kd) operand and (rows padded,) norms.

    ``flag``: a one-element int32 tensor set to 1 when x holds a NaN, an infinity or values out
    of range (:func:`kernelkit_gpu.checks.range_limit`); None: no check."""
    n, d = x.shape
    npad = _round_up(max(n, 1), PAD_ROWS)
    width = kd * (2 if split else 1)
    if feature_major:
        buf = torch.empty((width, npad), dtype=buf_dtype, device=x.device).T
    else:
        buf = torch.empty((npad, width), dtype=buf_dtype, device=x.device)
    nrm = torch.empty((npad,), dtype=nrm_dtype, device=x.device)
    block_r = PAD_ROWS if _launch.INTERPRET else 32
    dummy = mean if mean is not None else nrm
    _gram_prep_kernel[(npad // block_r,)](
        x, dummy, scale if scale is not None else dummy, buf, nrm,
        flag if flag is not None else nrm, n, d, kd,
        x.stride(0), x.stride(1), buf.stride(0), buf.stride(1),
        BLOCK_R=block_r, BLOCK_D=64, CENTRE=mean is not None,
        SCALE=scale is not None, SPLIT=split, CHECK=flag is not None,
        LIMIT=checks.range_limit(nrm_dtype), num_warps=4,
    )
    return buf, nrm


def _flag(check, name):
    return None if check is None else check.flag(name)


def prepare_mma(x, y, plan, r, symmetric, check=None):
    """Padded operands for ``_gram_mma_kernel`` (y None: K(X, X)), prepared as
    :func:`kernelkit_gpu.prepare.recipe` says: the centring and scaling run fused in
    ``_gram_prep_kernel`` (the values of ``_prepare.centre_and_scale``), which also pads and, for
    the accurate float32 mode, splits each value into a TF32 head and tail (3xTF32), and sets
    the flags "x" / "y" of ``check`` (a :class:`kernelkit_gpu.checks.FiniteCheck`) for
    non-finite or out-of-range data (dot-product offsets included)."""
    dev = x.device
    n, d = x.shape
    m = n if symmetric else y.shape[0]
    x, y, cos_diag, mean, mean_y, scale = P.normalized_inputs(x, y, plan, r, symmetric)
    split = r.dot_prec == "tf32x3"
    kd = _round_up(d, PAD_K)
    xb, nx = _prep_launch(x, mean, scale, kd, split, r.dtype, r.acc, flag=_flag(check, "x"))
    if symmetric:
        yb, ny = xb, nx
    else:
        yb, ny = _prep_launch(y, mean_y, scale, kd, split, r.dtype, r.acc,
                              flag=_flag(check, "y"))
    dg = nx  # the diagonal of a dot-product K(X, X): the epilogue of the squared row norms
    if r.bias:
        if symmetric:
            dg = _padded_like(nx, (x.to(torch.float64) ** 2).sum(dim=1))
            nx = ny = _padded_like(nx, P.dot_offsets(x, mean, mean))
        else:
            nx = _padded_like(nx, P.dot_offsets(x, mean, mean_y))
            ny = _padded_like(ny, P.dot_offsets(y, mean_y, mean))
        if check is not None:
            check.mark("x", P.out_of_range(nx, r.acc))
            if not symmetric:
                check.mark("y", P.out_of_range(ny, r.acc))
    if cos_diag is not None and symmetric:
        nx[:n].copy_(cos_diag)  # cosine's diagonal: exactly 1 (0 for zero rows)
    return MMAOperands(
        x=xb, y=yb, nx=nx, ny=ny, dg=dg, prm=P._params_tensor(plan.prm, r.acc, dev), kd=kd,
        split=split, dot_prec="ieee" if r.dot_prec == "ieee" else "tf32", raw_x=x,
        raw_y=x if symmetric else y, mean=mean if mean is not None else nx, scale=scale,
        n=n, m=m, d=d, bias=r.bias, sliced=split and plan.pairwise == E.PW_DOT.value,
    )


def _padded_like(like, values):
    """``values`` rounded once into a zero buffer with the shape and dtype of ``like``."""
    out = torch.zeros_like(like)
    out[: values.shape[0]] = values.to(like.dtype)
    return out


# ---------------------------------------------------------------------------------- launchers
def _off64(out, block):
    return 2 * block * max(abs(out.stride(0)), abs(out.stride(1)), 1) >= 2**31


def _grid(n, m, block, triangle, group):
    """(number of programs, super-tile size) of the Gram kernels (see ``_tile_coords``); the
    super-tile never exceeds the number of blocks (fewer empty programs for small N)."""
    nb_m, nb_n = triton.cdiv(n, block), triton.cdiv(m, block)
    if not triangle:
        return nb_m * nb_n, 1
    group = max(1, min(int(group), nb_m))
    ns = triton.cdiv(nb_m, group)
    return ns * (ns + 1) // 2 * group * group, group


def _launch_mma(ops, plan, out, symmetric, cfg):
    nprog, group = _grid(ops.n, ops.m, cfg.block, symmetric, SUPER_TILE)
    sq = plan.pairwise == E.PW_SQEUCLIDEAN.value
    flags = torch.empty((nprog,), dtype=torch.int32, device=out.device) if sq else ops.nx
    off64 = _off64(out, cfg.block)
    _gram_mma_kernel[(nprog,)](
        ops.x, ops.y, ops.nx, ops.ny, ops.dg, ops.prm, out, flags,
        ops.n, ops.m, ops.kd, plan.deg, group,
        ops.x.stride(0), ops.y.stride(0), out.stride(0), out.stride(1),
        BLOCK_K=cfg.block_k, KIND=plan.kind, PAIRWISE=plan.pairwise, TRIANGLE=symmetric,
        DIAG=symmetric, UNIT_DIAG=plan.unit_diag, SPLIT=ops.split, DOT_PREC=ops.dot_prec,
        TAU_=E.TAU, OFF64=off64, BIAS=ops.bias, NORM_DIAG=plan.pairwise == E.PW_DOT.value,
        SLICED=ops.sliced, **cfg.kwargs(),
    )
    if sq:
        rx, ry = ops.raw_x, ops.raw_y
        scan = 32 if _launch.INTERPRET else 256
        _gram_fix_kernel[(triton.cdiv(nprog, scan),)](
            rx, ry, ops.mean, ops.scale if ops.scale is not None else ops.mean, ops.prm, out, flags, ops.n, ops.m, ops.d, plan.deg, group, nprog,
            rx.stride(0), rx.stride(1), ry.stride(0), ry.stride(1), out.stride(0), out.stride(1),
            BLOCK_M=cfg.block, BLOCK_N=cfg.block, KIND=plan.kind, TRIANGLE=symmetric,
            DIAG=symmetric, SCALE=ops.scale is not None, OFF64=off64, SCAN=scan, num_warps=cfg.num_warps, num_stages=1,
        )
    return out


@dataclass
class DirectOperands:
    """Feature-major, row-padded operands of ``_gram_direct_kernel``."""

    x: torch.Tensor
    y: torch.Tensor
    nx: torch.Tensor
    prm: torch.Tensor
    n: int
    m: int
    d: int
    dk: int


def prepare_direct(x, y, plan, r, symmetric, check=None):
    """(D, rows padded) operands, prepared as :func:`kernelkit_gpu.prepare.recipe` says (raw
    values in the accumulation dtype; centred and scaled with per-feature scales; cosine:
    normalised rows), fused in ``_gram_prep_kernel``, which sets the flags of ``check`` as in
    :func:`prepare_mma`."""
    dev = x.device
    n, d = x.shape
    m = n if symmetric else y.shape[0]
    x, y, cos_diag, mean, _, scale = P.normalized_inputs(x, y, plan, r, symmetric)
    xb, nx = _prep_launch(x, mean, scale, d, False, r.dtype, r.acc, feature_major=True,
                          flag=_flag(check, "x"))
    yb = xb if symmetric else _prep_launch(y, mean, scale, d, False, r.dtype, r.acc,
                                           feature_major=True, flag=_flag(check, "y"))[0]
    if cos_diag is not None and symmetric:
        nx[:n].copy_(cos_diag)
    return DirectOperands(x=xb, y=yb, nx=nx, prm=P._params_tensor(plan.prm, r.acc, dev), n=n, m=m,
                          d=d, dk=d if d <= P.DIRECT_MAX_D else 0)


def _launch_direct(ops, plan, out, symmetric, cfg):
    nprog, group = _grid(ops.n, ops.m, cfg.block, symmetric, SUPER_TILE)
    _gram_direct_kernel[(nprog,)](
        ops.x, ops.y, ops.nx, ops.prm, out,
        ops.n, ops.m, ops.d, plan.deg, group,
        ops.x.stride(0), ops.x.stride(1), ops.y.stride(0), ops.y.stride(1),
        out.stride(0), out.stride(1),
        KIND=plan.kind, PAIRWISE=plan.pairwise, TRIANGLE=symmetric, DIAG=symmetric,
        UNIT_DIAG=plan.unit_diag, DK=ops.dk, OFF64=_off64(out, cfg.block),
        NORM_DIAG=plan.pairwise == E.PW_DOT.value, **cfg.kwargs(),
    )
    return out


def gram_fwd(x, y, plan, out, precision, symmetric, config=None, check=None):
    """Prepare the operands and launch the Gram kernels; ``y`` is None for K(X, X).

    ``config``: a :class:`kernelkit_gpu.pairwise.gram_configs.GramConfig` to launch with instead
    of the heuristic / autotuned one (tests run every candidate; benchmarks time them).
    ``check``: a :class:`kernelkit_gpu.checks.FiniteCheck` of "x" (and "y") whose flags the
    preparation sets; its read starts before the Gram kernels are queued, so
    ``check.raise_if_not_finite()`` then waits for the preparation only.
    """
    r = P.recipe(plan, x.dtype, x.shape[1], precision)  # tensor cores or direct differences
    prepare = prepare_mma if r.mode == E.MODE_MMA.value else prepare_direct
    ops = prepare(x, y, plan, r, symmetric, check)
    if check is not None:
        check.start_read()
    return launch_prepared(ops, plan, out, symmetric, config)


def launch_prepared(ops, plan, out, symmetric=False, config=None):
    """Launch the Gram kernels on prepared operands (:class:`MMAOperands` of
    :func:`prepare_mma`, or :class:`DirectOperands` of :func:`prepare_direct`) into ``out``
    (any strides), with ``config`` or the heuristic / autotuned one; returns ``out``."""
    if isinstance(ops, MMAOperands):
        if config is None:
            config = (_autotuned_mma(ops, plan, out, symmetric) if _launch.autotuning()
                      else mma_default_config(ops.kd, ops.split, ops.x.element_size(),
                                              ops.sliced))
        return _launch_mma(ops, plan, out, symmetric, config)
    if config is None:
        config = (_autotuned_direct(ops, plan, out, symmetric) if _launch.autotuning()
                  else direct_default_config(ops.d, plan.pairwise))
    return _launch_direct(ops, plan, out, symmetric, config)


# ------------------------------------------------------------------ opt-in autotuning (cached)
def _autotuned_mma(ops, plan, out, symmetric):
    elem = ops.x.element_size()
    key = ("mma", ops.kd, ops.split, elem, plan.kind, plan.pairwise, symmetric, ops.dot_prec,
           str(out.device))
    return autotuned(key, mma_configs(ops.kd, ops.split, elem, ops.sliced),
                      lambda c: _launch_mma(ops, plan, out, symmetric, c))


def _autotuned_direct(ops, plan, out, symmetric):
    key = ("direct", ops.dk, _launch.block_size(ops.d, lo=1), plan.kind, plan.pairwise, symmetric,
           str(out.device))
    return autotuned(key, direct_configs(ops.d, plan.pairwise),
                      lambda c: _launch_direct(ops, plan, out, symmetric, c))


def gram(x, y=None, kernel="rbf", *, precision="accurate", out=None, **params):
    r"""Gram matrix K(X, Y) of a registry kernel, fused in one Triton kernel.

    Equivalent to ``kernelkit_math.registry.get_kernel(kernel).value(X, Y, **params)`` (the float64
    references in :mod:`kernelkit_math.kernels`, e.g. ``kernelkit_math.kernels.rbf(X, Y, gamma)``)
    up to dtype tolerance.

    Parameters
    ----------
    x : torch.Tensor, shape (N, D)
        float32, float64, float16 or bfloat16; on a CUDA device, or on the CPU when the Triton
        interpreter is on (``TRITON_INTERPRET=1`` set before import).
    y : torch.Tensor, shape (M, D), optional
        Same dtype and device as ``x``. ``None`` (or ``y is x``) computes K(X, X): exactly
        symmetric (only the upper block triangle is computed). Its diagonal is exactly k(0) for
        the kernels with k(x, x) = 1 (and cosine's 1, or 0 for a zero row); the dot-product
        kernels' diagonal is the kernel of the float64 squared row norms evaluated in the
        output's precision, so within a few of its ulps of the exact diagonal
        (:func:`kernelkit.gram` writes the exact one).
    kernel : str
        A registry kernel name: one of ``kernelkit_math.kernel_names()``.
    precision : {"accurate", "fast"}
        "accurate" (default): float32 dot products on tensor cores in split precision
        (3xTF32: each centred value is split once into a TF32 head and tail, and
        head·head' + head·tail' + tail·head' runs on TF32 tensor cores), near-IEEE float32.
        "fast": plain TF32 dot products on centred data (a third of the tensor-core work; each
        value rounded to 10 explicit mantissa bits). The measured error of each mode is in the
        Notes. Both modes compute D <= 16 and the L1 distance (laplacian) with exact float32
        differences. float64 input always uses IEEE float64 arithmetic; float16 / bfloat16 input
        uses the native 16-bit tensor-core product with float32 accumulation (exact products);
        per-feature scales and cosine upcast 16-bit input to float32 first.
    out : torch.Tensor, shape (N, M), optional
        Written in place and returned: float32 (float64 for float64 input), same device; any strides.
    **params
        Kernel parameters with scikit-learn names, validated by the registry: ``gamma`` (rbf,
        laplacian: scalar or one per feature; polynomial, sigmoid; None means 1 / D), ``degree``,
        ``coef0``, ``scale`` (exponential; None means 1 / sqrt(D)), ``length_scale`` (matern,
        rational_quadratic: scalar or per feature; periodic), ``nu`` in {0.5, 1.5, 2.5},
        ``alpha``, ``periodicity``. Each kernel's list: ``get_kernel(kernel).params``.
        For rbf, gamma = 1 / (2 length_scale²).

    Returns
    -------
    torch.Tensor, shape (N, M)
        float32, or float64 for float64 input.

    Raises
    ------
    TypeError
        ``x``, ``y`` or ``out`` not a tensor or of the wrong dtype; unknown parameter names or
        parameters of the wrong type.
    ValueError
        Wrong shapes, mismatched devices, a CPU tensor without the interpreter, unknown kernel,
        parameters out of range (``degree`` above 2**31 - 1 included), bad ``precision``;
        parameters whose epilogue numbers overflow the accumulation dtype ("rbf kernel
        parameters out of range for float32 arithmetic (gamma=3e+38) ...": float32 gamma above
        about 2.4e38 for rbf and laplacian, a length scale below about 1e-19 for matern, ...;
        float64 input takes them); ``x`` or ``y`` containing NaN or infinity ("x contains NaN
        or infinity; ..."): the data are centred and normalised with means and norms over rows
        and columns, where one non-finite value would spread to, or be hidden in, unrelated
        entries, so it is refused as scikit-learn's ``check_array`` does; ``x`` or ``y`` out of
        range ("x is out of range for float32 arithmetic; ..."): a row of the values the kernel
        computes with (centred, scaled or normalised as the Notes say) has a squared norm, or a
        dot-product offset, above ``finfo.max / 8`` of the accumulation dtype (float32: 4.3e37,
        coordinates of about 1e18 and up; float64: 2.2e307), where distances and dot products
        would overflow to infinity or NaN. Both data checks run inside the preparation kernel,
        which sets one flag per operand; the flags are copied to the host before the Gram
        kernels are queued, and the call waits for that copy only, not for the Gram kernels. A
        given ``out`` has then been written, with undefined values. Inside
        :func:`kernelkit_gpu.assume_finite` the data checks are skipped.

    Notes
    -----
    Squared distances are :math:`\|\tilde x\|^2 + \|\tilde y\|^2 - 2 \tilde x \cdot \tilde y` on
    centred data (:math:`\tilde x = x - \bar x`), clamped at 0, with a per-tile fallback to direct
    differences where the expansion would cancel (near-duplicates, tight clusters: a tile with one
    pair closer than 1/32 of its norms is flagged and recomputed by a second, small kernel from
    the caller's data; correct always, slower on such data). K(X, X) computes the upper block
    triangle only (in super-tiles that keep the operands in L2) and writes each tile twice.
    16-bit input is not centred (centred values would have to be rounded to 16 bits again); the
    same fallback covers data far from the origin. For D <= 16 and the L1 distance the differences
    are formed directly, one feature at a time. Per-feature gamma / length_scale scale the
    centred data (centred in float64, then scaled, rounded once), so the differences keep their
    digits at any offset. Cosine normalises rows first, dividing each by its largest magnitude
    and then by its norm, so rows of any finite scale (1e-30 or 1e30 in float32) are exact to
    rounding; zero rows stay zero, like scikit-learn. The polynomial power is taken by
    exponentiation by squaring (O(log degree) multiplies, exact sign).

    Measured error of each precision mode: relative Frobenius error
    :math:`\|K - K_{ref}\|_F / \|K_{ref}\|_F` of float32 input against the float64 reference,
    N = 4096 (``benchmarks/gram_variants.py`` and ``benchmarks/gram.py``;
    ``benchmarks/results/gram-tuning-notes.md`` section 11; devices in docs/benchmarks.md):

    =========  ==========================================  ==========  ===========
    precision  data (rbf)                                  D = 64      D = 512
    =========  ==========================================  ==========  ===========
    accurate   N(0, 1); offset by 1000; near-duplicates    1.5e-7      3.4e-7
    fast       N(0, 1)                                     2.0e-4      6.8e-5
    fast       offset by 1000 (spread 0.05)                1.6e-5
    fast       linear / polynomial, N(0, 1)                7.6e-4      7.3e-4
    =========  ==========================================  ==========  ===========

    Dot-product kernels of float32 / float64 data are centred too, x on the column mean
    :math:`\bar x` of X and y on that of Y, :math:`\bar y` (K(X, X): both on :math:`\bar x`):
    x·y = x̃·ỹ + b_x + b_y with per-row offsets :math:`b_x = \tilde x \cdot \bar y + \bar x
    \cdot \bar y / 2` (b_y likewise) formed in float64, so the tensor cores only accumulate the
    small centred products (before this, polynomial at D = 512 on data offset by 1000 erred by
    5.6e-6 in accurate mode, eager IEEE float32 by 9.1e-7; now 8.1e-8), and accumulate each
    16-feature slice in a fresh register tile added with IEEE float32 adds (the tensor cores'
    truncating accumulation over 512 features had linear at 3.3e-6 on N(0, 1) data; now 1.4e-7).
    The tests assert <= 1e-6 in accurate mode for every kernel on standard-normal data, on the GPU
    (``pytest --device cuda``) and under the Triton interpreter (IEEE products);
    ``benchmarks/gram.py`` records the fast mode's error as ``fast_rel_fro``.

    Examples
    --------
    >>> import os; os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU: the Triton interpreter
    '1'
    >>> import torch, kernelkit_gpu
    >>> x = torch.randn(5, 3)
    >>> K = kernelkit_gpu.gram(x, kernel="rbf", gamma=0.5)
    >>> K.shape, bool(torch.equal(K, K.T)), bool((K.diagonal() == 1).all())
    (torch.Size([5, 5]), True, True)
    """
    checks.check_pair(x, y)
    checks.check_precision(precision)
    symmetric = y is None or y is x
    operands = {"x": x} if symmetric else {"x": x, "y": y}
    plan = P.kernel_plan(kernel, x.shape[1], params)
    P.check_params_range(plan, x.dtype)
    checks.check_triton_device(x)
    n, m = x.shape[0], (x.shape[0] if symmetric else y.shape[0])
    acc = P.acc_dtype(x.dtype)
    if out is None:
        out = torch.empty((n, m), dtype=acc, device=x.device)
    else:
        checks.check_out(out, (n, m), acc, x.device)
    if n == 0 or m == 0:
        checks.FiniteCheck(**operands).raise_if_not_finite()
        return out
    # the preparation kernel sets the flags as it reads x and y (no reductions of their own)
    check = checks.FiniteCheck(**operands, deferred=tuple(operands))
    gram_fwd(x, None if symmetric else y, plan, out, precision, symmetric, check=check)
    check.raise_if_not_finite()  # waits for the preparation, not for the Gram kernels
    return out
