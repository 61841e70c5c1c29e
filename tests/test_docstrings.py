"""Docstrings say what the code does: kernel and feature-map lists come from their registries,
claims are checked.

- every list of kernels in a docstring of kernelkit, kernelkit_gpu or kernelkit_math that names
  more than half of the registry names all of its kernels, or all of those with one registry flag
  (``psd``, ``normalized``, ``stationary``): a hand-written list that a new kernel leaves behind
  fails here; the lists are rendered by ``kernelkit_math.registry.kernel_list_doc``;
- every list of three or more feature maps names all the maps of the feature-map registry, or
  all of those with one value of a row attribute (fused or not, sized or not, a sign, a kernel):
  the lists are rendered by ``kernelkit_math.random_features.feature_map_list_doc``;
- no docstring keeps an unfilled ``{placeholder}`` of ``fill_doc``;
- ``kernelkit._compute`` names exactly the modules that use it;
- CONTRIBUTING.md's add-a-kernel checklist names files that exist.
"""

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import kernelkit
import kernelkit_gpu
import kernelkit_math
from kernelkit_math.random_features import FEATURE_MAPS, feature_map_list_doc
from kernelkit_math.registry import REGISTRY, fill_doc, kernel_list_doc, kernel_names

ROOT = Path(__file__).resolve().parents[1]
#: Registry names further apart than this (whitespace collapsed) are not one list.
LIST_GAP = 40


def _modules():
    for package in (kernelkit, kernelkit_gpu, kernelkit_math):
        yield package
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not info.name.endswith("__main__"):  # runs the command line
                yield importlib.import_module(info.name)


def _docstrings():
    """``{qualified name: docstring}`` of every module and of the public functions, classes and
    methods defined in them (private modules included: their functions are re-exported)."""
    docs = {}
    for module in _modules():
        docs[module.__name__] = module.__doc__
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isfunction(obj) or inspect.isclass(obj):
                docs[f"{module.__name__}.{name}"] = obj.__doc__
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if inspect.isfunction(member) and (attr == "__call__" or not attr.startswith("_")):
                        docs[f"{module.__name__}.{name}.{attr}"] = member.__doc__
    return {name: doc for name, doc in docs.items() if doc}


DOCSTRINGS = _docstrings()
_NAME = re.compile(r"\b(" + "|".join(sorted(kernel_names(), key=len, reverse=True)) + r")\b")


def kernel_lists(doc):
    """Runs of registry names, each name at most :data:`LIST_GAP` characters from the last."""
    text = " ".join(doc.split())
    runs, last_end = [], None
    for match in _NAME.finditer(text):
        if last_end is None or match.start() - last_end > LIST_GAP:
            runs.append(set())
        runs[-1].add(match.group(1))
        last_end = match.end()
    return runs


#: The kernel sets a list may name: all kernels, or those with one registry flag.
REGISTRY_SETS = {"all": set(REGISTRY)} | {
    flag: {name for name, spec in REGISTRY.items() if getattr(spec, flag)}
    for flag in ("psd", "normalized", "stationary")
}
LONG_LISTS = {name: runs for name, doc in DOCSTRINGS.items()
              if (runs := [r for r in kernel_lists(doc) if 2 * len(r) > len(REGISTRY)])}
@pytest.mark.parametrize("qualname", sorted(LONG_LISTS))
def test_kernel_lists_match_the_registry(qualname):
    for run in LONG_LISTS[qualname]:
        assert run in REGISTRY_SETS.values(), (
            f"{qualname} lists {sorted(run)}; the registry's kernels are {sorted(REGISTRY)} "
            f"(missing {sorted(set(REGISTRY) - run)}): render the list with kernel_list_doc()")


def test_the_list_finder_finds_lists():
    assert LONG_LISTS, "no docstring lists the kernels: the finder is broken"
    assert "kernelkit.pairwise.pairwise_kernels" in LONG_LISTS
    assert kernel_lists("rbf (default), laplacian, matern and periodic; far away " + "x" * 50
                        + " linear") == [{"rbf", "laplacian", "matern", "periodic"}, {"linear"}]


def test_pairwise_kernels_lists_every_registry_kernel():
    doc = " ".join(kernelkit.pairwise.pairwise_kernels.__doc__.split())
    assert kernel_list_doc() in doc
    assert all(f'``"{name}"``' in doc for name in REGISTRY)


# ------------------------------------------------------------------------------ feature maps
#: A feature-map name, not inside another one (relu in relu2, favor+ in hyp-favor+ / favor+orth).
_MAP_NAME = re.compile(r"(?<![\w+-])(" + "|".join(
    re.escape(n) for n in sorted(FEATURE_MAPS, key=len, reverse=True)) + r")(?![\w+])")
#: Lists of this many maps or more are checked (two, "identity and rff", is prose).
MAP_LIST_MIN = 3


def map_lists(doc):
    """Runs of feature-map names, each at most :data:`LIST_GAP` characters from the last."""
    text = " ".join(doc.split())
    runs, last_end = [], None
    for match in _MAP_NAME.finditer(text):
        if last_end is None or match.start() - last_end > LIST_GAP:
            runs.append(set())
        runs[-1].add(match.group(1))
        last_end = match.end()
    return runs


def _map_sets():
    """All maps, and the maps of each value of a row attribute (and the unsigned ones)."""
    values = {
        "fused": lambda spec: spec.fused is not None, "sized": lambda spec: spec.sized,
        "sign": lambda spec: spec.sign, "unsigned": lambda spec: spec.sign != "signed",
        "kernel": lambda spec: spec.kernel,
    }
    sets = {"all": set(FEATURE_MAPS)}
    for attribute, value_of in values.items():
        for value in {value_of(spec) for spec in FEATURE_MAPS.values()}:
            sets[f"{attribute}={value}"] = {name for name, spec in FEATURE_MAPS.items()
                                            if value_of(spec) == value}
    return sets


MAP_SETS = _map_sets()
MAP_LISTS = {name: runs for name, doc in DOCSTRINGS.items()
             if (runs := [r for r in map_lists(doc) if len(r) >= MAP_LIST_MIN])}


@pytest.mark.parametrize("qualname", sorted(MAP_LISTS))
def test_feature_map_lists_match_the_registry(qualname):
    for run in MAP_LISTS[qualname]:
        assert run in MAP_SETS.values(), (
            f"{qualname} lists {sorted(run)}; the registry's maps are {sorted(FEATURE_MAPS)}: "
            "render the list with feature_map_list_doc()")


def test_the_map_list_finder_finds_lists():
    assert "kernelkit.attention._dispatch.linear_attention" in MAP_LISTS
    assert "kernelkit_math.attention.linear_attention" in MAP_LISTS
    text = "elu+1, relu and favor+:64; far away " + "x" * 50 + " hyp-favor+:8, favor+orth, relu2"
    runs = map_lists(text)
    assert runs[0] == {"elu+1", "relu", "favor+"}
    assert runs[1] - {"relu2"} == {"hyp-favor+", "favor+orth"}  # relu2: a name where registered
    assert all(s in MAP_SETS.values() for s in map_lists(feature_map_list_doc(sized=True)))
    assert {"elu+1", "relu", "favor+"} not in MAP_SETS.values()  # a hand-written list fails


def test_no_placeholder_is_left_unfilled():
    placeholder = re.compile(r"(?<![\\\w^_])\{[a-z_]+\}")  # not LaTeX (\text{...}) nor sets
    documented = {"kernelkit_math.registry.fill_doc"}  # explains the placeholders
    left = {name: placeholder.findall(doc) for name, doc in DOCSTRINGS.items()
            if name not in documented and placeholder.search(doc)}
    assert not left


def test_fill_doc_rewraps_the_paragraph_and_leaves_other_braces():
    @fill_doc(kernels=kernel_list_doc())
    def f():
        r"""Summary {0.5, 1.5}.

        Parameters
        ----------
        metric : str
            One of {kernels}; \text{x}.
        """

    lines = f.__doc__.split("\n")
    assert lines[0] == "Summary {0.5, 1.5}."
    body = [line for line in lines if "``" in line]
    assert all(line.startswith(" " * 12) and len(line) <= 96 for line in body)
    assert " ".join(" ".join(body).split()) == f"One of {kernel_list_doc()}; \\text{{x}}."


# ------------------------------------------------------------------------- kernelkit._compute
def _importers(module):
    """Modules of kernelkit whose source imports ``module``."""
    out = set()
    for path in (ROOT / "kernelkit").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == module or (
                    isinstance(node, ast.Import) and module in [a.name for a in node.names]):
                out.add(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return out


def test_compute_names_exactly_the_modules_that_use_it():
    """kernelkit._compute's docstring says who evaluates kernels through it (it used to claim
    to be "the one place" kernels are evaluated, which blocked_gram, the solvers and the GP are
    not); the modules it names as its users are the ones that import it."""
    import kernelkit._compute as compute

    users = re.search(r"Used by (.*?), and by nothing else", " ".join(compute.__doc__.split()))
    named = set(re.findall(r":mod:`(kernelkit\.[\w.]+)`", users.group(1)))
    assert named == _importers("kernelkit._compute")
    assert "one place" not in compute.__doc__


# ---------------------------------------------------------------------------- CONTRIBUTING.md
def test_contributing_names_files_that_exist():
    text = (ROOT / "CONTRIBUTING.md").read_text()
    paths = set(re.findall(r"`((?:kernelkit\w*|tests|benchmarks|\.ci)/[\w./-]+)`", text))
    assert {"kernelkit_math/kernels.py", "kernelkit_math/registry.py", "kernelkit_gpu/epilogues.py",
            "kernelkit/kernels.py"} <= paths
    assert [p for p in sorted(paths) if not (ROOT / p).exists()] == []


def test_library_code_names_no_hardware_and_no_dates():
    """Measured figures live in docs/benchmarks.md with their device and date (issue 38); the
    library's docstrings and comments link there instead of naming a GPU model or a day."""
    pattern = re.compile(r"\b(H100|H200|A100|20\d\d-\d\d-\d\d)\b")
    found = [f"{path.relative_to(ROOT)}:{number}"
             for package in ("kernelkit", "kernelkit_gpu", "kernelkit_math")
             for path in sorted((ROOT / package).rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if pattern.search(line)]
    assert found == []
