"""Larger than memory on the CPU: ``kernelkit gram X.npy --out K.npy`` at N = 60 000, D = 10.

Run on the 2-core, 24 GB CPU machine (a few minutes; needs N² · 4 bytes of free disk, 14.4 GB)::

    python benchmarks/gram_writer.py [--n 60000] [--d 10] [--dir DIR] [--disk-gib 4] [--out PATH]

1. measures the disk's own sequential write speed in ``--dir`` (``--disk-gib`` GiB written in
   64 MiB chunks, then ``fsync``): the baseline;
2. writes X (N, D) float32, N(0, 1), seeded, and runs the command line exactly as a user would
   (``python -m kernelkit gram X.npy --kernel rbf --device cpu --out K.npy``), timing it and
   recording its user and system CPU time (the issue's old writer spent 91 % in the kernel);
3. checks the result: a complete (N, N) float32 ``.npy``, no temporary file left, sampled rows
   against the float64 reference (``kernelkit_math``), exact symmetry of the sampled rows and
   columns, the exact diagonal;
4. deletes K.npy (unless ``--keep``) and writes the JSON (``benchmarks/results/``), atomically:
   rows/s, GB/s, the disk's GB/s and the ratio.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from _common import ROOT, log, now, versions, write_json_atomic

from kernelkit_math.registry import get_kernel

CHUNK = 64 * 2**20


def disk_write_speed(directory, gib):
    """Bytes per second of a sequential ``gib`` GiB write in ``directory``, fsync included."""
    path = os.path.join(directory, "disk-speed.bin")
    buf = np.random.default_rng(0).integers(0, 256, CHUNK, dtype=np.uint8).tobytes()
    n_chunks = int(gib * 2**30) // CHUNK
    t0 = time.perf_counter()
    try:
        with open(path, "wb") as f:
            for _ in range(n_chunks):
                f.write(buf)
            f.flush()
            os.fsync(f.fileno())
        seconds = time.perf_counter() - t0
    finally:
        os.remove(path)
    return n_chunks * CHUNK / seconds, seconds


def run_cli(x_path, k_path):
    """Run the command line; (wall seconds, user seconds, system seconds, stderr tail)."""
    cmd = [sys.executable, "-m", "kernelkit", "gram", x_path, "--kernel", "rbf",
           "--device", "cpu", "--out", k_path, "--no-progress"]
    log("running:", " ".join(cmd))
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    out, err = proc.stdout.read().decode(), proc.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"kernelkit gram failed ({status}):\n{out}\n{err}")
    log(out.strip())
    return wall, usage.ru_utime, usage.ru_stime


def check_result(path, X, rng, n_samples=16):
    """Sampled accuracy, symmetry and diagonal checks of the written matrix."""
    n = X.shape[0]
    K = np.load(path, mmap_mode="r")
    rows = np.sort(rng.choice(n, size=min(n_samples, n), replace=False))
    spec = get_kernel("rbf")
    exact = spec.value(X[rows].astype(np.float64), X.astype(np.float64), gamma=1 / X.shape[1])
    got = np.asarray(K[rows])
    return {
        "shape": list(K.shape),
        "dtype": str(K.dtype),
        "sampled_rows": len(rows),
        "max_abs_error_vs_float64": float(np.max(np.abs(got - exact))),
        "rows_equal_columns_bitwise": bool(np.array_equal(got, np.asarray(K[:, rows]).T)),
        "diagonal_exact": bool(np.all(K[rows, rows] == 1.0)),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=60000)
    p.add_argument("--d", type=int, default=10)
    p.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "kernelkit-gram-writer"))
    p.add_argument("--disk-gib", type=float, default=4.0)
    p.add_argument("--keep", action="store_true", help="keep K.npy")
    p.add_argument("--out", default=os.path.join(
        ROOT, "benchmarks", "results", f"gram-writer-cpu-{now()[:10]}.json"))
    args = p.parse_args(argv)
    os.makedirs(args.dir, exist_ok=True)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((args.n, args.d)).astype(np.float32)
    x_path, k_path = os.path.join(args.dir, "X.npy"), os.path.join(args.dir, "K.npy")
    np.save(x_path, X)
    file_bytes = args.n * args.n * 4
    log(f"N={args.n} D={args.d} float32: K is {file_bytes / 1e9:.1f} GB; "
        f"free {shutil.disk_usage(args.dir).free / 1e9:.1f} GB")

    disk_bps, disk_s = disk_write_speed(args.dir, args.disk_gib)
    log(f"disk: {disk_bps / 1e9:.3f} GB/s sequential write with fsync ({disk_s:.1f} s)")
    try:
        wall, user, system = run_cli(x_path, k_path)
        leftovers = sorted(f for f in os.listdir(args.dir) if f.endswith(".tmp"))
        checks = check_result(k_path, X, rng)
        checks["temporary_files_left"] = leftovers
    finally:
        if not args.keep and os.path.exists(k_path):
            os.remove(k_path)
        os.remove(x_path)
    gbps = file_bytes / wall / 1e9
    result = {
        "benchmark": "gram-writer",
        "command": "python -m kernelkit gram X.npy --kernel rbf --device cpu --out K.npy",
        "timestamp": now(),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "memory_gb": round(os.sysconf("SC_PAGE_SIZE")
                                       * os.sysconf("SC_PHYS_PAGES") / 1e9, 1)},
        "versions": versions(),
        "n": args.n, "d": args.d, "dtype": "float32", "file_bytes": file_bytes,
        "seconds": wall, "user_s": user, "system_s": system,
        "rows_per_s": args.n / wall, "gb_per_s": gbps,
        "disk_baseline": {"gb_per_s": disk_bps / 1e9, "bytes": int(args.disk_gib * 2**30),
                          "seconds": disk_s, "how": "sequential 64 MiB writes, then fsync"},
        "ratio_to_disk": gbps / (disk_bps / 1e9),
        "checks": checks,
    }
    log(f"gram: {wall:.1f} s ({user:.1f} s user, {system:.1f} s system), "
        f"{result['rows_per_s']:.0f} rows/s, {gbps:.3f} GB/s = {result['ratio_to_disk']:.2f} x "
        f"the disk's {disk_bps / 1e9:.3f} GB/s; checks {checks}")
    write_json_atomic(args.out, result)
    log("wrote", args.out)


if __name__ == "__main__":
    main()
