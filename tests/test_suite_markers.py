"""The markers of the fast local loop (``-m "not interpreter and not subprocess"``) are honest:
every test that starts a Python process carries ``subprocess``, so leaving them out leaves out
exactly the slow process-spawning tests, never by accident an untested path."""

import ast
import pathlib

import pytest

TESTS = pathlib.Path(__file__).resolve().parent


def _spawns_process(fn, functions, seen=()):
    """True when ``fn`` calls subprocess.*, directly or through a helper of its module."""
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "subprocess":
            return True
        name = f.id if isinstance(f, ast.Name) else None
        if name in functions and name not in seen and _spawns_process(functions[name], functions,
                                                                      seen + (name,)):
            return True
    return False


def _has_marker(fn, marker):
    for dec in fn.decorator_list:
        text = ast.unparse(dec)
        if text == f"pytest.mark.{marker}":
            return True
    return False


@pytest.mark.parametrize("path", sorted(TESTS.glob("test_*.py")), ids=lambda p: p.name)
def test_process_spawning_tests_are_marked(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    unmarked = [name for name, fn in functions.items() if name.startswith("test_")
                and _spawns_process(fn, functions) and not _has_marker(fn, "subprocess")]
    assert unmarked == [], f"add @pytest.mark.subprocess to {unmarked}"
