"""Helpers shared by the benchmark scripts: timing, memory, device facts and atomic JSON output.

Every script runs its baseline in the same process as kernelkit, times with
``triton.testing.do_bench`` (median) on the GPU, and writes one JSON file atomically (a run cut
short keeps the last complete file). ``--smoke`` runs use the CPU, where a "timing" is one
wall-clock call that only proves the code path runs.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def log(*args):
    print(*args, flush=True)


def sync(dev):
    if dev == "cuda":
        import torch

        torch.cuda.synchronize()


def median_ms(fn, dev, *, warmup=25, rep=100, grad_to_none=None):
    """Median milliseconds of ``fn`` (``do_bench``); on the CPU one wall-clock call."""
    if dev != "cuda":
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=warmup, rep=rep, grad_to_none=grad_to_none,
                          return_mode="median"))


def wall_s(fn, dev, runs=1):
    """Median wall-clock seconds of ``runs`` synchronised calls (first calls, long products)."""
    times = []
    for _ in range(runs):
        sync(dev)
        t = time.perf_counter()
        fn()
        sync(dev)
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2]


def peak_mib(fn, dev):
    """Peak GPU memory of one call above what was allocated before it (MiB); None on the CPU."""
    if dev != "cuda":
        return None
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def copy_bandwidth(dev):
    """Device-to-device copy of 1 GiB: bytes read + written per second (as ``shared/anchors``)."""
    import torch

    n = 1 << 28 if dev == "cuda" else 1 << 16
    a = torch.empty(n, dtype=torch.float32, device=dev).normal_()
    b = torch.empty_like(a)
    ms = median_ms(lambda: b.copy_(a), dev)
    del a, b
    return 2 * n * 4 / (ms * 1e-3)


def device_facts(dev):
    """Name, memory, SM count and L2 size of the GPU (placeholders for a ``--smoke`` run)."""
    import torch

    if dev != "cuda":
        return dict(name="cpu-interpreter-smoke", total_memory_GB=8.0, sm_count=0, L2_MB=1.0)
    props = torch.cuda.get_device_properties(0)
    return dict(name=props.name, total_memory_GB=props.total_memory / 1e9,
                sm_count=props.multi_processor_count,
                L2_MB=getattr(props, "L2_cache_size", 50 << 20) / 2**20)


def versions():
    """torch, triton (its installed distribution's version, read without importing it; None
    where it is not installed), Python and CUDA versions."""
    import importlib.metadata

    import torch

    try:
        triton = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton = None
    return dict(torch=torch.__version__, triton=triton, python=platform.python_version(),
                cuda=torch.version.cuda)


def check_mode(script, smoke):
    """The device a run uses: "cuda", or "cpu" for ``--smoke`` under the Triton interpreter."""
    if smoke:
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise SystemExit(f"{script} --smoke runs the Triton interpreter: set TRITON_INTERPRET=1")
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        raise SystemExit(f"{script} needs a CUDA GPU (or --smoke for the CPU interpreter)")
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("unset TRITON_INTERPRET: the benchmark times compiled kernels")
    return "cuda"


def default_out(benchmark, device_name):
    """``benchmarks/results/<benchmark>-<gpu>-<date>.json``."""
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    return os.path.join(ROOT, "benchmarks", "results",
                        f"{benchmark}-{slug}-{_dt.date.today().isoformat()}.json")


def now():
    return _dt.datetime.now().isoformat(timespec="seconds")


def write_json_atomic(path, data):
    """Write ``data`` as JSON to a temporary file beside ``path``, then rename it onto ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".bench-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, default=str)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
