"""Importing kernelkit stays cheap and never pulls in torch or triton."""

import subprocess
import sys

import pytest

HEAVY = ("torch", "triton")


def run_python(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


@pytest.mark.subprocess
@pytest.mark.parametrize("package", ["kernelkit", "kernelkit_math"])
def test_import_does_not_load_heavy_modules(package):
    out = run_python(f"import sys, {package}; print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    assert out.strip() == "[]"


@pytest.mark.subprocess
def test_kernelkit_math_does_not_import_sklearn_or_torch():
    out = run_python("import sys, kernelkit_math; print('sklearn' in sys.modules, 'torch' in sys.modules)")
    assert out.strip() == "False False"


def _import_seconds(statement, repeats=5):
    code = (
        "import time; t = time.perf_counter(); "
        f"{statement}; print(time.perf_counter() - t)"
    )
    return min(float(run_python(code)) for _ in range(repeats))


@pytest.mark.subprocess
def test_import_overhead_over_sklearn_is_small():
    base = "import sklearn.metrics.pairwise, sklearn.gaussian_process.kernels"
    before = _import_seconds(base)
    after = _import_seconds(base + "; import kernelkit")
    assert after - before <= 0.3, f"import kernelkit adds {after - before:.3f} s"


def _module_graph(root, packages=("kernelkit", "kernelkit_gpu", "kernelkit_math")):
    """Module -> the project modules it imports (at module level or inside functions)."""
    import ast

    graph = {}
    modules = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            found = []
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # "from pkg import sub" imports the module pkg.sub when there is one
                found = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules
                         else node.module for alias in node.names]
            targets.update(t for t in found if t in modules and t != name)
        graph[name] = targets
    return graph


def _cycles(graph):
    """Every strongly connected component with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    """No two project modules import each other, directly or through others, not even inside
    functions (issue 11): each layer imports only those below it. A package's __init__ counts
    as its own module (importing a.b from inside a does not count as a -> a.b -> a)."""
    import pathlib

    graph = _module_graph(pathlib.Path(__file__).resolve().parents[1])
    assert "kernelkit.cli.entry" in graph and "kernelkit.attention._dispatch" in graph
    assert _cycles(graph) == []


def test_no_module_shares_its_name_with_an_exported_function():
    """A package never imports a function under the name of one of its own submodules (issue 11):
    ``kernelkit_gpu.gram`` is the function, and the module that defines it has another name."""
    import ast
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    inits = sorted(root.glob("kernelkit*/**/__init__.py"))
    clashes = []
    for init in inits:
        package = ".".join(init.parent.relative_to(root).parts)
        submodules = {p.stem for p in init.parent.glob("*.py")} | {
            p.parent.name for p in init.parent.glob("*/__init__.py")}
        for node in ast.parse(init.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module != package:
                clashes += [f"{package}.{a.asname or a.name}" for a in node.names
                            if (a.asname or a.name) in submodules]
    assert len(inits) >= 8
    assert clashes == []


#: kernelkit's rooms by floor (issue 38): a module imports only modules of its own room or of
#: rooms on lower floors. The faces (kernel classes, pairwise functions, gram) sit above the
#: utilities; linear algebra sees matvecs and operators through their methods only.
FLOORS = {
    "kernelkit._util": 0, "kernelkit.linalg": 1, "kernelkit.distributed": 1,
    "kernelkit._compute": 2, "kernelkit._gram_sharded": 2, "kernelkit._kernel_base": 3,
    "kernelkit.kernels": 3, "kernelkit.pairwise": 3, "kernelkit.blocked_gram": 3,
    "kernelkit.operators": 4, "kernelkit.attention": 4, "kernelkit.estimators": 5,
    "kernelkit.cli": 6, "kernelkit.__main__": 7,
}
#: Arrows that still run up, each an open item of docs/decisions.md.
UPWARD_EXCEPTIONS = set()


def _room(module):
    return next((room for room in FLOORS if module == room or module.startswith(room + ".")),
                None)


def test_rooms_import_downward():
    import pathlib

    graph = _module_graph(pathlib.Path(__file__).resolve().parents[1])
    assert all(_room(m) for m in graph if m.startswith("kernelkit.")), "a module without a room"
    upward = sorted({(_room(a), _room(b)) for a, targets in graph.items() for b in targets
                     if _room(a) and _room(b) and _room(a) != _room(b)
                     and FLOORS[_room(b)] > FLOORS[_room(a)]})
    assert [edge for edge in upward if edge not in UPWARD_EXCEPTIONS] == []


def test_kernelkit_imports_no_private_module_of_kernelkit_gpu():
    """kernelkit uses kernelkit_gpu's public modules only (underscore modules are its own)."""
    import pathlib

    graph = _module_graph(pathlib.Path(__file__).resolve().parents[1])
    private = sorted((a, b) for a, targets in graph.items() if a.startswith("kernelkit.")
                     for b in targets if b.startswith("kernelkit_gpu")
                     and any(part.startswith("_") for part in b.split(".")[1:]))
    assert private == []
    linalg_attention = sorted((a, b) for a, targets in graph.items()
                              if a.startswith("kernelkit.linalg") for b in targets
                              if "attention" in b)
    assert linalg_attention == [], "the solver imports nothing from attention"
