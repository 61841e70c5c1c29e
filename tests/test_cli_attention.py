"""``kernelkit attention compare`` and ``kernelkit attention sweep``, end to end."""

import io
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from kernelkit.cli import main
from kernelkit.cli.attention import parse_lengths
from kernelkit.attention.comparison.sweeps import SweepReport
from kernelkit.attention.comparison import accuracy as comparison, memory
from tests.cli_helpers import assert_clean_error, assert_one_line_error, run_cli, run_main

ROOT = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def strict_json(path):
    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name} in {path}")

    return json.loads(Path(path).read_text(encoding="utf-8"), parse_constant=refuse)


def check_png(path):
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and min(image.shape[:2]) >= 200
    assert np.ptp(image[..., :3]) > 0.5


def check_svg(path):
    assert ET.parse(path).getroot().tag.endswith("svg")


# ------------------------------------------------------------------------------- compare
def test_compare_synthetic_end_to_end(tmp_path, capsys):
    out = tmp_path / "cmp"
    code, stdout, err = run_main(
        ["attention", "compare", "--length", 16, "--dim", 8, "--heads", 2, "--temperature", 3,
         "--method", "softmax", "--method", "elu+1", "--method", "favor+:8", "--seeds", 2,
         "--device", "cpu", "--out", out, "--no-measure", "--progress"], capsys)
    assert code == 0, err
    assert "elu+1" in stdout and f"to {out}" in stdout
    assert "compare" in err  # the progress bar
    names = {p.name for p in out.iterdir()}
    assert names == {"report.md", "report.json", "heatmaps.npz", "heatmaps.png", "heatmaps.svg",
                     "error_vs_features.png", "error_vs_features.svg"}
    data = strict_json(out / "report.json")
    assert [r["method"] for r in data["rows"]] == ["softmax", "elu+1", "favor+:8"]
    assert data["rows"][2]["seeds"] == [0, 1]
    assert data["rows"][0]["output_rel_error"] == pytest.approx(0.0, abs=1e-12)
    md = (out / "report.md").read_text(encoding="utf-8")
    assert md.count("\n|") >= 4 and "favor+" in md
    for name in ("heatmaps.png", "error_vs_features.png"):
        check_png(out / name)
    for name in ("heatmaps.svg", "error_vs_features.svg"):
        check_svg(out / name)


def test_compare_qkv_file(tmp_path, capsys, rng):
    q = torch.from_numpy(rng.standard_normal((3, 12, 8)).astype(np.float32))
    k = torch.from_numpy(rng.standard_normal((3, 12, 8)).astype(np.float32))
    v = torch.from_numpy(rng.standard_normal((3, 12, 5)).astype(np.float32))
    save_file({"q": q, "k": k, "v": v}, str(tmp_path / "qkv.safetensors"))
    code, _, err = run_main(
        ["attention", "compare", "--qkv", tmp_path / "qkv.safetensors", "--method", "softmax",
         "--method", "relu", "--causal", "--seeds", 1, "--plot-index", "0,2", "--no-measure",
         "--no-plot", "--device", "cpu", "--out", tmp_path / "o"], capsys)
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [
        "heatmaps.npz", "report.json", "report.md"]
    data = strict_json(tmp_path / "o" / "report.json")
    assert data["meta"]["causal"] is True
    assert data["meta"]["shape"] == {"B": 1, "H": 3, "T": 12, "S": 12, "D": 8, "Dv": 5}
    assert data["heatmaps"] == {"index": [0, 2]}  # the maps themselves are in heatmaps.npz
    maps = np.load(tmp_path / "o" / "heatmaps.npz")
    assert sorted(maps.files) == ["index", "relu", "softmax"]
    assert maps["softmax"].shape == (12, 12) and list(maps["index"]) == [0, 2]
    np.testing.assert_allclose(maps["softmax"].sum(axis=1), 1.0, rtol=1e-12)
    assert [r["status"] for r in data["rows"]] == ["not measured"] * 2


@pytest.mark.parametrize("extra, fragments", [
    (["--qkv", "{d}/missing.npz"], ["missing.npz", "does not exist"]),
    (["--qkv", "{d}/bad.npz"], ["bad.npz", "v has shape (1, 7, 4)", "k has shape (1, 6, 4)"]),
    (["--qkv", "{d}/bad.npz", "--length", "8"], ["--length sets up synthetic inputs"]),
    (["--seeds", "0"], ["--seeds must be at least 1"]),
    (["--length", "0"], ["--length must be at least 1"]),
    (["--plot-index", "1"], ["--plot-index '1': expected two ints B,H"]),
    (["--method", "no-such-method"], ["no-such-method"]),
    (["--out", "{d}/file.txt"], ["file.txt", "not a directory"]),
])
def test_compare_errors(tmp_path, capsys, extra, fragments):
    np.savez(tmp_path / "bad.npz", q=np.ones((1, 5, 4)), k=np.ones((1, 6, 4)), v=np.ones((1, 7, 4)))
    (tmp_path / "file.txt").write_text("x")
    argv = ["attention", "compare", "--length", "8", "--dim", "4", "--heads", "1",
            "--device", "cpu", "--no-measure", "--no-plot", "--out", str(tmp_path / "o")]
    if any(a == "--qkv" for a in extra):
        argv = [a for a in argv if a not in ("--length", "8", "--dim", "4", "--heads", "1")]
    argv += [a.format(d=tmp_path) for a in extra]
    code, _, err = run_main(argv, capsys)
    assert_clean_error(code, err, *[f.format(d=tmp_path) for f in fragments])


def _npz_with_header(path, shape):
    """An .npz whose q, k, v .npy headers declare ``shape`` but hold 64 bytes of data."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path, "w") as archive:
        for name in "qkv":
            archive.writestr(f"{name}.npy", header.getvalue() + bytes(64))
    return path


def _truncated_npz(path):
    np.savez(path, q=np.ones((8, 4)), k=np.ones((8, 4)), v=np.ones((8, 4)))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _long_qkv(path):
    x = np.ones((30000, 1))
    np.savez(path, q=x, k=x, v=x)
    return path


@pytest.mark.parametrize("make, fragments", [
    (_truncated_npz, ["qkv.npz", "is not a valid .npz archive"]),
    (lambda p: _npz_with_header(p, (10**6, 10**6)),
     ["qkv.npz", "'q' declares shape (1000000, 1000000)", "8000000000000 bytes",
      "holds only 64 bytes"]),
    (_long_qkv, ["1 x 1 x 30000 x 30000", "GiB", "8.0 GiB of memory is available",
                 "kernelkit attention sweep"]),
], ids=["truncated", "huge-header", "T=S=30000"])
def test_compare_input_too_big_or_broken_exit_2(tmp_path, capsys, monkeypatch, make, fragments):
    monkeypatch.setattr(memory, "available_memory", lambda: 8 * 2**30)
    path = make(tmp_path / "qkv.npz")
    code, _, err = run_main(
        ["attention", "compare", "--qkv", path, "--method", "softmax", "--no-measure",
         "--no-plot", "--device", "cpu", "--out", tmp_path / "o"], capsys)
    assert_clean_error(code, err, *fragments)
    assert not (tmp_path / "o").exists()


def test_compare_memory_error_is_one_line(tmp_path, capsys, monkeypatch):
    def no_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 7 GiB")

    monkeypatch.setattr(comparison.metrics, "entropy", no_memory)
    code, _, err = run_main(
        ["attention", "compare", "--length", "8", "--dim", "4", "--heads", "1", "--method",
         "softmax", "--no-measure", "--no-plot", "--device", "cpu", "--out", tmp_path], capsys)
    assert_clean_error(code, err, "out of memory", "Unable to allocate 7 GiB")


def test_missing_matplotlib_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    code, _, err = run_main(
        ["attention", "sweep", "--method", "softmax", "--lengths", "8", "--dim", "8",
         "--heads", "1", "--repeat", "1", "--device", "cpu", "--out", tmp_path], capsys)
    assert_clean_error(code, err, "pip install matplotlib", "pip install -e '.[plot]'",
                       "--no-plot")
    assert "kernelkit[plot]" not in err  # no index has a kernelkit package with that extra


# --------------------------------------------------------------------------------- sweep
def test_sweep_end_to_end(tmp_path, capsys):
    code, stdout, err = run_main(
        ["attention", "sweep", "--method", "softmax", "--method", "elu+1", "--lengths", "16,32",
         "--dim", 16, "--heads", 1, "--repeat", 1, "--no-causal", "--device", "cpu",
         "--out", tmp_path, "--progress"], capsys)
    assert code == 0, err
    assert "| T (tokens) | batch | softmax (ms) | elu+1 (ms) |" in stdout
    assert "sweep" in err  # the progress bar
    assert {p.name for p in tmp_path.iterdir()} == {"report.md", "report.json", "sweep.png",
                                                    "sweep.svg"}
    report = SweepReport.from_json(tmp_path / "report.json")
    strict_json(tmp_path / "report.json")
    assert [(r["method"], r["T"], r["status"]) for r in report.rows] == [
        ("softmax", 16, "ok"), ("elu+1", 16, "ok"), ("softmax", 32, "ok"), ("elu+1", 32, "ok")]
    assert report.meta["causal"] is False and report.meta["dtype"] == "float32"
    assert (tmp_path / "report.md").read_text(encoding="utf-8") == report.to_markdown()
    check_png(tmp_path / "sweep.png")
    check_svg(tmp_path / "sweep.svg")


def test_sweep_of_softmax_alone_reports_the_reference(tmp_path, capsys):
    code, stdout, err = run_main(
        ["attention", "sweep", "--method", "softmax", "--lengths", "16", "--dim", 8, "--heads",
         1, "--repeat", 1, "--device", "cpu", "--no-plot", "--out", tmp_path], capsys)
    assert code == 0, err
    assert "| 16 | 1 |" in stdout and "has no 'softmax' rows" not in stdout
    assert ("No crossover: softmax is the reference of the crossover and the only method "
            "swept; sweep other methods with it") in stdout
    assert strict_json(tmp_path / "report.json")["rows"][0]["status"] == "ok"


def test_sweep_that_measures_nothing_is_an_error_and_draws_nothing(tmp_path, capsys,
                                                                  monkeypatch):
    # softmax skipped at every length by the memory plan: it used to reach matplotlib's "Data
    # cannot be log-scaled because all values are <= 0."
    import importlib

    monkeypatch.setattr(importlib.import_module("kernelkit_gpu._launch"), "INTERPRET", False)
    monkeypatch.setattr(memory, "available_memory", lambda: 8 * 2**20)
    code, _, err = run_main(["attention", "sweep", "--method", "softmax", "--lengths",
                             "1024,2048", "--dim", 8, "--heads", 1, "--device", "cpu",
                             "--out", tmp_path / "o"], capsys)
    assert code == 2
    *progress, error = err.strip().splitlines()
    assert progress == [
        "sweep 1/2: softmax at T = 1024: skipped (needs about 12.2 MiB of memory, 8.0 MiB "
        "available)",
        "sweep 2/2: softmax at T = 2048: skipped (needs about 12.2 MiB of memory, 8.0 MiB "
        "available at T = 1024)"]
    assert_one_line_error(error, "kernelkit: error: ", (
        "the sweep measured nothing (no method ran at any length): softmax at T = 1024: needs "
        "about 12.2 MiB of memory, 8.0 MiB available"))
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("extra, fragments", [
    (["--lengths", "a,b"], ["--lengths 'a,b': expected comma-separated ints"]),
    (["--lengths", "64..8"], ["--lengths '64..8'"]),
    (["--lengths", "0,8"], ["each length must be at least 1"]),
    (["--lengths", "8,8"], ["lengths must not repeat"]),
    (["--tokens", "0"], ["--tokens must be at least 1"]),
    (["--method", "softmax", "--method", "softmax"], ["'softmax' more than once"]),
])
def test_sweep_errors(tmp_path, capsys, extra, fragments):
    argv = ["attention", "sweep", "--dim", "8", "--heads", "1", "--device", "cpu",
            "--no-plot", "--out", str(tmp_path)]
    if "--lengths" not in extra:
        argv += ["--lengths", "8"]
    code, _, err = run_main(argv + extra, capsys)
    assert_clean_error(code, err, *fragments)


def test_sweep_batch_and_tokens_are_exclusive(tmp_path, capsys):
    code, _, err = run_main(["attention", "sweep", "--batch", 2, "--tokens", 64, "--out",
                             tmp_path], capsys)
    assert code == 2 and "not allowed with argument" in err


def test_attention_without_command(capsys):
    code, _, err = run_main(["attention"], capsys)
    assert_clean_error(code, err, "needs a command: compare or sweep")


def test_help_lists_the_commands(capsys):
    assert main(["attention", "--help"]) == 0
    out = capsys.readouterr().out
    assert "compare" in out and "sweep" in out
    assert main(["--help"]) == 0
    assert "kernelkit attention compare" in capsys.readouterr().out
    assert main(["attention", "compare", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert ".safetensors" in help_text and "favor+:M" in help_text


@pytest.mark.parametrize("command", ["compare", "sweep"])
def test_help_lists_every_registry_feature_map(capsys, command):
    """The --method help is read from the feature-map registry: each map with its summary."""
    from kernelkit_math.random_features import FEATURE_MAPS

    assert main(["attention", command, "--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for spec in FEATURE_MAPS.values():
        assert any(line.split() == [spec.form, *spec.summary.split()] for line in lines), spec.name


@pytest.mark.parametrize("text, expected", [
    ("512", [512]), ("16, 32,64", [16, 32, 64]), ("512..4096", [512, 1024, 2048, 4096]),
    ("3..20", [3, 6, 12]), ("8..8", [8]),
])
def test_parse_lengths(text, expected):
    assert parse_lengths(text) == expected


@pytest.mark.parametrize("text", ["", "a", "1.5", "8..", "..8", "0..8", "16..8", "1..2..4"])
def test_parse_lengths_rejects(text):
    with pytest.raises(ValueError, match="expected comma-separated ints"):
        parse_lengths(text)


# ------------------------------------------------------------------------------- example
@pytest.mark.subprocess
def test_example_script_runs(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("TRITON_INTERPRET", None)  # the example runs the plain-PyTorch CPU path, as a user would
    res = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "compare_attention.py"), str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert "favor+" in res.stdout and "| softmax" in res.stdout
    check_png(tmp_path / "heatmaps.png")
    check_png(tmp_path / "error_vs_features.png")


# ------------------------------------------------------------------ usage errors and help
@pytest.mark.parametrize("argv, prefix, fragment", [
    (["attention", "compare", "--out", "o", "--kernal", "rbf"], "kernelkit attention compare",
     "unrecognized arguments: --kernal rbf"),
    (["--kernal"], "kernelkit", "unrecognized arguments: --kernal"),
    (["attention", "sweep", "--out", "o", "--dim", "x"], "kernelkit attention sweep",
     "argument --dim: invalid int value: 'x'"),
    (["attention", "compare"], "kernelkit attention compare",
     "the following arguments are required: --out"),
    (["gram", "--block-size", "8"], "kernelkit gram", "the following arguments are required"),
], ids=["unknown-option", "top-level", "bad-int", "missing-out", "gram"])
def test_usage_errors_are_one_line_from_the_subcommand(capsys, argv, prefix, fragment):
    code, out, err = run_main(argv, capsys)
    assert code == 2 and out == ""
    assert_one_line_error(err, f"{prefix}: error: ", fragment, f"(see '{prefix} --help')")
    assert "usage:" not in err


@pytest.mark.subprocess
def test_usage_error_is_one_line_in_a_process(tmp_path):
    res, _ = run_cli(["attention", "compare", "--out", tmp_path, "--kernal"])
    assert res.returncode == 2 and res.stdout == ""
    assert_one_line_error(res.stderr, "kernelkit attention compare: error: ",
                          "unrecognized arguments: --kernal")


def test_attention_help_lists_the_commands_once(capsys):
    assert main(["attention", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.count("commands:") == 1
    assert out.count("compare ") == 1 and "sweep" in out


# ---------------------------------------------------------- accepted input is used or refused
def test_gram_accepts_the_kernel_class_name(tmp_path, capsys):
    from kernelkit_math.kernels import rbf

    X = np.random.default_rng(0).standard_normal((6, 3))
    np.save(tmp_path / "X.npy", X)
    code, _, err = run_main(["gram", tmp_path / "X.npy", "--kernel", "RBF", "--param",
                             "gamma=0.5", "--out", tmp_path / "K.npy"], capsys)
    assert code == 0, err
    # float64 on the CPU, both through the registry's reference: equal to rounding
    np.testing.assert_allclose(np.load(tmp_path / "K.npy"), rbf(X, X, gamma=0.5),
                               rtol=1e-14, atol=1e-15)


def test_compare_accepts_kernel_class_names(tmp_path, capsys):
    code, _, err = run_main(
        ["attention", "compare", "--length", 8, "--dim", 4, "--heads", 1, "--method",
         "kernel:RBF", "--method", "kernel:ExpSineSquared", "--seeds", 1, "--no-measure",
         "--no-plot", "--device", "cpu", "--out", tmp_path], capsys)
    assert code == 0, err
    rows = strict_json(tmp_path / "report.json")["rows"]
    assert [r["method"] for r in rows] == ["kernel:rbf", "kernel:periodic"]


def test_sweep_reversed_range_says_why(tmp_path, capsys):
    code, _, err = run_main(["attention", "sweep", "--lengths", "512..128", "--no-plot",
                             "--device", "cpu", "--out", tmp_path], capsys)
    assert_clean_error(code, err, "--lengths '512..128'", "the range must go up",
                       "did you mean 128..512?")


def test_sweep_refuses_fewer_tokens_than_one_sequence(tmp_path, capsys):
    code, _, err = run_main(["attention", "sweep", "--tokens", 64, "--lengths", 128,
                             "--no-plot", "--device", "cpu", "--out", tmp_path], capsys)
    assert_clean_error(code, err, "tokens=64", "longest length T = 128")
    assert not (tmp_path / "report.json").exists()


def test_compare_reports_the_nystrom_landmarks_it_used(tmp_path, capsys):
    code, stdout, err = run_main(
        ["attention", "compare", "--length", 16, "--dim", 4, "--heads", 1, "--method",
         "softmax", "--method", "nystrom:1000", "--seeds", 1, "--no-measure", "--no-plot",
         "--device", "cpu", "--out", tmp_path], capsys)
    assert code == 0, err
    row = strict_json(tmp_path / "report.json")["rows"][1]
    assert row["method"] == "nystrom:1000" and row["n_features"] == 16
    assert row["label"] == "nystrom:1000 (M = 16: capped at the S = 16 keys)"
    assert "capped at the S = 16 keys" in stdout
    # M = T = S: every row is a landmark row, which the non-negative fit's 64 steps reach to
    # about 3e-2 (tests/test_compare_methods.py checks that more steps reach softmax)
    assert row["output_rel_error"] < 0.1


# ------------------------------------------------------------------------- --out directory
@pytest.mark.parametrize("command", ["compare", "sweep"])
def test_out_removes_the_files_of_an_earlier_run_only(tmp_path, capsys, command):
    out = tmp_path / "new" / "parents" / "out"  # created with its parents
    argv = (["attention", "compare", "--length", 8, "--dim", 4, "--heads", 1, "--method",
             "softmax", "--seeds", 1, "--no-measure"] if command == "compare" else
            ["attention", "sweep", "--method", "softmax", "--lengths", 8, "--dim", 4,
             "--heads", 1, "--repeat", 1])
    argv += ["--no-plot", "--device", "cpu", "--out", out]
    code, _, err = run_main(argv, capsys)
    assert code == 0, err
    stale = ["heatmaps.png", "heatmaps.svg", "error_vs_features.pdf", "sweep.png"]
    for name in stale + ["notes.txt", "sweep.jpg"]:  # the last two are not the tool's files
        (out / name).write_text("from an earlier run")
    code, stdout, err = run_main(argv, capsys)
    assert code == 0, err
    written = ({"report.md", "report.json", "heatmaps.npz"} if command == "compare" else
               {"report.md", "report.json"})
    assert {p.name for p in out.iterdir()} == written | {"notes.txt", "sweep.jpg"}
    assert f"removed {', '.join(sorted(stale))} of an earlier run" in stdout


# ------------------------------------------------------------------- memory, before reading
def _compressed_npz(path, shapes):
    """A deflated .npz of zeros: a few kB on disk, the declared shapes in its headers."""
    np.savez_compressed(path, **{n: np.zeros(s, dtype=np.float32) for n, s in shapes.items()})
    return path


@pytest.mark.parametrize("shapes, fragments", [
    ({"q": (2, 1024, 4), "k": (2, 1024, 4), "v": (2, 1024, 4)},
     ["1 x 2 x 1024 x 1024", "needs about 128.8 MiB (8 float64 arrays of 16.0 MiB"]),
    ({"q": (1, 8, 2**19), "k": (1, 8, 2**19), "v": (1, 8, 2**19)},  # long rows, few weights
     ["1 x 1 x 8 x 8 attention weights (D = 524288, Dv = 524288)", "needs about 384.0 MiB"]),
], ids=["weights", "inputs"])
def test_compare_plans_memory_from_the_npz_headers_before_reading(tmp_path, capsys, monkeypatch,
                                                                  shapes, fragments):
    path = _compressed_npz(tmp_path / "qkv.npz", shapes)
    assert path.stat().st_size < 200_000
    monkeypatch.setattr(memory, "available_memory", lambda: 50 * 2**20)

    def read_array(*args, **kwargs):
        raise AssertionError("array data read before the memory plan")

    monkeypatch.setattr(np.lib.format, "read_array", read_array)
    code, _, err = run_main(["attention", "compare", "--qkv", path, "--no-measure", "--no-plot",
                             "--device", "cpu", "--out", tmp_path / "o"], capsys)
    assert_clean_error(code, err, "comparing", *fragments, "50.0 MiB of memory is available")


@pytest.mark.subprocess
@pytest.mark.parametrize("argv, fragments", [
    (["attention", "sweep", "--lengths", "10000000"],
     ["the inputs at T = 10000000", "(B x H x T x D = 1 x 8 x 10000000 x 64, float32)",
      "GiB of memory is available", "sweep shorter lengths"]),
    (["attention", "sweep", "--lengths", "1000000"], ["the inputs at T = 1000000"]),
    (["attention", "compare", "--length", "1000000"],
     ["1 x 4 x 1000000 x 1000000 attention weights", "GiB of memory is available"]),
], ids=["sweep-1e7", "sweep-1e6", "compare-1e6"])
def test_long_sequences_are_refused_before_allocating(tmp_path, argv, fragments):
    # under a 4 GB ulimit -v, as the reproduction; refused from the plan, in seconds
    res, cpu = run_cli(argv + ["--no-plot", "--device", "cpu", "--out", tmp_path / "o"],
                       address_space=4_000_000 * 1024)
    assert res.returncode == 2, res.stderr
    assert_one_line_error(res.stderr, "kernelkit: error: ", *fragments)
    assert cpu < 5, f"{cpu:.1f} CPU seconds"  # imports and the plan only
    assert not (tmp_path / "o").exists()


_NO_PLAN = ("import sys, kernelkit.attention.comparison.memory as m; "
            "m.available_memory = lambda: None; "
            "from kernelkit.cli import main; sys.exit(main(sys.argv[1:]))")


@pytest.mark.subprocess
@pytest.mark.parametrize("argv", [
    ["attention", "compare", "--length", "1000000", "--dim", "128"],
    ["attention", "sweep", "--lengths", "3000000", "--method", "elu+1"],
], ids=["compare", "sweep"])
def test_failed_allocations_are_one_line_under_ulimit(tmp_path, argv):
    # with the memory plan switched off, the allocations themselves fail under ulimit -v
    import resource
    import subprocess

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (4_000_000 * 1024,) * 2)

    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1")  # no sweep estimate
    res = subprocess.run([sys.executable, "-c", _NO_PLAN, *argv, "--no-plot", "--device", "cpu",
                          "--out", str(tmp_path / "o")], cwd=ROOT, env=env, preexec_fn=limit,
                         capture_output=True, text=True, timeout=300)
    assert "Traceback" not in res.stderr, res.stderr
    if argv[1] == "compare":  # the note that it would take long, then the error
        assert res.returncode == 2
        note, error = res.stderr.strip().splitlines()
        assert note.startswith("kernelkit: note: this comparison will take about")
        assert_one_line_error(error, "kernelkit: error: ", "out of memory")
    else:  # the sweep's one length did not fit: its progress line, then nothing to report
        assert res.returncode == 2
        progress, error = res.stderr.strip().splitlines()
        assert progress == ("sweep 1/1: elu+1 at T = 3000000: oom (the inputs do not fit in "
                            "memory)")
        assert_one_line_error(error, "kernelkit: error: ", "the sweep measured nothing (no "
                              "method ran at any length): elu+1 at T = 3000000: the inputs do "
                              "not fit in memory")
        assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ long steps: Ctrl-C, note
def test_compare_says_up_front_when_it_takes_minutes(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(comparison, "SVD_SECONDS_PER_CUBE", 600 / (2 * 64**3))
    code, _, err = run_main(["attention", "compare", "--length", 64, "--dim", 4, "--heads", 2,
                             "--method", "softmax", "--no-measure", "--no-plot", "--device",
                             "cpu", "--out", tmp_path], capsys)
    assert code == 0
    assert ("kernelkit: note: this comparison will take about 10 min on this CPU (2 SVDs of "
            "64 x 64 attention weights); Ctrl-C stops it") in err


def test_sweep_says_up_front_when_it_takes_minutes(tmp_path, capsys, monkeypatch):
    import importlib

    from kernelkit.attention.comparison import sweep_plan

    # the estimate is of the plain-PyTorch CPU path: 3 calls (warm-up, 1 timed, memory) of
    # softmax at B·H·T²·D = 16² x 8, priced at 10 min in all
    monkeypatch.setattr(importlib.import_module("kernelkit_gpu._launch"), "INTERPRET", False)
    monkeypatch.setattr(sweep_plan, "CPU_SECONDS", {"quadratic": 600 / (3 * 16**2 * 8),
                                                    "features": 0.0})
    code, _, err = run_main(["attention", "sweep", "--method", "softmax", "--lengths", "16",
                             "--dim", 8, "--heads", 1, "--repeat", 1, "--device", "cpu",
                             "--no-plot", "--out", tmp_path], capsys)
    assert code == 0, err
    note, progress = err.strip().splitlines()
    assert note == ("kernelkit: note: this sweep will take about 10 min on this CPU (shorter "
                    "--lengths, fewer --heads or a smaller --repeat take less); Ctrl-C stops it "
                    "and keeps the runs finished before it")
    assert progress.startswith("sweep 1/1: softmax at T = 16: ")


# A sweep whose third run is one long LAPACK call (an SVD of 2048 x 2048, 10 s or more on a
# 2-core CPU), which never looks at signals, as a long torch call on the CPU does not.
_SLOW_THIRD_RUN = """\
import sys
import numpy as np
import kernelkit.attention.comparison.measurement as m
real, calls = m.measure, []
def measure(fn, **kwargs):
    calls.append(fn)
    if len(calls) == 3:
        np.linalg.svd(np.random.default_rng(0).random((2048, 2048)))
    return real(fn, **kwargs)
m.measure = measure
from kernelkit.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.subprocess
def test_ctrl_c_stops_a_sweep_at_once_and_keeps_the_finished_runs(tmp_path):
    # Progress reaches a pipe as runs finish; SIGINT is sent inside the third run's long call:
    # the process must end within 5 s with code 130, the two finished runs written.
    import signal
    import time

    out = tmp_path / "o"
    out.mkdir()
    (out / "sweep.png").write_bytes(b"an earlier run's plot")
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_THIRD_RUN, "attention", "sweep", "--method", "softmax",
         "--method", "elu+1", "--lengths", "16,32", "--dim", "8", "--heads", "1", "--repeat",
         "1", "--device", "cpu", "--out", str(out)],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # even from a
    try:                                                                 # background job
        seen = b""
        while b"sweep 2/4: " not in seen:
            chunk = os.read(proc.stderr.fileno(), 4096)
            assert chunk, seen.decode(errors="replace")
            seen += chunk
        time.sleep(1.0)  # inside the third run's SVD
        proc.send_signal(signal.SIGINT)
        start = time.monotonic()
        _, rest = proc.communicate(timeout=120)
        waited = time.monotonic() - start
    finally:
        proc.kill()
    err = (seen + rest).decode()
    assert proc.returncode == 130, err
    assert waited < 5, f"exited {waited:.1f} s after SIGINT"
    assert err.splitlines()[-2:] == [
        f"kernelkit: sweep interrupted at softmax, T = 32; the 2 runs finished before it are "
        f"in report.md, report.json in {out} (no plots)",
        "kernelkit: interrupted"]
    report = SweepReport.from_json(out / "report.json")
    assert [(r["method"], r["T"], r["status"]) for r in report.rows] == [
        ("softmax", 16, "ok"), ("elu+1", 16, "ok")]
    assert report.meta["interrupted"] == {"method": "softmax", "T": 32}
    assert (out / "report.md").read_text(encoding="utf-8") == report.to_markdown()
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.md"]


@pytest.mark.subprocess
def test_ctrl_c_stops_the_context_svd(tmp_path):
    # Two SVDs of 2048 x 2048 float64 weights: each takes 10 s or more on a 2-core CPU, and
    # LAPACK never looks at signals, so Ctrl-C used to wait for them. SIGINT is sent once the
    # progress bar shows the context step; the process must end within 5 s with code 130.
    import signal
    import subprocess
    import time

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelkit", "attention", "compare", "--length", "2048", "--dim",
         "8", "--heads", "2", "--method", "softmax", "--no-measure", "--no-plot", "--progress",
         "--device", "cpu", "--out", str(tmp_path)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        seen = b""
        while b"context: SVD 1/2" not in seen:
            chunk = os.read(proc.stderr.fileno(), 4096)
            assert chunk, seen.decode(errors="replace")
            seen += chunk
        time.sleep(0.5)  # inside the first SVD
        proc.send_signal(signal.SIGINT)
        start = time.monotonic()
        _, rest = proc.communicate(timeout=120)
        waited = time.monotonic() - start
    finally:
        proc.kill()
    assert proc.returncode == 130 and "kernelkit: interrupted" in rest.decode()
    assert waited < 5, f"exited {waited:.1f} s after SIGINT"
    assert not (tmp_path / "report.json").exists()


@pytest.mark.subprocess
def test_compare_refuses_a_fifo_instead_of_waiting(tmp_path):
    fifo = tmp_path / "qkv.npz"
    os.mkfifo(fifo)
    res, _ = run_cli(["attention", "compare", "--qkv", fifo, "--no-plot", "--out",
                      tmp_path / "o"], timeout=60)
    assert res.returncode == 2
    assert_one_line_error(res.stderr, "kernelkit: error: ", "qkv.npz' is not a regular file")
