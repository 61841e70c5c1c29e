"""kernelkit_gpu.linear_attention (chunked Triton kernels) against the float64 reference.

The reference is :func:`kernelkit_math.attention.linear_attention`; gradients are checked against
the float64 autograd of :func:`kernelkit_gpu.attention.linear_naive.linear_attention_naive`, which
is itself checked against that reference (forward) and finite differences (gradients) first.

Tolerances follow the FlashAttention rule: in every dtype the kernel's largest error against the
float64 reference may be at most twice that of the same computation written in PyTorch in that
dtype (the quadratic parallel form, computed here in the test), plus a floor of two units of the
dtype's rounding of the output (for cases where PyTorch happens to be exact).

Runs on the CPU under the Triton interpreter (``TRITON_INTERPRET=1``, exported by .ci/run) and,
unchanged, on a GPU with ``pytest --device cuda``.
"""

import importlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kernelkit_gpu import _launch
from kernelkit_gpu.attention.linear import linear_attention
from kernelkit_gpu.attention.linear_naive import linear_attention_naive
from kernelkit_gpu.feature_maps import TORCH_MAPS
from kernelkit_math.random_features import feature_map_names, get_feature_map
from tests.conftest import TOL
from tests.gpu_cases import ATTN_DTYPES, UNIT, spy_calls, to_numpy64
from tests.test_gpu_softmax_attention import count_checks

# the module itself (a package-level export of the function would shadow the submodule name)
LC = importlib.import_module("kernelkit_gpu.attention.linear_chunk")

pytestmark = pytest.mark.usefixtures("triton_can_run")

#: The feature maps fused into the kernels, from the feature-map registry: every test below that
#: runs over them covers a new fused map with no edit here.
FUSED = list(feature_map_names(fused=True))
#: The fused maps other than the identity (NaN goes through the map and its derivative).
MAPPED = [name for name in FUSED if name != "identity"]
#: Fused maps whose weights can be 0 or negative, and pre-mapped features (None).
NOT_POSITIVE = [name for name in FUSED if get_feature_map(name).sign != "positive"] + [None]


# ------------------------------------------------------------------------------------ helpers
def make_inputs(rng, B, H, T, S, D, Dv, dtype, device, feature_map="elu+1", state=False):
    """q, k, v (and a positive initial state); identity / pre-mapped features are positive so
    the normalised attention is well conditioned (denominators bounded away from 0)."""
    if feature_map in ("identity", None):
        q = rng.uniform(0.05, 1.0, (B, H, T, D))
        k = rng.uniform(0.05, 1.0, (B, H, S, D))
    else:
        q = rng.standard_normal((B, H, T, D))
        k = rng.standard_normal((B, H, S, D))
    v = rng.standard_normal((B, H, S, Dv))
    out = [torch.from_numpy(a).to(dtype=dtype, device=device) for a in (q, k, v)]
    if state:
        S0 = torch.from_numpy(rng.uniform(0.0, 1.0, (B, H, D, Dv)) * 2.0).to(torch.float32).to(device)
        z0 = torch.from_numpy(rng.uniform(0.5, 2.0, (B, H, D))).to(torch.float32).to(device)
        out.append((S0, z0))
    return out


def reference(q, k, v, feature_map="elu+1", *, causal, normalize=True, eps=1e-6,
              initial_state=None, causal_alignment="top_left"):
    """Float64 reference on the (rounded) inputs: (out, S_final, z_final) as NumPy arrays."""
    from kernelkit_math.attention import linear_attention as ref_la

    init = None if initial_state is None else tuple(to_numpy64(t) for t in initial_state)
    q, k, v = (to_numpy64(t) for t in (q, k, v))
    out, (Sf, zf) = ref_la(q, k, v, feature_map or "identity", is_causal=causal,
                           causal_alignment=causal_alignment, normalize=normalize, eps=eps,
                           initial_state=init, return_state=True)
    return out, Sf, zf


def torch_same_dtype(q, k, v, feature_map="elu+1", *, causal, normalize=True, eps=1e-6,
                     initial_state=None):
    """The same computation in plain PyTorch in the inputs' dtype (quadratic parallel form):
    the yardstick of the FlashAttention rule. Returns (out, S_final, z_final)."""
    dt = q.dtype
    phi = TORCH_MAPS[feature_map or "identity"]
    Q, K = phi(None, q), phi(None, k)
    A = Q @ K.transpose(-1, -2)
    if causal:
        A = A * torch.ones(A.shape[-2:], dtype=dt, device=q.device).tril()
    num, den = A @ v, A.sum(-1)
    Sf, zf = K.transpose(-1, -2) @ v, K.sum(-2)
    if initial_state is not None:
        S0, z0 = initial_state[0].to(dt), initial_state[1].to(dt)
        num = num + Q @ S0
        den = den + (Q @ z0[..., None])[..., 0]
        Sf, zf = Sf + S0, zf + z0
    if normalize:
        g = torch.clamp_min(den, eps)
        num = num / g[..., None]
    return num, Sf, zf


def naive64_grads(q, k, v, dout, feature_map, *, causal, normalize=True, eps=1e-6,
                  initial_state=None, dSf=None, dzf=None, causal_alignment="top_left"):
    """Float64 autograd gradients of the naive version: dq, dk, dv (, dS0, dz0)."""
    leaves = [t.detach().cpu().to(torch.float64).requires_grad_() for t in (q, k, v)]
    init = None
    if initial_state is not None:
        init = tuple(t.detach().cpu().to(torch.float64).requires_grad_() for t in initial_state)
    out, (Sf, zf) = linear_attention_naive(*leaves, feature_map=feature_map, is_causal=causal,
                                           causal_alignment=causal_alignment, normalize=normalize,
                                           eps=eps, initial_state=init, return_state=True)
    outs, grads = [out], [dout.detach().cpu().to(torch.float64)]
    if dSf is not None:
        outs += [Sf, zf]
        grads += [dSf.detach().cpu().double(), dzf.detach().cpu().double()]
    torch.autograd.backward(outs, grads)
    res = [t.grad.numpy() for t in leaves]
    if init is not None:
        res += [t.grad.numpy() for t in init]
    return res


def torch_same_dtype_grads(q, k, v, dout, feature_map, *, causal, normalize=True, eps=1e-6):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = torch_same_dtype(*leaves, feature_map, causal=causal, normalize=normalize, eps=eps)[0]
    out.backward(dout)
    return [t.grad for t in leaves]


def check_rule(ours, pt, ref, dtype_name, what, scale=None, term_scale=0.0):
    """max|ours - ref| <= 2 max|pt - ref| + 2 max(u scale, u32 term_scale) (FlashAttention rule
    plus a floor; u the dtype's unit roundoff, u32 float32's).

    ``scale`` defaults to max|ref|; gradients pass the largest of dq, dk, dv and, as
    ``term_scale``, :func:`gradient_term_scale` (a gradient that cancels to ~0, as dq and dk for
    T = 1, still carries float32 rounding of the size of its terms: every dtype forms and
    subtracts them in float32), states sqrt(S) max|ref| (a float32 sum of S terms, in any order,
    is exact to ~sqrt(S) u)."""
    o = to_numpy64(ours) if isinstance(ours, torch.Tensor) else np.asarray(ours)
    p = to_numpy64(pt) if isinstance(pt, torch.Tensor) else np.asarray(pt)
    ref = np.asarray(ref)
    assert o.shape == ref.shape, f"{what}: shape {o.shape} != {ref.shape}"
    assert np.isfinite(o).all(), f"{what}: non-finite values (unwritten or overflow)"
    err = np.abs(o - ref).max() if o.size else 0.0
    err_pt = np.abs(p - ref).max() if o.size else 0.0
    if scale is None:
        scale = np.abs(ref).max() if o.size else 0.0
    floor = 2 * max(UNIT[dtype_name] * scale, UNIT["float32"] * term_scale)
    assert err <= 2 * err_pt + floor + 1e-300, (
        f"{what} ({dtype_name}): error {err:.3g} > 2 x {err_pt:.3g} (same-dtype PyTorch) + {floor:.2g}"
    )


def gradient_term_scale(q, k, v, dout, feature_map, *, causal, normalize=True, eps=1e-6):
    """The largest single term summed into dq and dk (float64): the float32 floor of the
    gradient checks (see :func:`check_rule`).

    dq_t = phi'(q_t) sum_s W_ts phi(k_s) and dk_s = phi'(k_s) sum_t W_ts phi(q_t), with
    W_ts = v_s . dnum_t + dden_t (normalised; dnum = dout / g, dden = -(dout . out) / g) or
    v_s . dout_t, over the visible pairs. Each length-Dv dot product is measured by the sum of
    its products' magnitudes (|v_s| . |dnum_t|, |dout_t| . |out_t| / g_t), which bounds its
    rounding in any evaluation order (gamma_Dv times it).

    Where these terms cancel, the exact gradient is far smaller than its terms and any float32
    evaluation keeps an error of a few u times the largest of them: with T = 1 and
    normalize=True, out = v_0 whatever q and k are, so dq = dk = 0 exactly, while v_0 . dnum_0
    and dden_0 are of size |v| |dout| / g. The same-dtype PyTorch error is then another sample
    of rounding noise, and "at most twice it" compares two noise samples: on an H100 (relu,
    causal, T = 1, D = 16) the kernel's dk error was 5.4e-7 against PyTorch's 1.4e-7, under the
    interpreter (correctly rounded divisions, NumPy sums) 3.9e-7 against 1.8e-7, with max|dv| = 2
    and terms up to 7.6 (relu: g = phi(q) . phi(k) is small, so |dnum| = |dout| / g is large).
    The terms are bounded per element, so this scale does not grow with T, and a wrong or
    missing term (an error of the size of a term) still fails by a factor of about 1 / (2u).
    """
    spec = get_feature_map(feature_map or "identity")
    phi, dphi = spec.phi, spec.dphi
    qn, kn, vn, dn = (to_numpy64(t) for t in (q, k, v, dout))
    Q, K = phi(qn), phi(kn)
    T, S = Q.shape[2], K.shape[2]
    vis = np.tril(np.ones((T, S))) if causal else np.ones((T, S))
    A = (Q @ np.swapaxes(K, -1, -2)) * vis
    if normalize:
        den = A.sum(-1)
        g = np.maximum(den, eps)
        safe = np.where(g > 0, g, 1.0)
        out = (A @ vn) / safe[..., None]
        dnum = dn / safe[..., None]
        dden = np.where(den > eps, np.abs(dn * out).sum(-1) / safe, 0.0)  # |dden| before cancelling
    else:
        dnum, dden = dn, np.zeros(dn.shape[:-1])
    W = np.maximum(np.abs(dnum) @ np.abs(np.swapaxes(vn, -1, -2)), dden[..., None]) * vis
    # (B, H, T, S, M): |phi'(q_t)_i phi(k_s)_i W_ts| and |phi'(k_s)_i phi(q_t)_i W_ts|
    t_q = (W[..., None] * np.abs(dphi(qn))[:, :, :, None, :] * np.abs(K)[:, :, None, :, :]).max()
    t_k = (W[..., None] * np.abs(dphi(kn))[:, :, None, :, :] * np.abs(Q)[:, :, :, None, :]).max()
    return max(t_q, t_k)


def check_close(ours, ref, what, rtol=2e-5, atol=2e-5):
    """Float32 agreement of two float32 results computed by the kernels along different paths."""
    o = to_numpy64(ours) if isinstance(ours, torch.Tensor) else np.asarray(ours)
    r = to_numpy64(ref) if isinstance(ref, torch.Tensor) else np.asarray(ref)
    assert np.isfinite(o).all(), f"{what}: non-finite values"
    np.testing.assert_allclose(o, r, rtol=rtol, atol=atol * max(1.0, np.abs(r).max()), err_msg=what)


def run_and_check(rng, device, *, T, S=None, D=16, Dv=None, causal, normalize=True,
                  feature_map="elu+1", dtype_name="float32", grads=True, chunk_size=None, B=1, H=2,
                  eps=1e-6):
    S = T if S is None else S
    Dv = D if Dv is None else Dv
    dtype = ATTN_DTYPES[dtype_name]
    q, k, v = make_inputs(rng, B, H, T, S, D, Dv, dtype, device, feature_map)
    ref, Sf_ref, zf_ref = reference(q, k, v, feature_map, causal=causal, normalize=normalize, eps=eps)
    pt, Sf_pt, zf_pt = torch_same_dtype(q, k, v, feature_map, causal=causal, normalize=normalize, eps=eps)
    qg, kg, vg = (t.clone().requires_grad_(grads) for t in (q, k, v))
    out, (Sf, zf) = linear_attention(qg, kg, vg, feature_map=feature_map, is_causal=causal,
                                     normalize=normalize, eps=eps, return_state=True,
                                     chunk_size=chunk_size)
    assert out.dtype == dtype and out.shape == (B, H, T, Dv) and out.device == q.device
    assert Sf.dtype == torch.float32 and zf.dtype == torch.float32
    check_rule(out, pt, ref, dtype_name, "out")
    check_rule(Sf, Sf_pt, Sf_ref, dtype_name, "S_final", scale=np.sqrt(S) * np.abs(Sf_ref).max())
    check_rule(zf, zf_pt, zf_ref, dtype_name, "z_final", scale=np.sqrt(S) * np.abs(zf_ref).max())
    if not grads:
        return
    dout = torch.from_numpy(rng.standard_normal((B, H, T, Dv))).to(dtype=dtype, device=device)
    out.backward(dout)
    refs = naive64_grads(q, k, v, dout, feature_map, causal=causal, normalize=normalize, eps=eps)
    pts = torch_same_dtype_grads(q, k, v, dout, feature_map, causal=causal, normalize=normalize, eps=eps)
    scale = max(np.abs(r).max() for r in refs)
    terms = gradient_term_scale(q, k, v, dout, feature_map, causal=causal, normalize=normalize, eps=eps)
    for name, g, p, r in zip(("dq", "dk", "dv"), (qg.grad, kg.grad, vg.grad), pts, refs):
        assert g.dtype == dtype
        check_rule(g, p, r, dtype_name, name, scale=scale, term_scale=terms)


# ----------------------------------------------------------------- references check each other
@pytest.mark.parametrize("T,S", [(1, 1), (63, 63), (130, 130), (70, 130), (130, 70)],
                         ids=["1", "63", "130", "T70S130", "T130S70"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_naive_matches_reference_float64(T, S, causal, rng):
    """The naive torch version (parallel / chunked cumulative) equals both float64 forms."""
    from kernelkit_math.attention import linear_attention as ref_la

    for fm in FUSED:
        for normalize in (True, False):
            q, k, v, (S0, z0) = make_inputs(rng, 2, 2, T, S, 5, 3, torch.float64, "cpu", fm, state=True)
            init = (S0.double(), z0.double())
            out, (Sf, zf) = linear_attention_naive(q, k, v, feature_map=fm, is_causal=causal,
                                                   normalize=normalize, initial_state=init,
                                                   return_state=True, chunk_size=16)
            for form in ("parallel", "recurrent"):
                r, (rS, rz) = ref_la(q.numpy(), k.numpy(), v.numpy(), fm, is_causal=causal,
                                     normalize=normalize, form=form,
                                     initial_state=(S0.double().numpy(), z0.double().numpy()),
                                     return_state=True)
                np.testing.assert_allclose(out.numpy(), r, **TOL["float64"])
                np.testing.assert_allclose(Sf.numpy(), rS, **TOL["float64"])
                np.testing.assert_allclose(zf.numpy(), rz, **TOL["float64"])


@pytest.mark.parametrize("T,S", [(1, 63), (63, 1), (70, 130), (130, 70), (33, 33)],
                         ids=["decode", "T63S1", "T70S130", "T130S70", "33"])
def test_naive_bottom_right_matches_reference_float64(T, S, rng):
    """Bottom-right causal alignment (key s visible to query t iff s <= t + S - T): the naive
    version (top-left runs on padded or split queries) equals both float64 forms, which build
    the mask directly; with T > S the first T - S rows read the initial state alone."""
    from kernelkit_math.attention import linear_attention as ref_la

    for fm, normalize, state in [("elu+1", True, True), ("identity", False, True),
                                 ("relu", True, False)]:
        q, k, v, (S0, z0) = make_inputs(rng, 2, 2, T, S, 5, 3, torch.float64, "cpu", fm, state=True)
        init = (S0.double(), z0.double()) if state else None
        out, (Sf, zf) = linear_attention_naive(q, k, v, feature_map=fm, is_causal=True,
                                               causal_alignment="bottom_right", normalize=normalize,
                                               initial_state=init, return_state=True, chunk_size=16)
        for form in ("parallel", "recurrent"):
            r, (rS, rz) = ref_la(q.numpy(), k.numpy(), v.numpy(), fm, is_causal=True,
                                 causal_alignment="bottom_right", normalize=normalize, form=form,
                                 initial_state=None if init is None else tuple(x.numpy() for x in init),
                                 return_state=True)
            np.testing.assert_allclose(out.numpy(), r, **TOL["float64"])
            np.testing.assert_allclose(Sf.numpy(), rS, **TOL["float64"])
            np.testing.assert_allclose(zf.numpy(), rz, **TOL["float64"])
        if not state and T > S:
            assert torch.all(out[:, :, :T - S] == 0)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_naive_gradients_finite_differences(causal, rng):
    q, k, v, (S0, z0) = make_inputs(rng, 1, 2, 7, 7, 3, 2, torch.float64, "cpu", "elu+1", state=True)
    leaves = [t.clone().requires_grad_() for t in (q, k, v, S0.double(), z0.double())]

    def f(q, k, v, S0, z0):
        out, (Sf, zf) = linear_attention_naive(q, k, v, is_causal=causal, initial_state=(S0, z0),
                                               return_state=True, chunk_size=16)
        return out, Sf, zf

    assert torch.autograd.gradcheck(f, leaves)


# ------------------------------------------------------------------------ kernels, float32
@pytest.mark.parametrize("T,D", [(1, 16), (63, 32), (100, 16), (130, 32)], ids=lambda x: str(x))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("feature_map", FUSED)
def test_matches_reference_normalised(T, D, causal, feature_map, device, rng):
    run_and_check(rng, device, T=T, D=D, causal=causal, feature_map=feature_map)


@pytest.mark.parametrize("T", [1, 130])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("feature_map", FUSED)
def test_matches_reference_unnormalised(T, causal, feature_map, device, rng):
    run_and_check(rng, device, T=T, D=16, causal=causal, normalize=False, feature_map=feature_map)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_value_dim_differs_and_ragged_dims(causal, device, rng):
    """Dv != D, neither a power of two (padded with masks; Dv spans two column tiles)."""
    run_and_check(rng, device, T=100, D=24, Dv=40, causal=causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_premapped_features_m_differs_from_d(causal, device, rng):
    """feature_map=None: q, k are features of size M = 48 (another map applied elsewhere)."""
    run_and_check(rng, device, T=70, D=48, Dv=16, causal=causal, feature_map=None)


def test_premapped_features_m256(device, rng):
    run_and_check(rng, device, T=40, D=256, Dv=16, causal=True, feature_map=None, grads=False, H=1)


@pytest.mark.parametrize("T,S", [(70, 130), (130, 70)], ids=["T<S", "T>S"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_query_and_key_lengths_differ(T, S, causal, device, rng):
    """Causal with T != S is top-left aligned (as SDPA); the final state covers all S keys."""
    run_and_check(rng, device, T=T, S=S, causal=causal)


@pytest.mark.parametrize("chunk_size", [16, 32])
def test_chunk_sizes(chunk_size, device, rng):
    run_and_check(rng, device, T=130, causal=True, chunk_size=chunk_size, B=2, H=1)


@pytest.mark.parametrize("seg_chunks", [1, 3])
def test_segments_scan(seg_chunks, monkeypatch, device, rng):
    """Force segments of 1 and 3 chunks: the two-level scan (segment sums, prefix / suffix sums,
    per-segment sweeps) must give the same result as one long sweep."""
    monkeypatch.setattr(LC, "segment_length",
                        lambda n_pos, bh, nct, dev, multiple, waves=4: seg_chunks * multiple)
    run_and_check(rng, device, T=130, causal=True, chunk_size=16, H=1)
    run_and_check(rng, device, T=100, causal=False, chunk_size=16, H=1)


# ---------------------------------------------------------------------------- other dtypes
@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("T", [63, 130])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_dtypes_flashattention_rule(dtype_name, T, causal, device, rng):
    run_and_check(rng, device, T=T, D=32, causal=causal, dtype_name=dtype_name)


def test_float16_long_state_does_not_overflow(device, rng):
    """z grows like T: with float16 input the state stays float32 (z_final ~ 8e4 > 65504),
    where the same computation in float16 PyTorch overflows."""
    T = 320
    q, k, v = make_inputs(rng, 1, 1, T, T, 16, 16, torch.float16, device, "elu+1")
    k = k + 250.0  # phi(k) ~ 251: z ~ 251 T, beyond float16's range
    out, (Sf, zf) = linear_attention(q, k, v, is_causal=True, return_state=True)
    ref, _, zf_ref = reference(q, k, v, causal=True)
    assert zf_ref.max() > 65504
    pt16 = torch_same_dtype(q, k, v, causal=True)[0]
    assert (not torch.isfinite(pt16).all()
            or np.abs(to_numpy64(pt16) - ref).max() > 0.1 * np.abs(ref).max())
    assert torch.isfinite(out).all() and torch.isfinite(Sf).all()
    # phi(k) enters the sums rounded to float16 (as the tensor-core operands): 2^-11 relative
    np.testing.assert_allclose(to_numpy64(zf), zf_ref, rtol=2.0**-11)
    # phi(q), phi(k), the scores and the output are each rounded once to float16 (2^-11): the
    # error stays within a few such roundings of the output's scale
    err = np.abs(to_numpy64(out) - ref).max()
    assert err <= 8 * UNIT["float16"] * np.abs(ref).max(), err


# ------------------------------------------------------------------ states and chaining
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("normalize", [True, False], ids=["norm", "num"])
def test_initial_state_and_gradients(causal, normalize, device, rng):
    """initial_state and return_state against the reference; gradients reach q, k, v, S0, z0
    and flow back from the returned (S_final, z_final)."""
    B, H, T, D, Dv = 1, 2, 90, 16, 24
    q, k, v, (S0, z0) = make_inputs(rng, B, H, T, T, D, Dv, torch.float32, device, state=True)
    ref, Sf_ref, zf_ref = reference(q, k, v, causal=causal, normalize=normalize, initial_state=(S0, z0))
    leaves = [t.clone().requires_grad_() for t in (q, k, v, S0, z0)]
    out, (Sf, zf) = linear_attention(*leaves[:3], is_causal=causal, normalize=normalize,
                                     initial_state=tuple(leaves[3:]), return_state=True)
    check_close(out, ref, "out")
    check_close(Sf, Sf_ref, "S_final")
    check_close(zf, zf_ref, "z_final")
    dout = torch.from_numpy(rng.standard_normal((B, H, T, Dv))).float().to(device)
    dSf = torch.from_numpy(rng.standard_normal((B, H, D, Dv))).float().to(device)
    dzf = torch.from_numpy(rng.standard_normal((B, H, D))).float().to(device)
    torch.autograd.backward([out, Sf, zf], [dout, dSf, dzf])
    refs = naive64_grads(q, k, v, dout, "elu+1", causal=causal, normalize=normalize,
                         initial_state=(S0, z0), dSf=dSf, dzf=dzf)
    for name, leaf, r in zip(("dq", "dk", "dv", "dS0", "dz0"), leaves, refs):
        check_close(leaf.grad, r, name)


@pytest.mark.parametrize("split", [37, 64])
def test_chaining_equals_full_run(split, device, rng):
    """Running [0:t] then [t:T] from the returned state equals the full causal run, forward and
    backward (the second part's loss reaches the first part's k, v through the state)."""
    B, H, T, D = 1, 2, 110, 16
    q, k, v = make_inputs(rng, B, H, T, T, D, D, torch.float32, device)
    dout = torch.from_numpy(rng.standard_normal((B, H, T, D))).float().to(device)
    full_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    full, (Sf, zf) = linear_attention(*full_leaves, is_causal=True, return_state=True)
    full.backward(dout)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    a, b = [t[:, :, :split] for t in leaves], [t[:, :, split:] for t in leaves]
    out1, st = linear_attention(*a, is_causal=True, return_state=True)
    out2, (Sf2, zf2) = linear_attention(*b, is_causal=True, initial_state=st, return_state=True)
    torch.cat([out1, out2], dim=2).backward(dout)
    check_close(torch.cat([out1, out2], dim=2), full, "chained out", rtol=1e-5, atol=1e-5)
    check_close(Sf2, Sf, "chained S_final", rtol=1e-5, atol=1e-5)
    check_close(zf2, zf, "chained z_final", rtol=1e-5, atol=1e-5)
    for name, l1, l2 in zip(("dq", "dk", "dv"), leaves, full_leaves):
        check_close(l1.grad, l2.grad, "chained " + name, rtol=1e-5, atol=1e-5)


def test_noncausal_state_chaining(device, rng):
    """Non-causal: the final state of two halves chained equals that of the full run."""
    q, k, v = make_inputs(rng, 1, 2, 80, 80, 16, 16, torch.float32, device)
    _, (Sf, zf) = linear_attention(q, k, v, return_state=True)
    _, st = linear_attention(q[:, :, :30], k[:, :, :30], v[:, :, :30], return_state=True)
    out2, (Sf2, zf2) = linear_attention(q, k[:, :, 30:], v[:, :, 30:], initial_state=st,
                                        return_state=True)
    check_close(Sf2, Sf, "S_final")
    check_close(zf2, zf, "z_final")
    check_close(out2, linear_attention(q, k, v), "out")


# --------------------------------------------------------------------- edges and plumbing
def test_zero_denominators_and_eps_zero(device, rng):
    """relu features that vanish give den = 0: output 0 with eps = 0, num / eps otherwise; never
    NaN, gradients finite."""
    q, k, v = make_inputs(rng, 1, 1, 40, 40, 16, 16, torch.float32, device)
    q = q.clone()
    q[:, :, :10] = -1.0  # relu(q) = 0 for the first 10 queries
    for eps in (0.0, 1e-3):
        for causal in (False, True):
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            out = linear_attention(*leaves, feature_map="relu", is_causal=causal, eps=eps)
            ref = reference(q, k, v, "relu", causal=causal, eps=eps)[0]
            check_close(out, ref, f"eps={eps}")
            assert (out[:, :, :10] == 0).all()
            out.sum().backward()
            for leaf in leaves:
                assert torch.isfinite(leaf.grad).all()


@pytest.mark.parametrize("where", ["q", "k"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("feature_map", MAPPED)
def test_nan_input_propagates_as_in_float64(feature_map, causal, where, device, rng):
    """One NaN in q or k gives NaN exactly where the float64 reference does (row t for q_t;
    every row that sees key s, and the final state, for k_s), on the Triton and the PyTorch
    paths, and the other entries keep their values. (The maps' default min / max and a
    ``den > 0`` guard used to turn the NaN into finite values or zeros.) Three chunks of 16: the
    NaN at position 21 must reach later chunks through the state, and only them.

    Gradients: every row of dq, dk, dv that the NaN reaches holds NaN, NaN appears exactly where
    the float64 autograd of the PyTorch path has it (masked keys are absent: no 0 * NaN in a
    masked product), and the finite entries agree with it."""
    B, H, T, D, t0 = 1, 2, 40, 16, 21
    q, k, v = make_inputs(rng, B, H, T, T, D, D, torch.float32, device, feature_map)
    (q if where == "q" else k)[0, 1, t0, 3] = float("nan")
    ref, Sf_ref, zf_ref = reference(q, k, v, feature_map, causal=causal)
    dout = torch.from_numpy(rng.standard_normal((B, H, T, D))).float().to(device)
    grads_ref = naive64_grads(q, k, v, dout, feature_map, causal=causal)
    vis = np.tril(np.ones((T, T), bool)) if causal else np.ones((T, T), bool)
    queries = np.arange(T) == t0 if where == "q" else vis[:, t0]  # the query rows made NaN
    reached = {"dq": queries, "dk": vis[queries].any(0), "dv": vis[queries].any(0)}
    assert np.isnan(ref[0, 1]).any(1).tolist() == queries.tolist()
    for impl in (linear_attention, linear_attention_naive):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out, (Sf, zf) = impl(*leaves, feature_map=feature_map, is_causal=causal, return_state=True,
                             chunk_size=16)
        out.backward(dout)
        for what, got, want in (("out", out, ref), ("S_final", Sf, Sf_ref), ("z_final", zf, zf_ref)):
            got, msg = to_numpy64(got), f"{impl.__name__}, {what}"
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{msg}: NaN")
            # float32 against float64, as check_close: rtol 2e-5, atol 2e-5 max|ref|
            scale = max(1.0, np.nanmax(np.abs(want), initial=0.0))
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * scale, err_msg=msg)
        for what, leaf, want in zip(("dq", "dk", "dv"), leaves, grads_ref):
            got, msg = to_numpy64(leaf.grad), f"{impl.__name__}, {what}"
            rows_nan = np.isnan(got[0, 1]).any(1)
            assert rows_nan[reached[what]].all(), f"{msg}: rows the NaN reaches must hold NaN"
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{msg}: NaN")
            both = np.isfinite(got) & np.isfinite(want)
            scale = max(1.0, np.abs(want[both]).max())
            np.testing.assert_allclose(got[both], want[both], rtol=2e-5, atol=2e-5 * scale,
                                       err_msg=msg)


def test_strided_inputs_used_in_place(device, rng):
    """(B, T, H, D) tensors passed as .transpose(1, 2) (unit last stride, no copy)."""
    q, k, v = make_inputs(rng, 2, 3, 50, 50, 16, 16, torch.float32, device)
    qt, kt, vt = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    assert not qt.is_contiguous()
    for causal in (False, True):
        check_close(linear_attention(qt, kt, vt, is_causal=causal),
                    linear_attention(q, k, v, is_causal=causal), "strided")
    # a non-unit last stride is copied
    qs = torch.stack([q, q], dim=-1)[..., 0]
    assert qs.stride(-1) == 2
    check_close(linear_attention(qs, k, v, is_causal=True), linear_attention(q, k, v, is_causal=True), "step")


@pytest.mark.parametrize("T,S,state", [(1, 63, True), (70, 30, True), (70, 30, False)],
                         ids=["decode-state", "T>S-state", "T>S"])
def test_bottom_right_matches_reference(T, S, state, device, rng, poisoned_outputs):
    """Bottom-right alignment through the Triton kernels, every buffer poisoned: output, final
    state and gradients (q, k, v and the initial state) against the float64 reference and
    float64 autograd; with T > S and no initial state the first T - S rows are exactly 0 and
    pass no gradient."""
    B, H, D, Dv = 1, 2, 16, 8
    q, k, v, (S0, z0) = make_inputs(rng, B, H, T, S, D, Dv, torch.float32, device, state=True)
    init = (S0, z0) if state else None
    kw = dict(causal=True, causal_alignment="bottom_right", initial_state=init)
    ref, Sf_ref, zf_ref = reference(q, k, v, **kw)
    leaves = [t.clone().requires_grad_() for t in ((q, k, v, S0, z0) if state else (q, k, v))]
    out, (Sf, zf) = linear_attention(*leaves[:3], is_causal=True, causal_alignment="bottom_right",
                                     initial_state=tuple(leaves[3:]) or None, return_state=True)
    check_close(out, ref, "out")
    check_close(Sf, Sf_ref, "S_final")
    check_close(zf, zf_ref, "z_final")
    dout = torch.from_numpy(rng.standard_normal((B, H, T, Dv))).float().to(device)
    out.backward(dout)
    refs = naive64_grads(q, k, v, dout, "elu+1", **kw)
    for name, leaf, r in zip(("dq", "dk", "dv", "dS0", "dz0"), leaves, refs):
        check_close(leaf.grad, r, name)
    if not state:
        assert torch.all(out[:, :, :T - S] == 0) and torch.all(leaves[0].grad[:, :, :T - S] == 0)


def test_alignments_agree_when_t_equals_s(device, rng):
    q, k, v = make_inputs(rng, 1, 2, 37, 37, 16, 8, torch.float32, device)
    a, b = (linear_attention(q, k, v, is_causal=True, causal_alignment=al)
            for al in ("top_left", "bottom_right"))
    assert torch.equal(a, b)


def test_empty_sequence(device):
    q = torch.zeros((1, 2, 0, 16), device=device)
    out, (Sf, zf) = linear_attention(q, q, torch.zeros((1, 2, 0, 8), device=device),
                                     is_causal=True, return_state=True)
    assert out.shape == (1, 2, 0, 8) and Sf.shape == (1, 2, 16, 8) and (Sf == 0).all()


def test_outputs_poisoned_none_unwritten(device, rng, poisoned_outputs):
    """Every kernel-written buffer (out, den, states, dden, dq, dk, dv) starts as NaN."""
    q, k, v, (S0, z0) = make_inputs(rng, 1, 2, 75, 75, 24, 40, torch.float32, device, state=True)
    for causal in (False, True):
        for normalize in (True, False):
            leaves = [t.clone().requires_grad_() for t in (q, k, v, S0, z0)]
            out, (Sf, zf) = linear_attention(*leaves[:3], is_causal=causal, normalize=normalize,
                                             initial_state=tuple(leaves[3:]), return_state=True,
                                             chunk_size=16)
            ref, Sf_ref, zf_ref = reference(q, k, v, causal=causal, normalize=normalize,
                                            initial_state=(S0, z0))
            check_close(out, ref, "out")
            check_close(Sf, Sf_ref, "S_final")
            (out.sum() + Sf.sum() + zf.sum()).backward()
            for leaf in leaves:
                assert torch.isfinite(leaf.grad).all()


def test_triton_launchers_ran(monkeypatch, device, rng):
    """A spy on the launchers: the forward runs the segment sums and one chunk sweep, the
    backward the row kernel, the reverse segment sums and three sweeps (dV, dK, dQ)."""
    calls = spy_calls(monkeypatch, [(LC, name, name) for name in ("state_sums", "chunk_sweep",
                                                                  "dden_rows")])
    q, k, v = (t.requires_grad_() for t in make_inputs(rng, 1, 1, 40, 40, 16, 16, torch.float32, device))
    for causal in (False, True):
        calls.clear()
        out = linear_attention(q, k, v, is_causal=causal)
        assert calls == ["state_sums", "chunk_sweep"]
        calls.clear()
        out.sum().backward()
        assert calls == ["dden_rows", "state_sums", "chunk_sweep", "chunk_sweep", "chunk_sweep"]


def test_cpu_without_interpreter_is_refused(monkeypatch):
    monkeypatch.setattr(_launch, "INTERPRET", False)
    x = torch.randn(1, 1, 4, 16)
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        linear_attention(x, x, x)


def test_bad_inputs(device):
    x = torch.randn(1, 2, 8, 16, device=device)
    v = torch.randn(1, 2, 8, 4, device=device)

    def call(*args, **kwargs):
        return linear_attention(*args, **kwargs)

    cases = [
        (TypeError, "q must be a torch.Tensor", lambda: call(x.cpu().numpy(), x, v)),
        (ValueError, "q must be 4-D", lambda: call(x[0], x, v)),
        (TypeError, "float64: use kernelkit_gpu.linear_attention_naive", lambda: call(x.double(), x.double(), v.double())),
        (TypeError, "q must have dtype", lambda: call(x.int(), x.int(), v.int())),
        (TypeError, "same dtype", lambda: call(x, x.half(), v)),
        (ValueError, "feature size of q", lambda: call(x, x[..., :8], v)),
        (ValueError, "key length S of k", lambda: call(x, x, v[:, :, :5])),
        (ValueError, "share \\(B, H\\)", lambda: call(x, x[:, :1], v[:, :1])),
        (ValueError, "up to 256", lambda: call(torch.randn(1, 1, 4, 300, device=device),
                                               torch.randn(1, 1, 4, 300, device=device), v[:, :1, :4])),
        (ValueError, "feature_map must be", lambda: call(x, x, v, feature_map="softmax")),
        (TypeError, "feature_map must be a string", lambda: call(x, x, v, feature_map=torch.relu)),
        (TypeError, "is_causal must be True or False", lambda: call(x, x, v, is_causal=1)),
        (ValueError, "causal_alignment must be 'top_left' or 'bottom_right'",
         lambda: call(x, x, v, is_causal=True, causal_alignment="lower_right")),
        (ValueError, "causal_alignment", lambda: call(x, x, v, causal_alignment="bottom-right")),
        (TypeError, "causal_alignment", lambda: call(x, x, v, is_causal=True, causal_alignment=None)),
        (TypeError, "normalize must be True or False", lambda: call(x, x, v, normalize="yes")),
        (TypeError, "return_state must be True or False", lambda: call(x, x, v, return_state=None)),
        (ValueError, "eps must be a finite number >= 0", lambda: call(x, x, v, eps=-1e-3)),
        (TypeError, "eps must be a real number", lambda: call(x, x, v, eps="small")),
        (ValueError, "chunk_size must be one of", lambda: call(x, x, v, chunk_size=48)),
        (TypeError, "chunk_size must be an int", lambda: call(x, x, v, chunk_size=64.0)),
        (ValueError, "initial_state must be a pair", lambda: call(x, x, v, initial_state=x)),
        (ValueError, "initial_state\\[0\\] must have shape", lambda: call(
            x, x, v, initial_state=(torch.zeros(1, 2, 4, 16, device=device), torch.zeros(1, 2, 16, device=device)))),
        (ValueError, "initial_state\\[1\\] must have shape", lambda: call(
            x, x, v, initial_state=(torch.zeros(1, 2, 16, 4, device=device), torch.zeros(1, 2, 4, device=device)))),
        (TypeError, "initial_state\\[1\\] must be a torch.Tensor", lambda: call(
            x, x, v, initial_state=(torch.zeros(1, 2, 16, 4, device=device), None))),
    ]
    for exc, match, fn in cases:
        with pytest.raises(exc, match=match):
            fn()


# ------------------------------------------------------ masked keys are absent (issue 18 J)
#: (alignment, T, S, index of the spoiled key / query row, chunk_size). The first is the
#: reproduction of issue 18 J; the last two span several chunks and segments of 16.
MASKED_CASES = [("bottom_right", 9, 5, 4, None), ("top_left", 9, 5, 4, None),
                ("top_left", 5, 9, 4, None), ("bottom_right", 5, 9, 4, None),
                ("top_left", 40, 37, 20, 16), ("bottom_right", 40, 23, 9, 16),
                ("bottom_right", 9, 5, 2, None)]  # (the last: q_2 of a row that sees no key)
NONFINITE = [("v", float("nan")), ("v", float("inf")), ("v", -float("inf")), ("k", float("nan")),
             ("k", float("inf")), ("q", float("nan"))]


def rowwise_reference(q, k, v, shift, eps=1e-6):
    """Float64 elu+1 linear attention one query row at a time over its visible keys only,
    through torch.autograd (the gradients sum over the visible pairs only). Rows that see no key
    are 0. q (B, H, T, D), k, v (B, H, S, *)."""
    B, H, T, _ = q.shape

    def row(b, h, i):
        js = [j for j in range(k.shape[2]) if shift is None or j <= i + shift]
        if not js:
            return torch.zeros(v.shape[3], dtype=torch.float64)
        w = (F.elu(k[b, h, js]) + 1.0) @ (F.elu(q[b, h, i]) + 1.0)
        return (w @ v[b, h, js]) / torch.clamp_min(w.sum(), eps)

    return torch.stack([torch.stack([torch.stack([row(b, h, i) for i in range(T)])
                                     for h in range(H)]) for b in range(B)])


def _check_masked(fn, rng, device, alignment, t, s, j, chunk, operand, value, dtype, tol):
    q, k, v = make_inputs(rng, 1, 2, t, s, 16, 16, dtype, device)
    {"q": q, "k": k, "v": v}[operand][0, 1, j, 3] = value
    shift = 0 if alignment == "top_left" else s - t
    ref = reference(q, k, v, causal=True, causal_alignment=alignment)[0]
    q64, k64, v64 = (torch.from_numpy(to_numpy64(x)).requires_grad_(True) for x in (q, k, v))
    row_out = rowwise_reference(q64, k64, v64, shift)
    np.testing.assert_allclose(to_numpy64(row_out), ref, **TOL["float64"])  # references agree
    # a NaN output gets a NaN upstream gradient, as a loss like (out ** 2).sum() gives it
    g = torch.from_numpy(rng.standard_normal(ref.shape)) + 0.0 * torch.from_numpy(ref)
    expect = torch.autograd.grad(row_out, (q64, k64, v64), g)
    q, k, v = (x.requires_grad_(True) for x in (q, k, v))
    out = fn(q, k, v, is_causal=True, causal_alignment=alignment, chunk_size=chunk)
    np.testing.assert_allclose(to_numpy64(out), ref, **tol)
    got = torch.autograd.grad(out, (q, k, v), g.to(device=device, dtype=out.dtype))
    for name, a, b in zip("qkv", got, expect):
        np.testing.assert_allclose(to_numpy64(a), b.numpy(), **tol, err_msg=f"d{name}")
    if (alignment, t, s, j, operand) == ("bottom_right", 9, 5, 4, "v"):  # issue 18 J
        o = to_numpy64(out)[0, 1]
        assert (o[:4] == 0).all() and np.isfinite(o[4:8]).all() and not np.isfinite(o[8, 3])


@pytest.mark.parametrize("operand,value", NONFINITE, ids=[f"{o}{x}" for o, x in NONFINITE])
@pytest.mark.parametrize("alignment,t,s,j,chunk", MASKED_CASES,
                         ids=[f"{a}-T{t}-S{s}-j{j}" for a, t, s, j, _ in MASKED_CASES])
def test_nonfinite_reaches_only_the_rows_that_see_it(alignment, t, s, j, chunk, operand, value,
                                                     device, rng, poisoned_outputs):
    """A NaN / inf in v_s, k_s or q_t reaches exactly the outputs and gradients of a row-by-row
    float64 computation over the visible keys, NaN and inf positions included (never a row that
    does not see s through 0 * NaN in the intra-chunk product, forward or backward); rows
    without keys are 0. The gate sends these calls to the exact twin (test_causal_gate_routes).
    Tolerance of the
    finite entries: float32 against float64 as check_close (2e-5; the masking is tested here,
    the accuracy by the rule tests)."""
    _check_masked(linear_attention, rng, device, alignment, t, s, j, chunk, operand, value,
                  torch.float32, dict(rtol=2e-5, atol=2e-5))


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
def test_nonfinite_masked_16_bit(dtype_name, device, rng, poisoned_outputs):
    """The reproduction of issue 18 J in float16 / bfloat16 (tolerances of the finite entries:
    the inputs' and the scores' 16-bit rounding, u = 4.9e-4 / 3.9e-3, over <= 5 keys)."""
    tol = {"float16": dict(rtol=1e-2, atol=1e-2), "bfloat16": dict(rtol=6e-2, atol=6e-2)}
    _check_masked(linear_attention, rng, device, "bottom_right", 9, 5, 4, None, "v",
                  float("nan"), getattr(torch, dtype_name), tol[dtype_name])


@pytest.mark.parametrize("operand,value", NONFINITE, ids=[f"{o}{x}" for o, x in NONFINITE])
@pytest.mark.parametrize("alignment,t,s,j,chunk", MASKED_CASES,
                         ids=[f"{a}-T{t}-S{s}-j{j}" for a, t, s, j, _ in MASKED_CASES])
def test_naive_nonfinite_reaches_only_the_rows_that_see_it(alignment, t, s, j, chunk, operand,
                                                           value, rng):
    """The plain-PyTorch twin follows the same rule, in float64 (the gradient reference of the
    other tests) and float32."""
    for dtype, tol in ((torch.float64, TOL["float64"]),
                       (torch.float32, dict(rtol=2e-5, atol=2e-5))):
        _check_masked(linear_attention_naive, rng, "cpu", alignment, t, s, j, chunk, operand,
                      value, dtype, tol)


# ------------------------------------------------- the finiteness gate of causal calls
def test_causal_gate_routes(device, rng, monkeypatch):
    """Spy: finite causal inputs run the Triton forward and backward and never the twin; with a
    non-finite q, k, v or initial state the Triton forward (queued before the flag is read) is
    dropped and the twin gives the result and its gradients (no Triton backward); non-causal
    calls run the Triton passes whatever the values."""
    import kernelkit_gpu.attention.linear as LA

    calls = spy_calls(monkeypatch, [(LA, "linear_attention_fwd", "fwd"),
                                    (LA, "linear_attention_bwd", "bwd"),
                                    (LA, "linear_attention_naive", "twin")])
    for operand, causal, want in ((None, True, ["fwd", "bwd"]), ("v", True, ["fwd", "twin"]),
                                  ("q", True, ["fwd", "twin"]), ("k", True, ["fwd", "twin"]),
                                  ("S0", True, ["fwd", "twin"]), ("v", False, ["fwd", "bwd"])):
        q, k, v, (S0, z0) = make_inputs(rng, 1, 2, 20, 20, 16, 16, torch.float32, device,
                                        state=True)
        if operand:
            {"q": q, "k": k, "v": v, "S0": S0}[operand][0, 1, 4, 3] = float("inf")
        leaves = [x.requires_grad_(True) for x in (q, k, v, S0, z0)]
        out = linear_attention(q, k, v, is_causal=causal, initial_state=(S0, z0), chunk_size=16)
        torch.autograd.grad(out.sum(), leaves)
        assert calls == want, (operand, causal)
        calls.clear()


@pytest.mark.parametrize("feature_map", NOT_POSITIVE)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")],
                         ids=["nan", "inf", "-inf"])
def test_causal_nonfinite_every_map(feature_map, value, device, rng):
    """Causal relu / identity / pre-mapped features (weights may be 0 or negative, so an
    infinite v_s gives +inf, -inf or NaN pair by pair): a non-finite v_s gives exactly the
    float64 reference's output and final state, NaN and inf positions included (finite
    entries: float32 against float64, 2e-5 as check_close)."""
    q, k, v = make_inputs(rng, 1, 2, 40, 40, 16, 16, torch.float32, device, feature_map)
    if feature_map is not None and get_feature_map(feature_map).sign == "non-negative":
        q[0, 1, 25:] = -q[0, 1, 25:].abs()  # rows 25.. have zero weights: 0 * inf = NaN
    v[0, 1, 20, 3] = value
    out, (s_fin, z_fin) = linear_attention(q, k, v, feature_map=feature_map, is_causal=True,
                                           return_state=True)
    want, s_want, z_want = reference(q, k, v, feature_map, causal=True)
    assert np.isfinite(to_numpy64(out)[0, 1, :20]).all()
    for got, ref in ((out, want), (s_fin, s_want), (z_fin, z_want)):
        np.testing.assert_allclose(to_numpy64(got), ref, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("which", ["dout", "dS"])
def test_nonfinite_incoming_gradient_runs_the_twin(which, device, rng, monkeypatch):
    """Finite causal inputs with an initial state (Triton forward), a NaN and an inf in the
    output's gradient (or the final state's): the backward computes that call's gradients
    through the twin (spy: no Triton backward), equal to the float64 twin's autograd (itself
    checked against the row-by-row computation above), NaN and inf positions included
    (float32 against float64: 2e-5)."""
    import kernelkit_gpu.attention.linear as LA

    T = 40
    q, k, v, (S0, z0) = make_inputs(rng, 1, 1, T, T, 16, 16, torch.float32, device, state=True)
    inputs = (q, k, v, S0, z0)
    g = torch.from_numpy(rng.standard_normal((1, 1, T, 16)))
    gs = torch.from_numpy(rng.standard_normal((1, 1, 16, 16)))
    if which == "dout":
        g[0, 0, 20, 3], g[0, 0, 30, 5] = float("nan"), float("inf")
    else:
        gs[0, 0, 2, 3] = float("nan")

    def grads(fn, dtype, dev):
        leaves = [x.detach().to(device=dev, dtype=dtype).requires_grad_(True) for x in inputs]
        out, (sf, _) = fn(*leaves[:3], is_causal=True, initial_state=tuple(leaves[3:]),
                          return_state=True, chunk_size=16)
        return [to_numpy64(x) for x in torch.autograd.grad(
            (out, sf), leaves, (g.to(dev, out.dtype), gs.to(dev, sf.dtype)))]

    want = grads(linear_attention_naive, torch.float64, "cpu")
    calls = spy_calls(monkeypatch, [(LA, "linear_attention_fwd", "fwd"),
                                    (LA, "linear_attention_bwd", "bwd"),
                                    (LA, "twin_top_left", "twin")])
    got = grads(linear_attention, torch.float32, device)
    assert calls == ["fwd", "twin"]
    assert not np.isfinite(want[1]).all() and not np.isfinite(want[3]).all()
    for name, a, b in zip(["dq", "dk", "dv", "dS0", "dz0"], got, want):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5, err_msg=name)


def test_noncausal_call_is_not_checked(device, rng, monkeypatch):
    """A non-causal call (nothing masked) makes no host read and no extra reduction, forward or
    backward, even with a NaN in v; the spy is live (a causal call trips it)."""
    import kernelkit_gpu.attention.linear as LA

    q, k, v = make_inputs(rng, 1, 2, 20, 20, 16, 16, torch.float32, device)
    v[0, 1, 4, 3] = float("nan")
    q, k, v = (x.requires_grad_(True) for x in (q, k, v))
    seen = count_checks(monkeypatch, [(LA, "linear_attention_fwd"), (LA, "linear_attention_bwd")])
    out, (s_fin, z_fin) = linear_attention(q, k, v, return_state=True)
    torch.autograd.grad((out, s_fin, z_fin), (q, k, v),
                        (torch.ones_like(out), torch.ones_like(s_fin), torch.ones_like(z_fin)))
    assert seen == []
    linear_attention(q, k, v, is_causal=True)
    assert "sum" in seen and "__bool__" in seen
