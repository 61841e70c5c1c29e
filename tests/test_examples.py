"""Every script in examples/ runs to the end on the CPU, at small sizes (each takes its size from
the command line; the defaults are the sizes its docstring times)."""

import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: script -> (arguments for a small run, a line its output must contain)
SMALL_RUNS = {
    "sklearn_quickstart.py": ([], "test accuracy"),
    "kernel_ridge.py": (["400"], "kernelkit nystrom"),
    "kernel_ridge_million.py": (["2000", "200"], "n = 2000: "),  # progress bar: test below
    "compare_attention.py": (["{tmp}", "32"], "wrote "),
    "svm_large.py": (["400"], "dual objective"),
}


def test_every_example_has_a_small_run():
    assert sorted(SMALL_RUNS) == sorted(p.name for p in (ROOT / "examples").glob("*.py"))


@pytest.mark.subprocess
@pytest.mark.parametrize("script", sorted(SMALL_RUNS))
def test_example_runs(script, tmp_path):
    args, expected = SMALL_RUNS[script]
    env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), *(a.format(tmp=tmp_path) for a in args)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert expected in proc.stdout, proc.stdout[-3000:]


@pytest.mark.subprocess
def test_kernel_ridge_million_picks_a_cpu_size_and_shows_progress(tmp_path):
    """Without a GPU and without arguments the script says at once what it will fit, a size a CPU
    manages (it used to fit 10^6 points silently for minutes); a small run shows the CG progress
    bar. The default run itself is stopped after its first line."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")
    script = str(ROOT / "examples" / "kernel_ridge_million.py")
    proc = subprocess.Popen([sys.executable, script], env=env, cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        first = proc.stdout.readline() if ready else ""
    finally:
        proc.kill()
        proc.wait()
    assert first == "CPU: n = 10000, M = 1000 landmarks\n"
    small = subprocess.run([sys.executable, script, "2000", "200"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert small.returncode == 0, small.stderr[-3000:]
    # the bar counts digits of tol gained, not iterations
    assert "KernelRidge (nystrom)" in small.stderr and "/4.0 digits" in small.stderr
    assert "residual" in small.stderr
