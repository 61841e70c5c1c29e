"""Gated and decayed linear attention: the float64 reference, the chunked PyTorch path and the
Triton kernels (one gate per head and step).

The reference (:mod:`kernelkit_math.gated_attention`) is checked against definitions written
out here: its recurrence against the unrolled sum with explicit weights, a decay alone against
the dot-product kernel times gamma^(t - j), no gate against linear attention with the identity
map, and state passing against the whole sequence. The public function, on the PyTorch path
and on the Triton forward (the run's device; every launcher buffer poisoned with NaN), is
checked against the reference with an error bound derived from float32 rounding along the
computation; the PyTorch path's gradients against finite differences in float64, and the
Triton backward's against those with a bound derived the same way.

The Triton module is imported inside the tests: this module is collected where triton is
missing too (.ci/run's step without it runs the tests that are not marked ``interpreter``).
"""

import numpy as np
import pytest
import torch

from kernelkit.attention import gated_linear_attention
from kernelkit_gpu.attention.gated_naive import gated_linear_attention_naive
from kernelkit_math import attention as ref_attn
from kernelkit_math import gated_attention as ref

U32 = 2.0**-24
#: float64: the recurrence and the unrolled sum round differently, by a few ulps of the terms.
F64_RTOL = 1e-12


def _qkv(rng, B=2, H=3, T=37, D=8, Dv=5):
    return (rng.normal(size=(B, H, T, D)), rng.normal(size=(B, H, T, D)),
            rng.normal(size=(B, H, T, Dv)))


def _gates(rng, kind, shape):
    """Log-gates of one kind for q of ``shape`` (B, H, T, D); None for no gate."""
    B, H, T, D = shape
    if kind == "none":
        return None
    if kind == "scalar":  # Mamba2-like: -softplus(x) A, in (-3, 0)
        return -rng.uniform(0.0, 3.0, size=(B, H, T))
    if kind == "channel":  # GLA-like: per channel
        return -rng.uniform(0.0, 1.0, size=(B, H, T, D))
    raise ValueError(kind)


def _magnitude(q, k, v, log_gate, decay, scale=None):
    """sum_j |s q_t| . |k_j| w_tj |v_j|: the scale of the sums behind each output element, by
    the reference's unrolled form on absolute values."""
    return ref.gated_linear_attention_smoother(np.abs(q), np.abs(k), np.abs(v), log_gate,
                                               decay=decay, scale=scale)


# ------------------------------------------------------------------------------ the reference
@pytest.mark.parametrize("kind", ["none", "scalar", "channel"])
@pytest.mark.parametrize("decay", [None, 0.9, [0.5, 0.97, 1.0], 0.0])
def test_reference_recurrence_is_the_unrolled_sum(kind, decay):
    rng = np.random.default_rng(1)
    q, k, v = _qkv(rng)
    g = _gates(rng, kind, q.shape)
    got = ref.gated_linear_attention(q, k, v, g, decay=decay, scale=0.7)
    want = ref.gated_linear_attention_smoother(q, k, v, g, decay=decay, scale=0.7)
    bound = F64_RTOL * _magnitude(q, k, v, g, decay, 0.7)
    np.testing.assert_array_less(np.abs(got - want), bound + 1e-300)


def test_reference_decay_is_the_exponential_kernel_in_position():
    """A decay alone: out = ((q k^T) o Gamma) v with Gamma_tj = gamma^(t - j) for j <= t."""
    rng = np.random.default_rng(2)
    q, k, v = _qkv(rng, H=2)
    gammas = [0.8, 0.99]
    t = np.arange(q.shape[-2])
    lag = t[:, None] - t[None, :]
    want = np.stack([
        np.einsum("btd,bjd->btj", q[:, h], k[:, h]) * np.where(lag >= 0, gammas[h] ** lag, 0.0)
        for h in range(2)], axis=1) @ v
    got = ref.gated_linear_attention(q, k, v, decay=gammas)
    np.testing.assert_allclose(got, want, rtol=0, atol=F64_RTOL * np.abs(want).max() * 10)


def test_reference_without_gate_is_linear_attention_with_the_identity_map():
    rng = np.random.default_rng(3)
    q, k, v = _qkv(rng)
    want = ref_attn.linear_attention(q, k, v, "identity", is_causal=True, normalize=False)
    got = ref.gated_linear_attention(q, k, v)
    np.testing.assert_allclose(got, want, rtol=0,
                               atol=F64_RTOL * _magnitude(q, k, v, None, None).max())


@pytest.mark.parametrize("kind", ["scalar", "channel"])
def test_reference_state_passing_is_the_whole_sequence(kind):
    rng = np.random.default_rng(4)
    q, k, v = _qkv(rng)
    g = _gates(rng, kind, q.shape)
    whole, end = ref.gated_linear_attention(q, k, v, g, decay=0.95, return_state=True)
    cut = 16
    first, mid = ref.gated_linear_attention(q[..., :cut, :], k[..., :cut, :], v[..., :cut, :],
                                            g[:, :, :cut], decay=0.95, return_state=True)
    second, last = ref.gated_linear_attention(q[..., cut:, :], k[..., cut:, :], v[..., cut:, :],
                                              g[:, :, cut:], decay=0.95, initial_state=mid,
                                              return_state=True)
    np.testing.assert_allclose(np.concatenate([first, second], axis=-2), whole, rtol=1e-13,
                               atol=1e-13)
    np.testing.assert_allclose(last, end, rtol=1e-13, atol=1e-13)


def test_reference_zero_gate_empties_the_state():
    """A gate of exactly 0 at step r: the rows from r on are those of a fresh start at r."""
    rng = np.random.default_rng(5)
    q, k, v = _qkv(rng)
    g = _gates(rng, "scalar", q.shape)
    g[..., 20] = -np.inf
    got = ref.gated_linear_attention(q, k, v, g)
    fresh = ref.gated_linear_attention(q[..., 20:, :], k[..., 20:, :], v[..., 20:, :],
                                       g[..., 20:])
    np.testing.assert_array_equal(got[..., 20:, :], fresh)
    np.testing.assert_allclose(ref.gated_linear_attention_smoother(q, k, v, g), got,
                               rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------- the PyTorch path
def _bound(q, k, v, g, decay, scale, dtype, chunk=64, extra=0.0):
    """Elementwise bound on the chunked path's error against the float64 reference on the
    same (rounded) inputs: each product of the sums carries at most (D + C + T / C + 10) float32
    roundings (the dot product over D, the sums within a chunk and across chunks, exp and its
    argument, which rounds with |G| <= C max |g|), times the magnitude of the sums, plus the
    rounding of the output to ``dtype``. ``extra``: more magnitude per element (the initial
    state's term)."""
    T, D = q.shape[-2], q.shape[-1]
    G = 0.0 if g is None else float(np.max(-np.where(np.isinf(g), 0.0, g))) * chunk
    if decay is not None:
        G += chunk * float(-np.log(np.maximum(np.min(decay), 1e-300)))
    steps = D + chunk + T / chunk + G + 10
    mag = _magnitude(q, k, v, g, decay, scale) + extra
    out_u = {"float32": U32, "float16": 2.0**-11, "bfloat16": 2.0**-8}[dtype]
    # 16-bit inputs: the Triton forward multiplies its float32 operands (state, decayed scores)
    # in TF32 on the GPU, rounding both factors of a product to 2^-11
    tf32 = 0.0 if dtype == "float32" else 2 * 2.0**-11
    return (steps * U32 + tf32 + out_u) * mag + 1e-30


def _check_against_reference(device, dtype, kind, T, backend, D=8, Dv=5, zero_gate=False):
    rng = np.random.default_rng(6)
    q, k, v = _qkv(rng, T=T, D=D, Dv=Dv)
    g = _gates(rng, kind, q.shape)
    if zero_gate:
        g[..., T // 2] = -np.inf
    decay = [0.9, 0.99, 1.0]
    S0 = rng.normal(size=(2, 3, D, Dv))
    tq, tk, tv = (torch.tensor(x, dtype=getattr(torch, dtype), device=device) for x in (q, k, v))
    tg = None if g is None else torch.tensor(g, dtype=torch.float32, device=device)
    out, S = gated_linear_attention(tq, tk, tv, tg, decay=decay, scale=0.5, backend=backend,
                                    initial_state=torch.tensor(S0, device=device),
                                    return_state=True)
    assert out.dtype == tq.dtype and out.device == tq.device and S.dtype == torch.float32
    q, k, v = (x.double().cpu().numpy() for x in (tq, tk, tv))  # the rounded inputs
    g = None if tg is None else tg.double().cpu().numpy()
    want, want_S = ref.gated_linear_attention(q, k, v, g, decay=decay, scale=0.5,
                                              initial_state=S0, return_state=True)
    # the initial state adds |s q_t| exp(G_t) |S0| to each sum's magnitude (at most |q| |S0|)
    bound = _bound(q, k, v, g, decay, 0.5, dtype, extra=0.5 * np.abs(q) @ np.abs(S0))
    np.testing.assert_array_less(np.abs(out.double().cpu().numpy() - want), bound)
    # the state: sums over T steps of k_j v_j^T times weights <= 1, the same roundings as an
    # output element but without the dot product over D
    state_mag = np.abs(S0) + np.einsum("bhtd,bhte->bhde", np.abs(k), np.abs(v))
    G = 0.0 if g is None else float(np.max(-np.where(np.isinf(g), 0.0, g))) * 64
    G += 64 * float(-np.log(min(decay)))
    tf32 = 0.0 if dtype == "float32" else 2 * 2.0**-11
    np.testing.assert_array_less(np.abs(S.double().cpu().numpy() - want_S),
                                 ((64 + T / 64 + G + 10) * U32 + tf32) * state_mag + 1e-30)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("kind", ["none", "scalar", "channel"])
@pytest.mark.parametrize("T", [1, 63, 130])
def test_torch_path_matches_the_reference(device, dtype, kind, T):
    _check_against_reference(device, dtype, kind, T, "torch")


@pytest.mark.usefixtures("triton_can_run", "poisoned_outputs")
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("kind, T, D, Dv, zero_gate", [
    ("none", 1, 8, 5, False), ("scalar", 63, 8, 5, True), ("scalar", 130, 32, 70, False),
    ("scalar", 40, 128, 128, True)])
def test_triton_forward_matches_the_reference(device, dtype, kind, T, D, Dv, zero_gate):
    _check_against_reference(device, dtype, kind, T, "triton", D=D, Dv=Dv, zero_gate=zero_gate)


@pytest.mark.parametrize("chunk", [1, 7, 64, 200])
def test_torch_path_float64_for_every_chunk_size(chunk):
    rng = np.random.default_rng(7)
    q, k, v = _qkv(rng, T=130)
    g = _gates(rng, "channel", q.shape)
    g[..., 50, :3] = -np.inf  # some channels reset at step 50
    S0 = rng.normal(size=(2, 3, 8, 5))
    la = torch.tensor(ref.log_decay_per_step(q.shape, g, 0.97))
    out, S = gated_linear_attention_naive(*(torch.tensor(x) for x in (q, k, v)), la,
                                          scale=0.3, initial_state=torch.tensor(S0),
                                          return_state=True, chunk=chunk)
    want, want_S = ref.gated_linear_attention(q, k, v, g, decay=0.97, scale=0.3,
                                              initial_state=S0, return_state=True)
    scale = np.abs(want).max() + _magnitude(q, k, v, g, 0.97, 0.3).max()
    np.testing.assert_allclose(out.numpy(), want, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(S.numpy(), want_S, rtol=0, atol=1e-12 * np.abs(want_S).max())


@pytest.mark.parametrize("kind", ["scalar", "channel"])
def test_torch_path_state_passing(device, kind):
    rng = np.random.default_rng(8)
    q, k, v = (torch.tensor(x, device=device) for x in _qkv(rng, T=100))
    g = torch.tensor(_gates(rng, kind, q.shape), device=device)
    whole, end = gated_linear_attention(q, k, v, g, decay=0.9, return_state=True)
    parts, state = [], None
    for lo, hi in ((0, 30), (30, 31), (31, 100)):
        out, state = gated_linear_attention(q[..., lo:hi, :], k[..., lo:hi, :], v[..., lo:hi, :],
                                            g[:, :, lo:hi], decay=0.9, initial_state=state,
                                            return_state=True)
        parts.append(out)
    torch.testing.assert_close(torch.cat(parts, dim=-2), whole, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(state, end, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["scalar", "channel"])
def test_gradients_against_finite_differences(kind):
    rng = np.random.default_rng(9)
    q, k, v = (torch.tensor(x, requires_grad=True) for x in _qkv(rng, B=1, H=2, T=11, D=3, Dv=2))
    g = torch.tensor(_gates(rng, kind, q.shape), requires_grad=True)
    S0 = torch.tensor(rng.normal(size=(1, 2, 3, 2)), requires_grad=True)

    def f(q, k, v, g, S0):
        out, S = gated_linear_attention(q, k, v, g, decay=[0.9, 0.5], scale=0.8,
                                        initial_state=S0, return_state=True)
        return out, S

    torch.autograd.gradcheck(f, (q, k, v, g, S0))


def _grads(q, k, v, g, S0, w_out, w_S, backend, dtype, device, decay):
    """Gradients of <w_out, out> + <w_S, S_T> for q, k, v, log_gate, S0 (float64 numpy)."""
    ts = [torch.tensor(x, dtype=dtype, device=device, requires_grad=True) for x in (q, k, v)]
    tg = torch.tensor(g, dtype=torch.float32 if dtype != torch.float64 else dtype,
                      device=device, requires_grad=True)
    tS0 = torch.tensor(S0, dtype=torch.float32 if dtype != torch.float64 else dtype,
                       device=device, requires_grad=True)
    out, S = gated_linear_attention(*ts, tg, decay=decay, scale=0.5, initial_state=tS0,
                                    return_state=True, backend=backend)
    loss = (out.to(torch.float64) * torch.tensor(w_out, device=device)).sum() + (
        S.to(torch.float64) * torch.tensor(w_S, device=device)).sum()
    loss.backward()
    return [t.grad.double().cpu().numpy() for t in (*ts, tg, tS0)]


@pytest.mark.usefixtures("triton_can_run", "poisoned_outputs")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("T, D, Dv, zero_gate", [(1, 8, 5, False), (63, 8, 5, True),
                                                 (130, 32, 70, False)])
def test_triton_gradients_match_float64(device, dtype, T, D, Dv, zero_gate):
    """The Triton backward against the float64 PyTorch path (checked by finite differences
    above) on the same rounded inputs. Bound per element: the roundings along the computation
    (as for the output, plus T for the reverse sum of the gate's gradient) times the same
    gradient computed on absolute values (every term of a gradient is a product of inputs,
    incoming gradients and weights in [0, 1], so that sum bounds the terms' magnitudes)."""
    rng = np.random.default_rng(17)
    q, k, v = _qkv(rng, T=T, D=D, Dv=Dv)
    g = _gates(rng, "scalar", q.shape)
    if zero_gate:
        g[..., T // 2] = -np.inf
    S0 = rng.normal(size=(2, 3, D, Dv))
    w_out, w_S = rng.normal(size=(2, 3, T, Dv)), rng.normal(size=(2, 3, D, Dv))
    decay = [0.9, 0.99, 1.0]
    tdtype = getattr(torch, dtype)
    q, k, v = (torch.tensor(x, dtype=tdtype).double().numpy() for x in (q, k, v))  # rounded
    g = torch.tensor(g, dtype=torch.float32).double().numpy()
    S0 = torch.tensor(S0, dtype=torch.float32).double().numpy()
    got = _grads(q, k, v, g, S0, w_out, w_S, "triton", tdtype, device, decay)
    want = _grads(q, k, v, g, S0, w_out, w_S, "torch", torch.float64, "cpu", decay)
    mag = _grads(*(np.abs(x) for x in (q, k, v)), g, np.abs(S0), np.abs(w_out), np.abs(w_S),
                 "torch", torch.float64, "cpu", decay)
    # d log-gate: q . dq - k . dk summed from the end, plus <dS_T, S_T> at the last step: the
    # magnitudes of those terms
    gate_mag = np.abs(q * mag[0]).sum(-1) + np.abs(k * mag[1]).sum(-1)
    gate_mag[..., -1] += (np.abs(w_S) * (np.abs(S0) + np.einsum("bhtd,bhte->bhde", np.abs(k),
                                                                  np.abs(v)))).sum((-1, -2))
    gate_mag = np.flip(np.cumsum(np.flip(gate_mag, -1), -1), -1)
    G = float(np.max(-np.where(np.isinf(g), 0.0, g))) * 64 + 64 * float(-np.log(min(decay)))
    steps = (D + Dv + 64 + 2 * T / 64 + G + 10) * U32 + T * U32  # + T: the reverse sum
    sixteen = dtype != "float32"
    # 16-bit: the incoming gradient of the output is rounded to it (2^-8 for bfloat16), the
    # float32 products run in TF32 on the GPU (both factors, 2^-11 each), and dq, dk, dv are
    # returned in it
    incoming = (2.0**-8 + 2 * 2.0**-11) if sixteen else 0.0
    for i, (a, b, m) in enumerate(zip(got, want, mag[:3] + [gate_mag, mag[4]])):
        result = 2.0**-8 if sixteen and i < 3 else 0.0
        np.testing.assert_array_less(np.abs(a - b), (steps + incoming + result) * m + 1e-30,
                                     err_msg=f"gradient {i}")


@pytest.mark.usefixtures("triton_can_run")
def test_triton_forward_non_finite_values_reach_only_the_rows_that_read_them(device):
    """A NaN key is read by the Triton kernel (rows before it stay finite); an infinite value
    sends the call to the PyTorch twin (0 * inf inside a chunk would reach earlier rows)."""
    rng = np.random.default_rng(16)
    q, k, v = (torch.tensor(x, dtype=torch.float32, device=device) for x in _qkv(rng, T=80))
    g = torch.tensor(_gates(rng, "scalar", q.shape), dtype=torch.float32, device=device)
    for name, t in (("k", k), ("v", v)):
        bad = t.clone()
        bad[0, 1, 30, 2] = torch.inf if name == "v" else torch.nan
        args = dict(q=q, k=k, v=v)
        args[name] = bad
        out = gated_linear_attention(**args, log_gate=g, backend="triton")
        assert torch.isfinite(out[:, :, :30]).all() and torch.isfinite(out[1]).all(), name
        assert torch.isfinite(out[0, [0, 2]]).all(), name
        hit = out[0, 1, 30:, 2] if name == "v" else out[0, 1, 30:]  # v's column / every one
        assert not torch.isfinite(hit).any(), name


@pytest.mark.usefixtures("triton_can_run")
def test_triton_refuses_what_its_kernel_lacks_by_name(device):
    q = k = v = torch.zeros(1, 2, 5, 4, device=device)
    with pytest.raises(ValueError, match="one gate per head and step"):
        gated_linear_attention(q, k, v, torch.zeros(1, 2, 5, 4, device=device), backend="triton")
    wide = torch.zeros(1, 2, 5, 129, device=device)
    with pytest.raises(ValueError, match="head dims up to 128"):
        gated_linear_attention(wide, wide, v, backend="triton")


def test_zero_gate_gives_finite_gradients():
    """A gate of exactly 0 (log -inf): outputs and every gradient finite (no -inf - -inf)."""
    rng = np.random.default_rng(10)
    q, k, v = (torch.tensor(x, requires_grad=True) for x in _qkv(rng, T=70))
    g = torch.tensor(_gates(rng, "channel", q.shape))
    g[..., 10, :] = -torch.inf
    g.requires_grad_(True)
    out = gated_linear_attention(q, k, v, g)
    out.square().sum().backward()
    for t in (out, q.grad, k.grad, v.grad, g.grad):
        assert torch.isfinite(t).all()


def test_nan_in_a_key_reaches_the_rows_that_read_it():
    rng = np.random.default_rng(11)
    q, k, v = (torch.tensor(x) for x in _qkv(rng, T=80))
    g = torch.tensor(_gates(rng, "scalar", q.shape))
    g[..., 50] = -torch.inf  # a zero gate does not cut a NaN off (0 * NaN is NaN)
    k[0, 1, 30, 2] = torch.nan
    out = gated_linear_attention(q, k, v, g)
    assert torch.isfinite(out[:, :, :30]).all() and torch.isfinite(out[1]).all()
    assert torch.isfinite(out[0, [0, 2]]).all()
    assert torch.isnan(out[0, 1, 30:]).all()


def test_layout_bthd_and_packed_batch(device):
    rng = np.random.default_rng(12)
    q, k, v = (torch.tensor(x, device=device) for x in _qkv(rng, B=1, T=50))
    g = torch.tensor(_gates(rng, "scalar", q.shape), device=device)
    S0 = torch.tensor(rng.normal(size=(3, 3, 8, 5)), device=device)
    want = gated_linear_attention(q, k, v, g, decay=0.9)
    got = gated_linear_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                 g.transpose(1, 2), decay=0.9, layout="bthd")
    torch.testing.assert_close(got.transpose(1, 2), want, rtol=0, atol=0)
    cu = torch.tensor([0, 20, 20, 50], device=device)  # the second sequence is empty
    packed, states = gated_linear_attention(q[0].transpose(0, 1), k[0].transpose(0, 1),
                                            v[0].transpose(0, 1), g[0].transpose(0, 1),
                                            decay=0.9, initial_state=S0, return_state=True,
                                            cu_seqlens=cu)
    for i, (lo, hi) in enumerate(((0, 20), (20, 20), (20, 50))):
        one, state = gated_linear_attention(q[..., lo:hi, :], k[..., lo:hi, :], v[..., lo:hi, :],
                                            g[..., lo:hi], decay=0.9, initial_state=S0[i:i + 1],
                                            return_state=True)
        torch.testing.assert_close(packed[lo:hi], one[0].transpose(0, 1), rtol=0, atol=0)
        torch.testing.assert_close(states[i:i + 1], state, rtol=0, atol=0)


def test_inputs_are_not_modified():
    rng = np.random.default_rng(13)
    q, k, v = (torch.tensor(x) for x in _qkv(rng))
    g = torch.tensor(_gates(rng, "channel", q.shape))
    S0 = torch.zeros(2, 3, 8, 5)
    copies = [t.clone() for t in (q, k, v, g, S0)]
    gated_linear_attention(q, k, v, g, decay=0.9, initial_state=S0.double(), scale=2.0)
    for t, c in zip((q, k, v, g, S0), copies):
        assert torch.equal(t, c)


@pytest.mark.parametrize("change, exc, match", [
    (dict(log_gate=torch.full((1, 2, 5), 0.1)), ValueError, "log_gate must be <= 0"),
    (dict(log_gate=torch.zeros(1, 2, 4)), ValueError, "log_gate must have shape"),
    (dict(log_gate=[0.0] * 5), TypeError, "log_gate must be a floating torch.Tensor"),
    (dict(decay=1.5), ValueError, r"decay must be in \[0, 1\]"),
    (dict(decay=[0.5, 0.5, 0.5]), ValueError, "one per head"),
    (dict(decay="0.5"), TypeError, "decay must be a number"),
    (dict(scale=-1.0), ValueError, "scale must be a finite number > 0"),
    (dict(backend="gpu"), ValueError, "backend must be one of"),
    (dict(layout="thd"), ValueError, "layout"),
    (dict(initial_state=torch.zeros(1, 2, 3, 4)), ValueError, "initial_state must be"),
    (dict(max_seqlen=4), ValueError, "max_seqlen is only read with cu_seqlens"),
    (dict(k=torch.zeros(1, 2, 5, 3)), ValueError, "q and k must have the same shape"),
    (dict(v=torch.zeros(1, 2, 5, 4, dtype=torch.float64)), TypeError, "one dtype"),
    (dict(q=np.zeros((1, 2, 5, 4))), TypeError, "q must be a torch.Tensor"),
])
def test_bad_input(change, exc, match):
    args = dict(q=torch.zeros(1, 2, 5, 4), k=torch.zeros(1, 2, 5, 4), v=torch.zeros(1, 2, 5, 3))
    args.update(change)
    with pytest.raises(exc, match=match):
        gated_linear_attention(**args)
