import json, os, sys, time
import torch, triton
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import kernelkit_gpu
from kernelkit_gpu.pairwise import matvec_fused as mf
from kernel_ridge import higgs_like
C = triton.Config
n = 100000
out = []
def bench(x, v, cfg, tag, ref, rows):
    mf._default_config = (lambda ops, vec, block_r=64, c=cfg: c) if cfg is not None else orig
    try:
        f = lambda: kernelkit_gpu.kernel_matvec(x, x, v, "rbf", gamma=1 / 28)
        o = f(); torch.cuda.synchronize(); ts = []
        for _ in range(3):
            t = time.perf_counter(); o = f(); torch.cuda.synchronize(); ts.append(time.perf_counter() - t)
        o = o[:, None] if o.ndim == 1 else o
        err = float((o[:rows].double() - ref[:, :o.shape[1]]).norm() / ref[:, :o.shape[1]].norm())
        rec = dict(tag=tag, s=min(ts), rel_err=err)
    except Exception as e:
        rec = dict(tag=tag, error=repr(e)[:200])
    out.append(rec); print(rec, flush=True)
orig = mf._default_config
for d in (28, 64):
    rng = torch.Generator(device="cuda").manual_seed(0)
    if d == 28:
        X = torch.tensor(higgs_like(n, 2, 0)[0], device="cuda")
    else:
        X = torch.randn(n, d, device="cuda", dtype=torch.float64, generator=rng)
    v = torch.randn(n, 128, device="cuda", generator=rng, dtype=torch.float64)
    rows = 1000
    ref = sum(torch.exp(-torch.cdist(X[:rows], X[i:i + 20000]) ** 2 / 28) @ v[i:i + 20000]
              for i in range(0, n, 20000))
    x32, v32 = X.float(), v.float()
    for cfg in [None, C(dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32), num_warps=8, num_stages=2),
                C(dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32), num_warps=8, num_stages=3),
                C(dict(BLOCK_M=256, BLOCK_N=64, BLOCK_K=32), num_warps=8, num_stages=2),
                C(dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=32), num_warps=8, num_stages=2),
                C(dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=32), num_warps=8, num_stages=2)]:
        bench(x32, v32, cfg, f"f32 d{d} R128 {cfg}", ref, rows)
    for r in (16, 1, 2):
        bench(x32, v32[:, :r] if r > 1 else v32[:, 0], None, f"f32 d{d} R{r} default", ref, rows)
    if d == 28:
        for cfg in [None, C(dict(BLOCK_M=64, BLOCK_N=32, BLOCK_K=32), num_warps=4, num_stages=3),
                    C(dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32), num_warps=4, num_stages=3),
                    C(dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=32), num_warps=8, num_stages=3),
                    C(dict(BLOCK_M=128, BLOCK_N=32, BLOCK_K=32), num_warps=8, num_stages=2),
                    C(dict(BLOCK_M=128, BLOCK_N=32, BLOCK_K=16), num_warps=4, num_stages=3),
                    C(dict(BLOCK_M=64, BLOCK_N=32, BLOCK_K=16), num_warps=4, num_stages=4)]:
            bench(X, v[:, :64], cfg, f"f64 d{d} R64 {cfg}", ref, rows)
json.dump(out, open(os.path.join(os.environ["OUT"], "kv_sweep2.json"), "w"), indent=1)
