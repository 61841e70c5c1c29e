"""The kernelkit command line (the kernelkit.cli package) and the demo sections (kernelkit.cli.demo)."""

import io
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy
import sklearn

from kernelkit.cli import demo
from kernelkit.cli import CLIError, parse_param
from kernelkit_math import get_kernel
from tests.cli_helpers import assert_clean_error, run_main
from tests.conftest import TOL
from tests.test_gram import device_copy

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def files(tmp_path, rng):
    """X (.npy, 30x3), Y (.csv with a header, 11x3) and the arrays they hold."""
    X = rng.standard_normal((30, 3))
    Y = np.round(rng.standard_normal((11, 3)), 6)
    np.save(tmp_path / "X.npy", X)
    lines = ["a,b,c"] + [",".join(repr(float(v)) for v in row) for row in Y]
    (tmp_path / "Y.csv").write_text("\n".join(lines) + "\n")
    return tmp_path, X, Y


# ----------------------------------------------------------------------------- gram command
def test_gram_from_npy(files, capsys):
    d, X, _ = files
    code, out, err = run_main(
        ["gram", d / "X.npy", "--kernel", "rbf", "--param", "gamma=0.5", "--out", d / "K.npy"],
        capsys,
    )
    assert code == 0, err
    assert "wrote" in out and "(30, 30)" in out
    K = np.load(d / "K.npy")
    assert K.dtype == np.float64 and np.array_equal(K, K.T)
    np.testing.assert_allclose(K, get_kernel("rbf").value(X, gamma=0.5), **TOL["float64"])


def test_gram_x_npy_y_csv_with_params(files, capsys):
    d, X, Y = files
    code, _, err = run_main(
        ["gram", d / "X.npy", "--y", d / "Y.csv", "--kernel", "matern", "--param",
         "length_scale=0.5,1,2", "--param", "nu=2.5", "--out", d / "K.npy", "--block-size", "7",
         "--no-progress", "--device", "cpu"],
        capsys,
    )
    assert code == 0, err
    expected = get_kernel("matern").value(X, Y, length_scale=np.array([0.5, 1.0, 2.0]), nu=2.5)
    np.testing.assert_allclose(np.load(d / "K.npy"), expected, **TOL["float64"])


def test_gram_csv_default_kernel_and_int_params(files, capsys):
    d, _, Y = files
    code, _, err = run_main(
        ["gram", d / "Y.csv", "--kernel", "polynomial", "--param", "degree=2", "--param",
         "gamma=1", "--out", d / "P.npy"],
        capsys,
    )
    assert code == 0, err
    expected = get_kernel("polynomial").value(Y, degree=2, gamma=1.0)
    np.testing.assert_allclose(np.load(d / "P.npy"), expected, **TOL["float64"])
    code, _, _ = run_main(["gram", d / "Y.csv", "--out", d / "R.npy"], capsys)
    assert code == 0
    np.testing.assert_allclose(np.load(d / "R.npy"), get_kernel("rbf").value(Y), **TOL["float64"])


def test_gram_float32_npy_gives_float32_file(tmp_path, rng, capsys):
    X = rng.standard_normal((9, 2)).astype(np.float32)
    np.save(tmp_path / "X.npy", X)
    code, out, _ = run_main(["gram", tmp_path / "X.npy", "--out", tmp_path / "K.npy"], capsys)
    assert code == 0 and "float32" in out
    assert np.load(tmp_path / "K.npy").dtype == np.float32


def test_gram_progress_bar_goes_to_stderr(files, capsys):
    d, _, _ = files
    code, out, err = run_main(
        ["gram", d / "X.npy", "--out", d / "K.npy", "--block-size", "4", "--progress"], capsys,
    )
    assert code == 0 and "gram rbf" in err and "gram rbf" not in out


@pytest.mark.parametrize(
    "extra, fragments",
    [
        (["--kernel", "gaussian"], ["unknown kernel 'gaussian'", "rbf"]),
        (["--param", "gamma=abc"], ["gamma=abc", "not a number"]),
        (["--param", "gamma"], ["expected NAME=VALUE"]),
        (["--param", "=3"], ["expected NAME=VALUE"]),
        (["--param", "gamma=1", "--param", "gamma=2"], ["more than once"]),
        (["--param", "length_scale=2"], ["unknown parameter", "length_scale"]),
        (["--param", "gamma=-1"], ["gamma", "> 0"]),
        (["--kernel", "polynomial", "--param", "degree=2.5"], ["degree", "integer"]),
        (["--param", "gamma=1,2"], ["gamma", "2 entries", "3 features"]),
        (["--block-size", "0"], ["block_size"]),
        (["--device", "cuda"], ["cuda"]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) and v and v[0].startswith("--") else None,
)
def test_gram_bad_arguments_exit_2(files, capsys, no_gpu, extra, fragments):
    d, _, _ = files
    code, out, err = run_main(["gram", d / "X.npy", "--out", d / "K.npy", *extra], capsys)
    assert_clean_error(code, err, *fragments)
    assert not (d / "K.npy").exists()
    assert sorted(os.listdir(d)) == ["X.npy", "Y.csv"], "no output or temporary file may remain"


def test_gram_file_errors_exit_2(tmp_path, capsys):
    out = tmp_path / "K.npy"
    code, _, err = run_main(["gram", tmp_path / "missing.npy", "--out", out], capsys)
    assert_clean_error(code, err, "X file", "missing.npy", "does not exist")

    (tmp_path / "bad.csv").write_text("1,2\n3,4,5\n")
    code, _, err = run_main(["gram", tmp_path / "bad.csv", "--out", out], capsys)
    assert_clean_error(code, err, "bad.csv", "line 2", "expected 2")

    (tmp_path / "words.csv").write_text("1,2\nthree,4\n")
    code, _, err = run_main(["gram", tmp_path / "words.csv", "--out", out], capsys)
    assert_clean_error(code, err, "non-numeric value 'three'", "line 2, column 1")

    np.save(tmp_path / "X.npy", np.ones((3, 2)))
    np.save(tmp_path / "Y3.npy", np.ones((3, 3)))
    code, _, err = run_main(["gram", tmp_path / "X.npy", "--y", tmp_path / "Y3.npy", "--out", out], capsys)
    assert_clean_error(code, err, "features")

    code, _, err = run_main(["gram", tmp_path / "X.npy", "--y", tmp_path / "nope.csv", "--out", out], capsys)
    assert_clean_error(code, err, "Y file", "nope.csv")

    np.save(tmp_path / "obj.npy", np.array([[None]], dtype=object), allow_pickle=True)
    code, _, err = run_main(["gram", tmp_path / "obj.npy", "--out", out], capsys)
    assert_clean_error(code, err, "pickled")

    code, _, err = run_main(["gram", tmp_path / "X.npy", "--out", tmp_path / "K.txt"], capsys)
    assert_clean_error(code, err, "--out", ".npy")

    assert not out.exists()


def test_gram_creates_a_missing_output_directory(files, capsys):
    """Issue 21: gram, compare and sweep create a missing output directory (parents included);
    an input error creates nothing."""
    d, X, _ = files
    code, _, err = run_main(["gram", d / "missing.npy", "--out", d / "new" / "K.npy"], capsys)
    assert_clean_error(code, err, "does not exist")
    assert sorted(os.listdir(d)) == ["X.npy", "Y.csv"]
    code, out, err = run_main(["gram", d / "X.npy", "--out", d / "new" / "sub" / "K.npy"], capsys)
    assert code == 0, err
    np.testing.assert_allclose(np.load(d / "new" / "sub" / "K.npy"), get_kernel("rbf").value(X),
                               **TOL["float64"])


@pytest.mark.parametrize("kind", ["a FIFO", "a character device"])
def test_gram_out_link_to_a_non_regular_file_exit_2(files, capsys, kind):
    """Issue 18 E: the FIFO or device behind a --out link was replaced by a regular file."""
    d, _, _ = files
    if kind == "a FIFO":
        os.mkfifo(d / "node")
    else:
        device_copy(d / "node")  # a copy: never a real device (a regression would replace it)
    (d / "K.npy").symlink_to(d / "node")
    code, _, err = run_main(["gram", d / "X.npy", "--out", d / "K.npy"], capsys)
    assert_clean_error(code, err, "--out", "K.npy", f"is {kind}", "not a regular file")
    assert sorted(os.listdir(d)) == ["K.npy", "X.npy", "Y.csv", "node"]
    assert not stat.S_ISREG(os.stat(d / "node").st_mode)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="no /proc file system on this system")
def test_gram_out_on_proc_exit_2(files, capsys):
    """Issue 21: --out /proc/K.npy said "not enough free disk space ... 0 bytes"."""
    d, _, _ = files
    code, _, err = run_main(["gram", d / "X.npy", "--out", "/proc/K.npy"], capsys)
    assert_clean_error(code, err, "--out '/proc/K.npy'", "file system without storage")
    assert "disk space" not in err


def test_gram_truncated_npy_exit_2(tmp_path, capsys):
    """Issue 18 G: a header declaring (10**6, 10**6) on 64 bytes of data gave "out of memory;
    try a smaller --block-size"."""
    with open(tmp_path / "X.npy", "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f8", "fortran_order": False, "shape": (10**6, 10**6)})
        f.write(bytes(64))
    code, _, err = run_main(["gram", tmp_path / "X.npy", "--out", tmp_path / "K.npy"], capsys)
    assert_clean_error(code, err, "X file", "(1000000, 1000000)", "holds only 64 bytes",
                       "truncated or corrupt")


@pytest.mark.parametrize("how", ["same path", "relative path", "symbolic link", "hard link"])
def test_gram_refuses_to_overwrite_an_input(tmp_path, capsys, monkeypatch, how):
    X = np.arange(12.0).reshape(6, 2)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "Y.npy", X[:3])
    before = {name: (tmp_path / name).read_bytes() for name in ("X.npy", "Y.npy")}
    out = {"same path": tmp_path / "X.npy", "relative path": "./sub/../X.npy",
           "symbolic link": tmp_path / "link.npy", "hard link": tmp_path / "hard.npy"}[how]
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.npy").symlink_to(tmp_path / "X.npy")
    os.link(tmp_path / "X.npy", tmp_path / "hard.npy")
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["gram", tmp_path / "X.npy", "--out", out], capsys)
    assert_clean_error(code, err, "--out", "is the input X", "choose another output file")
    code, _, err = run_main(["gram", "Y.npy", "--y", tmp_path / "X.npy", "--out", out], capsys)
    assert_clean_error(code, err, "is the input --y")
    for name, data in before.items():
        assert (tmp_path / name).read_bytes() == data, f"{name} must be untouched"
    assert sorted(os.listdir(tmp_path)) == ["X.npy", "Y.npy", "hard.npy", "link.npy", "sub"]


def test_gram_too_little_disk_space_exit_2(files, capsys, monkeypatch):
    from kernelkit._util import atomic

    d, _, _ = files
    monkeypatch.setattr(atomic, "free_bytes", lambda directory: 1000)
    code, _, err = run_main(["gram", d / "X.npy", "--out", d / "K.npy"], capsys)
    assert_clean_error(code, err, "[Errno 28]", "not enough free disk space", "K.npy",
                       "1000 bytes")
    assert sorted(os.listdir(d)) == ["X.npy", "Y.csv"], "no output or temporary file may remain"


def test_usage_errors_exit_2(capsys, tmp_path):
    code, _, err = run_main(["gram", tmp_path / "X.npy"], capsys)  # --out missing
    assert code == 2 and "--out" in err and "Traceback" not in err
    code, _, err = run_main(["frobnicate"], capsys)
    assert code == 2 and "invalid choice" in err
    code, _, err = run_main(["demo", "--section", "nope"], capsys)
    assert code == 2 and "nope" in err
    code, out, _ = run_main([], capsys)
    assert code == 2 and "kernelkit gram" in out


@pytest.mark.parametrize(
    "text, expected",
    [("gamma=0.5", ("gamma", 0.5)), ("degree=3", ("degree", 3)), (" nu = 2.5 ", ("nu", 2.5)),
     ("gamma=1e-3", ("gamma", 1e-3)), ("length_scale=1,2.5", ("length_scale", [1.0, 2.5]))],
)
def test_parse_param(text, expected):
    name, value = parse_param(text)
    assert (name, value) == expected
    assert type(value) is type(expected[1])


@pytest.mark.parametrize("text", ["gamma", "gamma=", "=1", "1x=2", "gamma=1,,2", "gamma=x"])
def test_parse_param_errors(text):
    with pytest.raises(CLIError, match="--param"):
        parse_param(text)


# ------------------------------------------------------------------------------ info, help
def test_info_prints_versions_and_backends(capsys):
    import kernelkit

    code, out, _ = run_main(["info"], capsys)
    assert code == 0
    for text in [
        f"kernelkit     {kernelkit.__version__}", f"numpy         {np.__version__}",
        f"scipy         {scipy.__version__}", f"scikit-learn  {sklearn.__version__}",
        "python", "torch", "triton", "NumPy (float64 reference)", "Triton interpreter",
        "CUDA GPU", 'device="auto" runs on',
    ]:
        assert text in out, text


def test_info_reports_missing_modules(monkeypatch):
    from kernelkit.cli import info as cli

    real_import = cli.importlib.import_module

    def fake_import(name):
        if name in ("torch", "triton"):
            raise ImportError(name)
        return real_import(name)

    monkeypatch.setattr(cli.importlib, "import_module", fake_import)
    text = "\n".join(cli.info_lines())
    assert "torch         not installed" in text and "triton        not installed" in text
    assert "CUDA GPU                    not available (torch not installed)" in text


@pytest.mark.parametrize("command", [[], ["demo"], ["info"], ["gram"]], ids=lambda c: " ".join(c) or "top")
def test_help(capsys, command):
    code, out, _ = run_main([*command, "--help"], capsys)
    assert code == 0
    assert out.startswith("usage: kernelkit" + "".join(" " + c for c in command))
    if command:
        assert "examples:" in out
    if command == ["gram"]:
        for text in ["--param NAME=VALUE", "--out K.npy", "--block-size N", "--progress",
                     "matern", "kernelkit gram X.npy --kernel rbf --param gamma=0.5 --out K.npy"]:
            assert text in out, text


def test_version(capsys):
    import kernelkit

    code, out, _ = run_main(["--version"], capsys)
    assert code == 0 and out.strip() == f"kernelkit {kernelkit.__version__}"


# ----------------------------------------------------------------------- separate processes
def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


@pytest.mark.subprocess
def test_python_m_kernelkit_gram_and_error(files):
    d, X, _ = files
    ok = subprocess.run(
        [sys.executable, "-m", "kernelkit", "gram", str(d / "X.npy"), "--kernel", "laplacian",
         "--out", str(d / "K.npy")],
        capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    np.testing.assert_allclose(np.load(d / "K.npy"), get_kernel("laplacian").value(X), **TOL["float64"])
    bad = subprocess.run(
        [sys.executable, "-m", "kernelkit", "gram", str(d / "X.npy"), "--kernel", "nope",
         "--out", str(d / "B.npy")],
        capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=120,
    )
    assert bad.returncode == 2
    assert bad.stderr.startswith("kernelkit: error: unknown kernel 'nope'")
    assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_gram_input_too_large_for_memory_exit_2(files, capsys, monkeypatch):
    """An input that does not fit in memory is not a --block-size problem."""
    from kernelkit._util import io as _io

    def no_memory(*args, **kwargs):
        raise MemoryError

    d, _, _ = files
    monkeypatch.setattr(_io.np, "load", no_memory)
    code, _, err = run_main(["gram", d / "X.npy", "--out", d / "K.npy"], capsys)
    assert_clean_error(code, err, "out of memory reading the input files")
    assert "--block-size" not in err


@pytest.mark.subprocess
def test_gram_fifo_input_exit_2_without_hanging(files):
    """Issue 18 H: a FIFO as input made np.load wait for a writer forever. The timeout turns a
    regression into a failure instead of a hung suite (tests/test_gram.py checks both inputs
    in-process)."""
    d, _, _ = files
    os.mkfifo(d / "pipe.npy")
    res = subprocess.run(
        [sys.executable, "-m", "kernelkit", "gram", str(d / "X.npy"), "--y", str(d / "pipe.npy"),
         "--out", str(d / "K.npy")],
        capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=60,
    )
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("kernelkit: error: ") and len(res.stderr.splitlines()) == 1
    assert "pipe.npy" in res.stderr and "is a FIFO (named pipe), not a regular" in res.stderr
    assert sorted(os.listdir(d)) == ["X.npy", "Y.csv", "pipe.npy"]


_SLOW_GRAM = """
import sys, time
from kernelkit import blocked_gram
from kernelkit.cli import main
real = blocked_gram._block_value
def slow(*args, **kwargs):
    print("writing", flush=True)
    time.sleep(0.2)
    return real(*args, **kwargs)
blocked_gram._block_value = slow
sys.exit(main(["gram", sys.argv[1], "--out", sys.argv[2], "--block-size", "4"]))
"""


@pytest.mark.subprocess
def test_gram_sighup_mid_write_leaves_nothing(files):
    """Issue 18 I: SIGHUP (a closed terminal) left the full-size hidden temporary file
    (tests/test_gram.py sends SIGTERM and SIGQUIT to the function)."""
    d, _, _ = files
    signum = signal.SIGHUP
    child = subprocess.Popen(
        [sys.executable, "-c", _SLOW_GRAM, str(d / "X.npy"), str(d / "K.npy")], cwd=ROOT,
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout.readline() == "writing\n"
        assert len(os.listdir(d)) == 3, "the temporary file exists during the write"
        child.send_signal(signum)
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 128 + signum, err
    assert "wrote" not in out and "Traceback" not in err
    assert sorted(os.listdir(d)) == ["X.npy", "Y.csv"], "no output or temporary file may remain"


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("kernelkit") is None, reason="console script not installed")
def test_console_script_info():
    res = subprocess.run(["kernelkit", "info"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "scikit-learn" in res.stdout and "backends:" in res.stdout


# ------------------------------------------------------------------------------------- demo
@pytest.fixture(scope="module")
def quick_demo():
    """All demo sections once, with small data (a few seconds)."""
    buffer = io.StringIO()
    results = demo.run_demo(quick=True, file=buffer)
    return results, buffer.getvalue()


def test_demo_sections_are_listed_and_printed(quick_demo):
    results, text = quick_demo
    assert list(results) == [s.name for s in demo.SECTIONS] == ["svc", "gp", "grid", "gram", "attention"]
    for number, section in enumerate(demo.SECTIONS, start=1):
        assert f"{number}. {section.title}" in text
    assert "Done: 5 section(s)" in text


def test_demo_svc_agrees_with_sklearn(quick_demo):
    m = quick_demo[0]["svc"].metrics
    assert m["sklearn"]["accuracy"] > 0.9
    # kernelkit.SVC stops at the same tol as libsvm at another point: decision values differ by
    # O(tol), far from every test digit's margin, so the predictions agree all the same
    for key in ("kernelkit_rbf", "gram", "svc"):
        assert m[key]["agreement"] == 1.0
        assert m[key]["accuracy"] == m["sklearn"]["accuracy"]


def test_demo_gp_same_log_marginal_likelihood(quick_demo):
    metrics = quick_demo[0]["gp"].metrics
    datasets = [k for k in metrics if k != "section_seconds"]
    assert len(datasets) == 2
    for label in datasets:
        m = metrics[label]
        assert m["lml_diff"] <= 1e-6 * abs(m["lml_sklearn"]), label
        assert m["max_mean_diff"] < 1e-4, label


def test_demo_grid_search_same_choice(quick_demo):
    m = quick_demo[0]["grid"].metrics
    assert m["best_matches"]
    assert m["max_score_diff"] == 0.0


def test_demo_gram_keeps_float32_accuracy_far_from_origin(quick_demo):
    errors = quick_demo[0]["gram"].metrics["max_error"]
    assert errors["kernelkit.rbf_kernel"] < 1e-6
    assert errors["textbook"] > 0.1  # the cancellation the section is there to show


def test_demo_attention_softmax_is_exact_and_linear_is_not(quick_demo):
    m = quick_demo[0]["attention"].metrics
    errors = m["relative_error"]
    tol = 1e-5 if m["dtype"] == "torch.float32" else 2e-2  # bfloat16 on a GPU
    assert errors["softmax (online, exact)"] < tol
    assert all(err > 10 * tol for label, err in errors.items() if label.startswith("linear"))


def test_table_columns_are_aligned():
    table = demo.Table(("model", "accuracy", "time"))
    table.add("a long model name", "0.9", "1.25 s")
    table.add("short", "0.9933", "10.00 s")
    lines = table.format(indent="").splitlines()
    assert lines[0].startswith("model") and set(lines[1]) <= {"-", " "}
    assert len({len(line) for line in lines}) == 1, "numeric columns are right-aligned"
    assert lines[2].index("0.9 ") + 3 == lines[3].index("0.9933") + 6 == lines[0].index("accuracy") + 8
    assert lines[2].index("a long") == lines[3].index("short") == 0


def test_demo_command_runs_one_section(capsys):
    code, out, _ = run_main(["demo", "--quick", "--section", "svc"], capsys)
    assert code == 0
    assert "1. Support vector classification" in out and "GridSearchCV" not in out
    assert "kernelkit.RBF" in out
    code, out, _ = run_main(["demo", "--quick", "--section", "grid"], capsys)
    assert code == 0 and "3. GridSearchCV" in out and "Support vector" not in out


def test_run_demo_rejects_unknown_section():
    with pytest.raises(ValueError, match="unknown demo section"):
        demo.run_demo(sections=["nope"], file=io.StringIO())


# --------------------------------------------------------------------- README, example, CI
def _readme_blocks(language):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"^```" + language + r"\n(.*?)^```", text, flags=re.S | re.M)


def test_readme_test_command_is_what_ci_runs():
    """The README's suite command (its "Tests" block) is the one .ci/run runs. (The README's and
    the guide's Python examples run in tests/test_readme.py, the example scripts in
    tests/test_examples.py.)"""
    ci = (ROOT / ".ci" / "run").read_text()
    command = re.search(r'^step "tests" env (TRITON_INTERPRET=1 python -m pytest .*tests)$', ci,
                        flags=re.M).group(1)
    tests_block = [b for b in _readme_blocks("bash") if "bash .ci/run" in b]
    assert len(tests_block) == 1 and f"\n{command}  #" in tests_block[0]
    assert "pip install -c .ci/constraints.txt torch==2.13.0\n" in ci
    assert "set -euo pipefail" in ci
    assert os.access(ROOT / ".ci" / "run", os.X_OK)
