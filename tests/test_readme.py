"""The README and docs/ tell the truth: the kernel table is the one the registry and the classes
generate, every Python example runs on a CPU, every local link and figure resolves, the
benchmark figures that looked contradictory are reconciled by the JSON they come from, and the
README's figures are values of the JSON it links. The README stays short (150 lines, no paragraph
over 8 lines), forces no version pins on a user, and names the LICENSE that pyproject.toml
declares."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RESULTS = ROOT / "benchmarks" / "results"


def _kernel_table_module():
    spec = importlib.util.spec_from_file_location("kernel_table", ROOT / "docs" / "kernel_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kernel_table_is_generated_from_the_registry_and_classes():
    kt = _kernel_table_module()
    in_guide = kt.table_in_guide(kt.GUIDE.read_text(encoding="utf-8"))
    assert in_guide == kt.kernel_table(), "run: python docs/kernel_table.py --write"


def test_kernel_table_shows_the_class_defaults_and_conversions():
    """The rows that used to be wrong: class defaults that differ from the functions' and the
    Laplacian's length-scale conversion (checked against the classes by calling them)."""
    import numpy as np

    import kernelkit

    rows = {line.split("|")[1].strip(" `"): line for line in _kernel_table_module().kernel_table()
            .splitlines()[2:]}
    assert "| degree=3; gamma=1; coef0=1 |" in rows["polynomial"]
    assert "| gamma=1; coef0=1 |" in rows["sigmoid"]
    assert "| scale=1 |" in rows["exponential"]
    assert "(gamma = 1 / length_scale)" in rows["laplacian"]
    assert "(gamma = 1 / (2 length_scale**2))" in rows["rbf"]
    X = np.random.default_rng(0).normal(size=(5, 3))
    np.testing.assert_allclose(kernelkit.Polynomial()(X), kernelkit.polynomial_kernel(X, gamma=1.0),
                               rtol=1e-14, atol=0)  # same float64 formula: rounding only
    np.testing.assert_allclose(kernelkit.Laplacian(length_scale=2.0)(X),
                               kernelkit.laplacian_kernel(X, gamma=0.5), rtol=1e-14, atol=0)


def _python_blocks(path):
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


#: Runs each block in a fresh namespace and prints one line per block, so a failure names it.
_RUNNER = r"""
import sys, traceback
blocks = eval(sys.stdin.read())
for i, code in enumerate(blocks):
    try:
        exec(compile(code, f"block {i}", "exec"), {"__name__": "__main__"})
    except Exception:
        print(f"BLOCK {i} FAILED:\n{code}\n{traceback.format_exc()}")
        sys.exit(1)
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("path", [p for p in DOCS if _python_blocks(p)], ids=lambda p: p.name)
def test_python_examples_run_on_a_cpu(path):
    """As a user runs them: a fresh Python, no Triton interpreter switched on, no GPU."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-c", _RUNNER], input=repr(_python_blocks(path)),
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]


def _anchor(heading):
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_local_links_and_anchors_resolve(path):
    text = path.read_text(encoding="utf-8")
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md":
            headings = re.findall(r"^#+ (.*)$", dest.read_text(encoding="utf-8"), flags=re.M)
            if anchor not in {_anchor(h) for h in headings}:
                broken.append(target)
    assert not broken, f"{path.name}: broken links {broken}"


def test_every_figure_in_docs_is_shown_somewhere():
    shown = "".join(p.read_text(encoding="utf-8") for p in DOCS)
    figures = [p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.png")]
    assert figures
    assert [f for f in figures if f not in shown] == []


@pytest.mark.parametrize("phrase", ["our CPU machines", "carried as a wheel", "issue-11",
                                    "Not reached"])
def test_no_team_internal_wording(phrase):
    assert [p.name for p in DOCS if phrase in p.read_text(encoding="utf-8")] == []


def test_linear_attention_memory_figures_reconcile():
    """The benchmark table's linear fwd+bwd peak (394 MiB at causal T = 65536) and the sweep's
    (1161.5 MiB) differ by exactly the q, k, v gradients (3 B H T D bfloat16 values) that the
    benchmark frees inside its measured call, as docs/benchmarks.md explains."""
    bench = json.loads((RESULTS / "attention-nvidia-h200-2026-11-22.json").read_text())
    sweep = json.loads((RESULTS / "attention-sweep-fwdbwd-nvidia-h200-2026-11-22.json").read_text())
    assert sweep["meta"]["causal"] and sweep["meta"]["backward"] and sweep["meta"]["d"] == 128
    swept = {r["T"]: r["peak_bytes"] / 2**20 for r in sweep["rows"] if r["method"] == "elu+1"}
    rows = [r for r in bench["linear"]["timings"] if r["D"] == 128 and r["T"] in swept]
    assert len(rows) == len(swept) == 8
    for r in rows:
        grads_mib = 3 * r["B"] * r["H"] * r["T"] * r["D"] * 2 / 2**20
        assert grads_mib == 768
        # both are exact byte counts of the same allocations: equal to the byte
        assert r["ours_causal_fwd_bwd_peak_mib"] + grads_mib == swept[r["T"]], r["T"]
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert "394 + 768 = 1162 MiB" in text and "1161.5 MiB" in text


# ------------------------------------------------------------------ the README's shape (issue 38)
def _prose_paragraphs(text):
    """Runs of consecutive prose lines: code blocks, tables and headings excluded."""
    paragraphs, current, in_code = [], [], False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or line.startswith(("```", "|", "#")) or not line.strip():
            if current:
                paragraphs.append(current)
            current = []
        else:
            current.append(line)
    return paragraphs + ([current] if current else [])


def test_readme_is_short():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    assert [p[0] for p in _prose_paragraphs(text) if len(p) > 8] == []


def test_readme_forces_no_version_pins():
    """The CI pins are CONTRIBUTING.md's business: a user's install takes kernelkit's own ranges."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    installs = [line for line in readme.splitlines() if "pip install" in line]
    assert installs
    assert [line for line in installs if "constraints.txt" in line or "==" in line] == []
    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    assert 'pip install -c .ci/constraints.txt -e ".[test,plot,zoo]"' in contributing


def test_license_is_the_one_pyproject_declares():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^license = \{ text = "BSD-3-Clause" \}$', pyproject, flags=re.M)
    text = " ".join((ROOT / "LICENSE").read_text(encoding="utf-8").split())
    assert text.startswith("BSD 3-Clause License Copyright (c) 2026, the kernelkit developers")
    clauses = ["1. Redistributions of source code must retain the above copyright notice",
               "2. Redistributions in binary form must reproduce the above copyright notice",
               "3. Neither the name of the copyright holder nor the names of its contributors may "
               "be used to endorse or promote products derived from this software without "
               "specific prior written permission.",
               "EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE."]
    assert [c for c in clauses if c not in text] == []
    assert "(LICENSE)" in (ROOT / "README.md").read_text(encoding="utf-8")


def _numbers(obj):
    if isinstance(obj, dict):
        for value in obj.values():
            yield from _numbers(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _numbers(value)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield obj


def test_readme_figures_come_from_the_json_they_link():
    """Every measured figure with decimals (or in TFLOP/s) in a README table row that links a
    results JSON is a value of that JSON, rounded as shown (ratios, "1.44x", are left out: they
    are quotients)."""
    rows = [line for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("|") and "benchmarks/results/" in line]
    checked, missing = 0, []
    for row in rows:
        paths = re.findall(r"\]\((benchmarks/results/[\w.-]+\.json)\)", row)
        assert len(paths) == 1, row
        values = list(_numbers(json.loads((ROOT / paths[0]).read_text(encoding="utf-8"))))
        decimals = re.findall(r"(?<![\w.])(\d+\.\d+)(?![\d.]*x)(?![\w.])", row)
        for shown in decimals + re.findall(r"(\d+) TFLOP/s", row):
            digits = len(shown.partition(".")[2])
            checked += 1
            if not any(round(v, digits) == float(shown) for v in values):
                missing.append((shown, paths[0]))
    assert checked >= 14 and missing == []
