"""Bigger than the GPU: ``kernelkit gram --device cuda --out K.npy`` at N = 100 000 (40 GB float32).

Run on the GPU machine (a few minutes; needs N² · 4 bytes of free disk)::

    python benchmarks/gram_stream.py [--n 100000] [--d 64] [--dir /tmp/kernelkit-stream] [--out PATH]

1. writes X (N, D) float32, N(0, 1), seeded, to ``--dir``;
2. runs the command line exactly as a user would (``python -m kernelkit gram X.npy --device cuda
   --out K.npy --progress``), timing it and polling ``nvidia-smi`` for the GPU memory in use;
3. checks the result: a complete ``.npy`` of shape (N, N) float32 and no temporary file left;
   sampled rows against the float64 reference (``kernelkit_math``), exact symmetry and the exact
   diagonal on sampled entries, no NaN;
4. deletes K.npy (unless ``--keep``) and writes the JSON (``benchmarks/results/``), atomically.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
from _common import ROOT, default_out, device_facts, log, now, versions, write_json_atomic

from kernelkit_math.registry import get_kernel


def gpu_memory_poller(samples, stop, period=0.5):
    """Append the GPU memory in use (MiB, from nvidia-smi) every ``period`` s until ``stop``."""
    while not stop.is_set():
        try:
            text = subprocess.run(
                ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=10).stdout
            samples.append(float(text.split()[0]))
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            pass
        stop.wait(period)


def check_result(path, X, gamma, rng, n_rows=32):
    """Sampled accuracy, symmetry, diagonal and NaN checks of the written matrix."""
    n = X.shape[0]
    K = np.load(path, mmap_mode="r")
    res = dict(shape=list(K.shape), dtype=str(K.dtype))
    rows = np.sort(rng.choice(n, size=min(n_rows, n), replace=False))
    cols = np.sort(rng.choice(n, size=min(n_rows, n), replace=False))
    block = np.asarray(K[rows], dtype=np.float64)
    ref = get_kernel("rbf").value(X[rows].astype(np.float64), X.astype(np.float64), gamma=gamma)
    res["sampled_rows"] = int(len(rows))
    res["rows_rel_fro_error"] = float(np.linalg.norm(block - ref) / np.linalg.norm(ref))
    res["rows_max_abs_error"] = float(np.abs(block - ref).max())
    res["rows_any_nan"] = bool(np.isnan(block).any())
    res["exactly_symmetric_on_samples"] = bool(
        np.array_equal(np.asarray(K[rows][:, cols]), np.asarray(K[cols][:, rows]).T))
    res["diagonal_exact_on_samples"] = bool(np.all(np.asarray(K[rows, rows]) == 1.0))
    last = np.asarray(K[n - 1])  # the last row is written by the last block
    res["last_row_any_nan"] = bool(np.isnan(last).any())
    del K
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--dir", default="/tmp/kernelkit-stream")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--keep", action="store_true", help="keep K.npy")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/...)")
    args = ap.parse_args(argv)
    os.makedirs(args.dir, exist_ok=True)
    n, d = args.n, args.d
    need = n * n * 4 + n * d * 4
    free = shutil.disk_usage(args.dir).free
    if free < 1.05 * need:
        raise SystemExit(f"--dir {args.dir}: {free / 1e9:.1f} GB free, {need / 1e9:.1f} GB needed")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, d)).astype(np.float32)
    x_path, k_path = os.path.join(args.dir, "X.npy"), os.path.join(args.dir, "K.npy")
    np.save(x_path, X)
    gamma = 1.0 / d
    cmd = [sys.executable, "-m", "kernelkit", "gram", x_path, "--kernel", "rbf",
           "--param", f"gamma={gamma!r}", "--device", args.device, "--out", k_path, "--progress"]
    log("$ " + " ".join(cmd))
    samples, stop = [], threading.Event()
    poller = threading.Thread(target=gpu_memory_poller, args=(samples, stop), daemon=True)
    poller.start()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT}, cwd=ROOT)
    seconds = time.perf_counter() - t0
    stop.set()
    poller.join()
    log(proc.stdout.strip())
    log(proc.stderr.strip()[-600:])
    result = dict(
        benchmark="benchmarks/gram_stream.py", date=now(), args=vars(args),
        device=device_facts(args.device if args.device == "cuda" else "cpu"), versions=versions(),
        command=" ".join(cmd[1:]), exit_code=proc.returncode, cli_stdout=proc.stdout.strip(),
        seconds=seconds,
        output_GB=n * n * 4 / 1e9, written_GBps=n * n * 4 / 1e9 / seconds,
        gpu_memory_used_MiB_max=max(samples) if samples else None,
        gpu_memory_used_MiB_samples=len(samples),
        files_left=sorted(os.listdir(args.dir)),
    )
    if proc.returncode == 0:
        result["check"] = check_result(k_path, X, gamma, rng)
    if not args.keep and os.path.exists(k_path):
        os.remove(k_path)
    os.remove(x_path)
    out = args.out or default_out("gram-stream", result["device"]["name"])
    write_json_atomic(out, result)
    log(f"N={n} D={d}: exit {proc.returncode}, {seconds:.1f} s ({result['written_GBps']:.2f} GB/s "
        f"of output), GPU memory in use at most {result['gpu_memory_used_MiB_max']} MiB; "
        f"files {result['files_left']}; check {result.get('check')}")
    log(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
