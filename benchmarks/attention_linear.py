"""Benchmark: kernelkit linear attention (chunked Triton) against flash-linear-attention and SDPA.

Run once on the GPU machine (about 3-4 minutes on an H200 with a cold Triton cache; ``--quick``
for about one and a half)::

    python benchmarks/attention_linear.py [--quick] [--out PATH] [--budget SECONDS]

Order of work, all in one process so that every ratio compares numbers from the same run:

1. device facts and the measured device-to-device copy bandwidth (bytes read + written, as in
   ``shared/anchors``): the memory floor of a forward pass is reading q, k, v and writing o once,
   of forward + backward reading q, k, v, o, dout and writing o, dq, dk, dv (12 tensors);
2. correctness first, at B1 H4 T4096 D128 bfloat16: kernelkit against the float32 naive torch
   version (forward, final state and gradients, causal and not, elu+1 normalised) and, where
   installed, against ``fla.ops.linear_attn.chunk_linear_attn`` (identity map, unnormalised,
   scaled q: the same quantity);
3. first calls (autotuning + compilation) at the largest shape, reported separately;
4. timings (``triton.testing.do_bench``, median) at B*T = 65536 tokens, H = 16, D in {64, 128},
   T from 65536 down to 512: kernelkit causal / non-causal, forward and forward + backward
   (elu+1, normalised); fla ``chunk_linear_attn`` (every T) and ``fused_chunk_linear_attn``
   (T = 65536 and 4096), causal, without feature map, with and without its own normalisation,
   layout (B, T, H, D) adapted by inspecting the signature, skipped if fla is not importable;
   torch SDPA with the flash backend, causal, forward and
   forward + backward (the crossover length); the memory floor; peak memory of kernelkit's
   forward + backward above the inputs.

The JSON goes to ``--out`` (default ``benchmarks/results/attention_linear-<gpu>-<date>.json``),
written atomically; a short table is printed last. ``--budget`` (default 225 s) stops starting new
shapes when exceeded and says so in the JSON. ``--smoke`` runs tiny shapes on the CPU under
``TRITON_INTERPRET=1`` to check the script's code paths (numbers meaningless).
"""

from __future__ import annotations

import argparse
import inspect
import time
import traceback

import torch
import torch.nn.functional as F
from _common import (check_mode, default_out, device_facts, log, now, versions, wall_s,
                     write_json_atomic)
from _common import copy_bandwidth as _copy_bandwidth
from _common import median_ms as _median_ms
from _common import peak_mib as _peak_mib

from kernelkit_gpu.attention.linear import linear_attention  # noqa: E402
from kernelkit_gpu.attention.linear_naive import linear_attention_naive  # noqa: E402

DEV = "cuda"
TOKENS = 65536
HEADS = 16
DIMS = (128, 64)
LENGTHS = (65536, 32768, 16384, 8192, 4096, 2048, 1024, 512)


def median_ms(fn, warmup=10, rep=50):
    return _median_ms(fn, DEV, warmup=warmup, rep=rep)


def first_call_s(fn):
    return wall_s(fn, DEV)


def peak_mib(fn):
    return _peak_mib(fn, DEV)


# ------------------------------------------------------------------------------- contenders
def load_fla():
    """(chunk_linear_attn, fused_chunk_linear_attn or None, version, note) or Nones."""
    try:
        from fla.ops.linear_attn import chunk_linear_attn
    except Exception as e:  # noqa: BLE001 - any import failure means "not available"
        return None, None, None, f"fla not importable: {type(e).__name__}: {e}"
    try:
        from fla.ops.linear_attn import fused_chunk_linear_attn
    except Exception:  # noqa: BLE001
        fused_chunk_linear_attn = None
    try:
        import fla
        version = getattr(fla, "__version__", "unknown")
    except Exception:  # noqa: BLE001
        version = "unknown"
    return chunk_linear_attn, fused_chunk_linear_attn, version, None


def fla_caller(fn):
    """A function (q, k, v in (B, H, T, D)) -> o (B, H, T, Dv) adapted to fn's signature.

    fla 0.6 takes (B, T, H, D) with ``head_first=False`` (or no head_first argument at all); older
    versions default to head_first=True. Inputs are passed in fla's native layout: the caller
    prepares them with ``prepare``.
    """
    params = inspect.signature(fn).parameters
    kw = {}
    head_first = False
    if "head_first" in params:
        kw["head_first"] = False
    if "output_final_state" in params:
        kw["output_final_state"] = False

    def prepare(x):  # (B, H, T, D) -> fla layout, contiguous
        return x if head_first else x.transpose(1, 2).contiguous()

    def call(q, k, v, normalize):
        kw2 = dict(kw)
        if "normalize" in params:
            kw2["normalize"] = normalize
        out = fn(q, k, v, **kw2)
        return out[0] if isinstance(out, tuple) else out

    def unprepare(o):
        return o if head_first else o.transpose(1, 2)

    return prepare, call, unprepare


def ours(causal, **kw):
    def f(q, k, v):
        return linear_attention(q, k, v, feature_map="elu+1", is_causal=causal, **kw)
    return f


def sdpa_flash_causal(q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def fwd_bwd(fn, args, dout):
    def run():
        for a in args:
            a.grad = None
        out = fn(*args)
        out.backward(dout)
    return run


# ------------------------------------------------------------------------------------ parts
def rel_max(a, b):
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def part_correctness(fla_fns, smoke):
    B, H, T, D = (1, 2, 80, 32) if smoke else (1, 4, 4096, 128)
    dt = torch.float32 if smoke else torch.bfloat16
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, generator=g).to(DEV, dt) for _ in range(3))
    dout = torch.randn(B, H, T, D, generator=g).to(DEV, dt)
    res = []
    for causal in (True, False):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out, (Sf, zf) = linear_attention(*leaves, is_causal=causal, return_state=True)
        out.backward(dout)
        ref_leaves = [t.float().clone().requires_grad_() for t in (q, k, v)]
        ref, (rS, rz) = linear_attention_naive(*ref_leaves, is_causal=causal, return_state=True)
        ref.backward(dout.float())
        r = dict(causal=causal, shape=[B, H, T, D], dtype=str(dt).replace("torch.", ""),
                 reference="linear_attention_naive in float32 on the same (rounded) inputs",
                 out_rel_max=rel_max(out, ref), S_final_rel_max=rel_max(Sf, rS),
                 z_final_rel_max=rel_max(zf, rz))
        for name, a, b in zip(("dq", "dk", "dv"), leaves, ref_leaves):
            r[f"{name}_rel_max"] = rel_max(a.grad, b.grad)
        limit = 1e-4 if dt == torch.float32 else 5e-2
        r["ok"] = all(v_ < limit for key, v_ in r.items() if key.endswith("_rel_max"))
        res.append(r)
        log(f"  causal={causal}: " + ", ".join(f"{key[:-8]} {val:.1e}" for key, val in r.items()
                                                if key.endswith("_rel_max")) + f"  ok={r['ok']}")
    chunk_fla = fla_fns[0]
    if chunk_fla is not None:
        prepare, call, unprepare = fla_caller(chunk_fla)
        scale = D ** -0.5
        qp, kp = q.float().abs() + 0.1, k.float().abs() + 0.1  # positive: no cancellation
        qp, kp = qp.to(dt), kp.to(dt)
        o_fla = unprepare(call(prepare(qp), prepare(kp), prepare(v), False))
        o_ours = linear_attention((qp.float() * scale).to(dt), kp, v, feature_map=None, is_causal=True,
                                  normalize=False)
        r = dict(against="fla chunk_linear_attn(normalize=False) vs ours(feature_map=None, q*scale, "
                 "normalize=False), causal", rel_max=rel_max(o_ours, o_fla))
        r["ok"] = r["rel_max"] < 5e-2
        log(f"  vs fla: rel max {r['rel_max']:.1e} ok={r['ok']}")
        res.append(r)
    return res


def part_timings(dims, lengths, copy_Bps, fla_fns, budget_s, t_start, smoke, fla_dims=None):
    """Every (D, T) shape, longest first; fla is timed only for head dims in ``fla_dims``
    (default: all; its first call per D autotunes for about two minutes)."""
    rows, skipped = [], []
    chunk_fla, fused_fla = fla_fns[:2]
    dt = torch.float32 if smoke else torch.bfloat16
    esize = torch.tensor([], dtype=dt).element_size()
    for D in dims:
        for T in lengths:
            if time.perf_counter() - t_start > budget_s:
                skipped.append(dict(D=D, T=T, why="time budget"))
                continue
            B = max(1, TOKENS // T) if not smoke else 1
            H = HEADS if not smoke else 2
            g = torch.Generator(device="cpu").manual_seed(T + D)
            q, k, v = (torch.randn(B, H, T, D, generator=g).to(DEV, dt).requires_grad_()
                       for _ in range(3))
            dout = torch.randn(B, H, T, D, generator=g).to(DEV, dt)
            n_elem = B * H * T * D
            floor_fwd_ms = 4 * n_elem * esize / copy_Bps * 1e3
            floor_fb_ms = 12 * n_elem * esize / copy_Bps * 1e3
            r = dict(B=B, H=H, T=T, D=D, dtype=str(dt).replace("torch.", ""),
                     floor_fwd_ms=floor_fwd_ms, floor_fwd_bwd_ms=floor_fb_ms)
            first = not rows or rows[-1]["D"] != D
            for causal in (True, False):
                tag = "causal" if causal else "full"
                f = ours(causal)
                if first:
                    r[f"ours_{tag}_first_call_fwd_s"] = first_call_s(lambda: f(q, k, v))
                    r[f"ours_{tag}_first_call_fwd_bwd_s"] = first_call_s(fwd_bwd(f, (q, k, v), dout))

                def fwd(f=f):
                    with torch.no_grad():
                        return f(q, k, v)

                r[f"ours_{tag}_fwd_ms"] = median_ms(fwd)
                r[f"ours_{tag}_fwd_bwd_ms"] = median_ms(fwd_bwd(f, (q, k, v), dout))
                r[f"ours_{tag}_fwd_peak_mib"] = peak_mib(fwd)
                r[f"ours_{tag}_fwd_bwd_peak_mib"] = peak_mib(fwd_bwd(f, (q, k, v), dout))
                r[f"ours_{tag}_fwd_x_floor"] = r[f"ours_{tag}_fwd_ms"] / floor_fwd_ms
                r[f"ours_{tag}_fwd_bwd_x_floor"] = r[f"ours_{tag}_fwd_bwd_ms"] / floor_fb_ms
                r[f"ours_{tag}_fwd_GBps"] = 4 * n_elem * esize / (r[f"ours_{tag}_fwd_ms"] * 1e-3) / 1e9
            for name, fn in (("fla_chunk", chunk_fla), ("fla_fused_chunk", fused_fla)):
                if fn is None or (fla_dims is not None and D not in fla_dims):
                    continue
                if name == "fla_fused_chunk" and T not in (65536, 96):
                    continue  # fused_chunk at the headline length only (its autotuning costs minutes)
                try:
                    prepare, call, _ = fla_caller(fn)
                    qf, kf, vf = (prepare(t.detach()).requires_grad_() for t in (q, k, v))
                    dof = prepare(dout)
                    for norm in (True, False):
                        key = f"{name}_{'norm' if norm else 'num'}"
                        fl = (lambda n: lambda a, b, c: call(a, b, c, n))(norm)
                        if first:
                            r[f"{key}_first_call_fwd_bwd_s"] = first_call_s(fwd_bwd(fl, (qf, kf, vf), dof))
                        with torch.no_grad():
                            r[f"{key}_fwd_ms"] = median_ms(lambda: fl(qf, kf, vf))
                        r[f"{key}_fwd_bwd_ms"] = median_ms(fwd_bwd(fl, (qf, kf, vf), dof))
                    del qf, kf, vf, dof
                except Exception as e:  # noqa: BLE001 - report and go on
                    r[f"{name}_error"] = f"{type(e).__name__}: {e}"
                    log(f"  {name} failed at T={T} D={D}: {r[f'{name}_error']}")
            if DEV == "cuda":
                try:
                    with torch.no_grad():
                        r["sdpa_flash_causal_fwd_ms"] = median_ms(lambda: sdpa_flash_causal(q, k, v))
                    r["sdpa_flash_causal_fwd_bwd_ms"] = median_ms(fwd_bwd(sdpa_flash_causal, (q, k, v), dout))
                except Exception as e:  # noqa: BLE001
                    r["sdpa_error"] = f"{type(e).__name__}: {e}"
            for key in ("fla_chunk_norm_fwd_ms", "fla_chunk_num_fwd_ms", "sdpa_flash_causal_fwd_ms"):
                if key in r:
                    r[f"ours_causal_speedup_vs_{key[:-7]}"] = r[key] / r["ours_causal_fwd_ms"]
            rows.append(r)
            log(f"  D={D:3d} T={T:6d} B={B:3d}: ours causal fwd {r['ours_causal_fwd_ms']:.3f} ms "
                f"(x{r['ours_causal_fwd_x_floor']:.1f} floor), full fwd {r['ours_full_fwd_ms']:.3f} ms "
                f"(x{r['ours_full_fwd_x_floor']:.1f}); fla chunk {r.get('fla_chunk_norm_fwd_ms', float('nan')):.3f} ms; "
                f"sdpa {r.get('sdpa_flash_causal_fwd_ms', float('nan')):.3f} ms")
            del q, k, v, dout
            if DEV == "cuda":
                torch.cuda.empty_cache()
    return rows, skipped


def crossover(rows, D):
    """Smallest T at which ours (causal fwd) beats SDPA flash causal fwd, for head dim D."""
    for r in sorted((r for r in rows if r["D"] == D), key=lambda r: r["T"]):
        if "sdpa_flash_causal_fwd_ms" in r and r["ours_causal_fwd_ms"] < r["sdpa_flash_causal_fwd_ms"]:
            return r["T"]
    return None


# ----------------------------------------------------------------------------------- output
def print_table(result):
    nan = float("nan")
    log("")
    log(f"Linear attention on {result['device']['name']} (torch {result['versions']['torch']}, triton "
        f"{result['versions']['triton']}, fla {result['fla']['version']}); copy {result['copy_TBps']:.2f} TB/s; "
        f"B*T={TOKENS} H={HEADS}, bf16, elu+1 normalised; times in ms (median)")
    hdr = (f"{'D':>4s} {'T':>6s} {'causal':>7s} {'c fwd+bwd':>9s} {'full':>7s} {'f fwd+bwd':>9s} "
           f"{'floor':>6s} {'x floor':>7s} {'fla':>7s} {'fla f+b':>8s} {'sdpa':>8s} {'sdpa f+b':>9s} {'peak MB':>8s}")
    log(hdr)
    log("-" * len(hdr))
    for r in result["timings"]:
        log(f"{r['D']:4d} {r['T']:6d} {r['ours_causal_fwd_ms']:7.3f} {r['ours_causal_fwd_bwd_ms']:9.3f} "
            f"{r['ours_full_fwd_ms']:7.3f} {r['ours_full_fwd_bwd_ms']:9.3f} {r['floor_fwd_ms']:6.3f} "
            f"{r['ours_causal_fwd_x_floor']:7.1f} {r.get('fla_chunk_norm_fwd_ms', nan):7.3f} "
            f"{r.get('fla_chunk_norm_fwd_bwd_ms', nan):8.3f} {r.get('sdpa_flash_causal_fwd_ms', nan):8.3f} "
            f"{r.get('sdpa_flash_causal_fwd_bwd_ms', nan):9.3f} "
            f"{r.get('ours_causal_fwd_bwd_peak_mib') or nan:8.0f}")
    for D, T in result.get("crossover_T", {}).items():
        log(f"crossover vs SDPA flash causal (fwd), D={D}: T >= {T}")
    ok = all(c.get("ok", False) for c in result["correctness"])
    log(f"correctness: {'ok' if ok else 'FAILED (see JSON)'}; skipped shapes: {len(result['skipped'])}")
    head = [r for r in result["timings"] if r["T"] == 65536 and r["D"] == 128]
    if head:
        h = head[0]
        log(f"headline B1 T65536 H16 D128 causal fwd: {h['ours_causal_fwd_ms']:.3f} ms "
            f"(target <= 1.4 ms; fla anchor 2.74 ms; same-run fla {h.get('fla_chunk_norm_fwd_ms', nan):.3f} ms)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="D=128 and T in {65536, 4096} only")
    ap.add_argument("--out", default=None,
                    help="JSON path (default benchmarks/results/attention_linear-<gpu>-<date>.json)")
    ap.add_argument("--budget", type=float, default=225.0,
                    help="seconds after which no new shape is started (default 225)")
    ap.add_argument("--smoke", action="store_true",
                    help="CPU dry run under TRITON_INTERPRET=1 with tiny sizes (numbers meaningless)")
    args = ap.parse_args(argv)
    result = run(args.quick, args.smoke, args.budget)
    result["args"] = vars(args)
    out = args.out or default_out("attention_linear", result["device"]["name"])
    write_json_atomic(out, result)
    print_table(result)
    log(f"wrote {out} ({result['total_seconds']:.0f} s)")
    return result


def run(quick, smoke, budget, lengths=None, fla_dims=None, dims=None):
    """Bandwidth, correctness and timings in one process; the result dict of the JSON file."""
    global DEV
    DEV = check_mode("benchmarks/attention_linear.py", smoke)
    t_start = time.perf_counter()
    device = device_facts(DEV)
    dims = (32,) if smoke else dims or ((128,) if quick else DIMS)
    lengths = (96, 64) if smoke else lengths or ((65536, 4096) if quick else LENGTHS)
    fla_fns = load_fla()
    result = dict(
        benchmark="benchmarks/attention_linear.py", date=now(), device=device, versions=versions(),
        fla=dict(version=fla_fns[2], note=fla_fns[3]),
        notes=[
            "ours: kernelkit_gpu.linear_attention(feature_map='elu+1', normalize=True), fused map",
            "fla: chunk_linear_attn / fused_chunk_linear_attn on raw q, k (no feature map; its default "
            "scale 1/sqrt(D)); '_norm' uses its normalize=True (torch cumsum normaliser), '_num' False",
            "sdpa: torch.nn.functional.scaled_dot_product_attention(is_causal=True), flash backend",
            "floor: bytes of q, k, v, o (fwd) or q, k, v, o, dout, o, dq, dk, dv (fwd+bwd) at the copy "
            "bandwidth measured in this run",
            "autotuning happens at the first (largest) T of each D; first_call_* are those times",
        ],
    )
    log(f"== {device['name']}; fla: {fla_fns[2] or fla_fns[3]}")
    log("== copy bandwidth")
    copy_Bps = _copy_bandwidth(DEV)
    result["copy_TBps"] = copy_Bps / 1e12
    log(f"  {result['copy_TBps']:.2f} TB/s (read + write)")
    log("== correctness")
    try:
        result["correctness"] = part_correctness(fla_fns, smoke)
    except Exception as e:  # noqa: BLE001 - record, still time
        result["correctness"] = [dict(ok=False, error=traceback.format_exc())]
        log(f"  correctness check raised {type(e).__name__}: {e}")
    log("== timings")
    result["timings"], result["skipped"] = part_timings(dims, lengths, copy_Bps, fla_fns, budget,
                                                        t_start, smoke, fla_dims)
    result["crossover_T"] = {str(D): crossover(result["timings"], D) for D in dims}
    result["total_seconds"] = time.perf_counter() - t_start
    return result


if __name__ == "__main__":
    main()
