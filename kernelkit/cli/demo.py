"""``kernelkit demo``: kernelkit's kernels at work inside scikit-learn, next to sklearn's own.

The demo is a list of :class:`Section` objects (:data:`SECTIONS`); each runs on its own, takes
``quick`` (small data, for tests and impatient people) and returns a :class:`SectionResult`
with printable tables and the numbers behind them. Later sections (GPU Gram matrices,
attention) append to the list.

Run it with ``kernelkit demo`` or::

    python -c "from kernelkit.cli.demo import run_demo; run_demo(quick=True)"
"""

from __future__ import annotations

import math
import platform
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

__all__ = ["Section", "SectionResult", "Table", "SECTIONS", "run_demo"]


# ----------------------------------------------------------------------------- presentation
@dataclass
class Table:
    """A small text table: a header row and rows of already formatted strings."""

    header: tuple
    rows: list = field(default_factory=list)
    title: str = ""

    def add(self, *cells):
        self.rows.append(tuple(str(c) for c in cells))

    def format(self, indent="  "):
        cells = [tuple(self.header)] + self.rows
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.header))]
        # a column whose every cell is a number is right-aligned, header included
        numeric = [
            i > 0 and bool(self.rows) and all(_looks_numeric(r[i]) for r in self.rows)
            for i in range(len(self.header))
        ]

        def line(row):
            parts = [
                text.rjust(width) if num else text.ljust(width)
                for text, width, num in zip(row, widths, numeric)
            ]
            return (indent + "  ".join(parts)).rstrip()

        out = [indent + self.title] if self.title else []
        out.append(line(cells[0]))
        out.append(indent + "  ".join("-" * w for w in widths))
        out += [line(r) for r in self.rows]
        return "\n".join(out)


def _looks_numeric(text):
    t = text.strip().rstrip("s%x").replace("e-", "").replace("e+", "")
    try:
        float(t.replace(",", ""))
    except ValueError:
        return False
    return True


@dataclass
class SectionResult:
    """What a section shows (``tables``, ``notes``) and the numbers behind it (``metrics``)."""

    tables: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    metrics: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Section:
    """One part of the demo: ``run(quick) -> SectionResult``."""

    name: str
    title: str
    run: Callable


class _Timer:
    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0


def _s(seconds):
    return f"{seconds:.2f} s"


def _gamma_to_length_scale(gamma):
    """RBF: gamma = 1 / (2 length_scale**2)."""
    return math.sqrt(1.0 / (2.0 * gamma))


# ---------------------------------------------------------------------------- 1. SVC digits
def _digits(n_train, n_test, seed=0):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    return train_test_split(
        X, y, train_size=n_train, test_size=n_test, random_state=seed, stratify=y,
    )


def section_svc(quick=False):
    """SVC on the digits: sklearn's ``kernel="rbf"`` vs ``kernelkit.RBF`` in sklearn's SVC vs a
    precomputed Gram vs kernelkit's own SVC (its batched SMO solver)."""
    from sklearn.svm import SVC

    from kernelkit import RBF, SVC as KernelkitSVC
    from kernelkit.blocked_gram import gram

    n_train, n_test = (400, 200) if quick else (1200, 597)
    X_train, X_test, y_train, y_test = _digits(n_train, n_test)
    gamma = 0.001
    length_scale = _gamma_to_length_scale(gamma)

    def run(make_model, transform=lambda A, B=None: A):
        with _Timer() as t:
            model = make_model().fit(transform(X_train), y_train)
            pred = model.predict(transform(X_test, X_train))
        return pred, t.seconds

    ref, t_ref = run(lambda: SVC(kernel="rbf", gamma=gamma))
    obj, t_obj = run(lambda: SVC(kernel=RBF(length_scale=length_scale)))
    pre, t_pre = run(
        lambda: SVC(kernel="precomputed"),
        lambda A, B=None: gram(A, B, "rbf", gamma=gamma),
    )
    own, t_own = run(lambda: KernelkitSVC(kernel="rbf", gamma=gamma))

    table = Table(("model", "test accuracy", "agrees with sklearn", "fit + predict"))
    rows = [
        ('SVC(kernel="rbf", gamma=0.001)  [sklearn]', ref, t_ref),
        (f"SVC(kernel=kernelkit.RBF(length_scale={length_scale:.2f}))", obj, t_obj),
        ('SVC(kernel="precomputed") on kernelkit.gram', pre, t_pre),
        ('kernelkit.SVC(kernel="rbf", gamma=0.001)', own, t_own),
    ]
    metrics = {}
    for (label, pred, seconds), key in zip(rows, ("sklearn", "kernelkit_rbf", "gram", "svc")):
        acc = float(np.mean(pred == y_test))
        agree = float(np.mean(pred == ref))
        metrics[key] = {"accuracy": acc, "agreement": agree, "seconds": seconds}
        table.add(label, f"{acc:.4f}", f"{agree:.1%}", _s(seconds))
    return SectionResult(
        tables=[table],
        notes=[
            f"{n_train} training and {n_test} test images of 8x8 digits, 64 features; "
            f"gamma = 1 / (2 length_scale**2) = {gamma}.",
            "kernelkit.SVC runs its own batched SMO solver (examples/svm_large.py); it is made "
            "for GPUs and large n, and on a CPU libsvm's C loop is faster.",
        ],
        metrics=metrics,
    )


# ------------------------------------------------------------------ 2. Gaussian processes
def _sine(n, seed=0):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(0.0, 10.0, n))[:, None]
    y = np.sin(X[:, 0]) + 0.3 * rng.standard_normal(n)
    return X, y


def _diabetes(n, d):
    """The first ``n`` samples and ``d`` features of scikit-learn's diabetes data, standardised."""
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    X, y = X[:n, :d], y[:n]
    return (X - X.mean(0)) / X.std(0), (y - y.mean()) / y.std()


def section_gp(quick=False):
    """GaussianProcessRegressor with kernelkit.RBF() + WhiteKernel() vs sklearn's RBF."""
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF as SkRBF
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process.kernels import WhiteKernel

    from kernelkit import RBF

    # quick: the ARD fit (L-BFGS-B over one length scale per feature) dominates; 4 features of
    # 100 samples take ~1 s of CPU time against ~8 s for 10 features of 200
    n_sine, n_diab, d_diab = (40, 100, 4) if quick else (120, 442, 10)
    datasets = [
        (f"noisy sine, n={n_sine}", _sine(n_sine), lambda cls, d: cls(length_scale=1.0)),
        (
            f"diabetes, n={n_diab}, ARD ({d_diab} length scales)", _diabetes(n_diab, d_diab),
            lambda cls, d: cls(length_scale=np.ones(d)),
        ),
    ]
    table = Table(("data", "kernel", "log marginal likelihood", "fitted length scale(s)", "fit"))
    metrics = {}
    n_warnings = 0
    for label, (X, y), make in datasets:
        fitted = {}
        for source, cls in (("sklearn", SkRBF), ("kernelkit", RBF)):
            kernel = make(cls, X.shape[1]) + WhiteKernel(noise_level=1.0)
            gp = GaussianProcessRegressor(kernel=kernel, random_state=0)
            with _Timer() as t, warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ConvergenceWarning)
                gp.fit(X, y)
            n_warnings += sum(issubclass(w.category, ConvergenceWarning) for w in caught)
            ls = np.atleast_1d(gp.kernel_.k1.length_scale)
            shown = f"{ls[0]:.3f}" if ls.size == 1 else f"{ls.min():.3g} .. {ls.max():.3g}"
            lml = float(gp.log_marginal_likelihood_value_)
            fitted[source] = (gp, lml, ls)
            name = "sklearn RBF" if source == "sklearn" else "kernelkit.RBF"
            table.add(label, f"{name} + WhiteKernel", f"{lml:.6f}", shown, _s(t.seconds))
        (gp_s, lml_s, ls_s), (gp_k, lml_k, ls_k) = fitted["sklearn"], fitted["kernelkit"]
        X_new = X[: min(len(X), 50)] + 0.01
        mean_diff = float(np.max(np.abs(gp_s.predict(X_new) - gp_k.predict(X_new))))
        metrics[label] = {
            "lml_sklearn": lml_s, "lml_kernelkit": lml_k, "lml_diff": abs(lml_s - lml_k),
            "max_mean_diff": mean_diff,
            "length_scale_rel_diff": float(np.max(np.abs(ls_s - ls_k) / ls_s)),
        }
    notes = [
        f"{label}: |delta log marginal likelihood| = {m['lml_diff']:.1e}, "
        f"max |delta predictive mean| = {m['max_mean_diff']:.1e}"
        for label, m in metrics.items()
    ]
    notes.append("Same start, same optimizer (L-BFGS-B): the gradients agree, so the optima do.")
    notes.append("ARD: a very large fitted length scale marks a feature the GP found irrelevant.")
    if n_warnings:
        notes.append(f"({n_warnings} ConvergenceWarning(s) about hyperparameters at their bounds.)")
    return SectionResult(tables=[table], notes=notes, metrics=metrics)


# ------------------------------------------------------------------------ 3. GridSearchCV
def section_grid(quick=False):
    """GridSearchCV over ``kernel__length_scale`` of kernelkit.RBF vs over sklearn's ``gamma``."""
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.svm import SVC

    from kernelkit import RBF

    n_train = 300 if quick else 800
    X, _, y, _ = _digits(n_train, 100, seed=1)
    length_scales = [5.0, 10.0, 22.36, 50.0] if quick else [3.0, 7.0, 15.0, 22.36, 35.0, 70.0]
    gammas = [1.0 / (2.0 * ls**2) for ls in length_scales]
    cv = StratifiedKFold(n_splits=3, shuffle=True, random_state=0)

    with _Timer() as t_k:
        search_k = GridSearchCV(
            SVC(kernel=RBF()), {"kernel__length_scale": length_scales}, cv=cv,
        ).fit(X, y)
    with _Timer() as t_s:
        search_s = GridSearchCV(SVC(kernel="rbf"), {"gamma": gammas}, cv=cv).fit(X, y)

    score_k = search_k.cv_results_["mean_test_score"]
    score_s = search_s.cv_results_["mean_test_score"]
    table = Table((
        "kernel__length_scale", "gamma = 1/(2 ls^2)", "CV accuracy kernelkit.RBF",
        "CV accuracy sklearn rbf", "",
    ))
    best_k = int(np.argmax(score_k))
    for i, (ls, g) in enumerate(zip(length_scales, gammas)):
        mark = "<- best" if i == best_k else ""
        table.add(f"{ls:g}", f"{g:.2e}", f"{score_k[i]:.4f}", f"{score_s[i]:.4f}", mark)
    best_ls = search_k.best_params_["kernel__length_scale"]
    best_gamma = search_s.best_params_["gamma"]
    metrics = {
        "best_length_scale": best_ls, "best_gamma": best_gamma,
        "best_matches": bool(np.isclose(best_gamma, 1.0 / (2.0 * best_ls**2))),
        "max_score_diff": float(np.max(np.abs(score_k - score_s))),
        "seconds_kernelkit": t_k.seconds, "seconds_sklearn": t_s.seconds,
    }
    return SectionResult(
        tables=[table],
        notes=[
            f"{n_train} digits, 3-fold CV, {len(length_scales)} candidates: best "
            f"length_scale={best_ls:g} (kernelkit, {_s(t_k.seconds)}) and best "
            f"gamma={best_gamma:.2e} (sklearn, {_s(t_s.seconds)}) are the same setting."
            if metrics["best_matches"] else
            f"best length_scale={best_ls:g} (kernelkit) vs best gamma={best_gamma:.2e} (sklearn)",
        ],
        metrics=metrics,
    )


# ---------------------------------------------------------------- 4. Gram matrices, any device
def section_gram(quick=False):
    """An RBF Gram matrix of float32 data far from the origin: kernelkit vs the textbook formula."""
    import torch

    from kernelkit import rbf_kernel
    from kernelkit._util.device import resolve_device
    from kernelkit_math import get_kernel

    where = resolve_device("auto")
    n = (1024 if quick else 4096) * (4 if where == "cuda" else 1)
    d, gamma = 64, 0.5
    rng = np.random.default_rng(0)
    X = (1000.0 + 0.05 * rng.normal(size=(n, d))).astype(np.float32)
    ref = get_kernel("rbf").value_fn(X[:512].astype(np.float64), X.astype(np.float64), gamma=gamma)

    def textbook(x):  # clamp(||x||² + ||y||² - 2 x·y, 0) in float32: the formula people write
        t = torch.from_numpy(x).to(where)
        sq = (t * t).sum(1)
        d2 = (sq[:, None] + sq[None, :] - 2.0 * t @ t.T).clamp_min(0.0)
        return torch.exp(-gamma * d2).cpu().numpy()

    table = Table(("method", "device", "time", "max |error| vs float64"))
    errors = {}
    rbf_kernel(X[:8], gamma=gamma)  # warm-up (loads the GPU kernels when present)
    for label, fn, dev in [
        ("kernelkit.rbf_kernel (float32 in, float32 out)", lambda: rbf_kernel(X, gamma=gamma), where),
        ("textbook float32 expansion in torch, clamped at 0", lambda: textbook(X), where),
    ]:
        with _Timer() as t:
            K = fn()
        err = float(np.abs(K[:512].astype(np.float64) - ref).max())
        errors[label.split(" ")[0]] = err
        table.add(label, dev, _s(t.seconds), f"{err:.1e}")
    return SectionResult(
        tables=[table],
        notes=[
            f"{n} points of {d} features spread 0.05 around 1000, gamma={gamma}; the expansion "
            "cancels catastrophically there, kernelkit keeps float32 accuracy "
            "(direct differences on the CPU, centring + split-precision dot on the GPU).",
        ],
        metrics={"n": n, "device": where, "max_error": errors},
    )


# ------------------------------------------------------------------- 5. attention as smoothing
def section_attention(quick=False):
    """Softmax attention vs linear and exact-kernel attention on the same q, k, v."""
    import torch

    import kernelkit
    from kernelkit.attention import kernel_attention, linear_attention, softmax_attention
    from kernelkit._util.device import resolve_device
    from kernelkit_math import attention as ref

    where = resolve_device("auto")
    T, D = (64 if quick else 1024), 64
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, T, D, generator=gen) for _ in range(3))
    exact = ref.softmax_attention(q.double().numpy(), k.double().numpy(), v.double().numpy())
    dtype = torch.bfloat16 if where == "cuda" else torch.float32
    q, k, v = (t.to(where, dtype) for t in (q, k, v))

    methods = [("softmax (online, exact)", lambda: softmax_attention(q, k, v))]
    for fm in ["elu+1", "favor+:256", "favor+orth:256", "hyp-favor+:128"]:
        methods.append((f"linear, feature map {fm}", lambda fm=fm: linear_attention(q, k, v, fm)))
    methods.append(("exact RBF-kernel smoother", lambda: kernel_attention(q, k, v, kernelkit.RBF(length_scale=8.0))))
    table = Table(("method", "device", "time", "relative error vs softmax"))
    errors = {}
    for label, fn in methods:
        fn()  # warm-up
        with _Timer() as t:
            out = fn()
            if where == "cuda":
                torch.cuda.synchronize()
        err = np.linalg.norm(out.double().cpu().numpy() - exact) / np.linalg.norm(exact)
        errors[label] = float(err)
        table.add(label, where, _s(t.seconds), f"{err:.2e}")
    return SectionResult(
        tables=[table],
        notes=[
            f"B=1, H=4, T=S={T}, D={D} random q, k, v ({str(dtype).replace('torch.', '')}). Softmax "
            "attention is the exponential-kernel smoother; random features (FAVOR+) approximate that "
            "kernel, elu+1 and RBF are different kernels altogether.",
        ],
        metrics={"T": T, "device": where, "relative_error": errors, "dtype": str(dtype)},
    )


SECTIONS = [
    Section("svc", "Support vector classification: kernelkit kernels inside SVC, and kernelkit.SVC",
            section_svc),
    Section("gp", "Gaussian process regression: optimised hyperparameters", section_gp),
    Section("grid", "GridSearchCV over kernel__length_scale", section_grid),
    Section("gram", "Gram matrices far from the origin, on whatever hardware is here", section_gram),
    Section("attention", "Attention as a kernel smoother: softmax vs linear vs exact kernels", section_attention),
]


def _versions_line():
    import scipy
    import sklearn

    import kernelkit

    return (
        f"kernelkit {kernelkit.__version__} | python {platform.python_version()} | "
        f"numpy {np.__version__} | scipy {scipy.__version__} | scikit-learn {sklearn.__version__}"
    )


def run_demo(sections=None, quick=False, file=None):
    """Run demo sections in order, print them, and return ``{name: SectionResult}``.

    Parameters
    ----------
    sections : list of str, default=None
        Names from :data:`SECTIONS` to run; ``None`` runs all of them.
    quick : bool, default=False
        Small data, for tests and a first look: several times faster than the full demo, whose
        Gaussian-process section's ARD fit takes the longest (timings: docs/benchmarks.md).
    file : text stream, default=None
        Where to print; ``None`` means ``sys.stdout``.

    Raises
    ------
    ValueError
        For an unknown section name.
    """
    file = sys.stdout if file is None else file
    known = {s.name: s for s in SECTIONS}
    names = list(known) if sections is None else list(sections)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown demo section(s) {unknown}; known: {', '.join(known)}")

    def say(text=""):
        print(text, file=file, flush=True)

    say("kernelkit demo: kernelkit kernels inside scikit-learn, compared with sklearn's own")
    say(_versions_line() + (" | quick mode" if quick else ""))
    results = {}
    t_total = time.perf_counter()
    order = list(known)
    for name in names:
        section, number = known[name], order.index(name) + 1  # stable numbers: "3." is always grid
        say()
        say(f"{number}. {section.title}")
        say("=" * (len(section.title) + len(str(number)) + 2))
        with _Timer() as t:
            result = section.run(quick)
        for table in result.tables:
            say(table.format())
        for note in result.notes:
            say(f"  {note}")
        say(f"  [{name}: {_s(t.seconds)}]")
        result.metrics["section_seconds"] = t.seconds
        results[name] = result
    say()
    say(f"Done: {len(names)} section(s) in {_s(time.perf_counter() - t_total)}.")
    return results
