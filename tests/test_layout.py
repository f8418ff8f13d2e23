"""The package's architecture, checked: import layers, no cycles, no imports hidden in functions.

The folders are layers, lowest first; a module imports only from its own layer or lower ones:

    errors, recbole_compat        what everything may use: the error type, the wall around RecBole's internals
    runtime, kernels              processes and devices; sparse torch kernels
    evaluation                    tie-fair evaluation of the split's candidates, metrics, early stopping
    config                        settings (checked before torch is imported), RecBole's Config, model lookup
    storage                       atomic code-free files, data fingerprints, run records (and where they go)
    data                          atomic files, the item split, samplers, loaders, item features
    models                        the recommenders, their fitted inputs, the warm backbone
    training                      the trainer, the run's log
    artifact                      the model artifact
    quick_start                   one run: prepare, train, test, write
    experiments, serve, convert   several runs, serving, converting
    cli, __main__                 the command line (a package's __main__ too: ``python -m`` runs the command line)
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "recbole_fbsm"
LAYERS = [
    {"errors", "recbole_compat"},
    {"runtime", "kernels"},
    {"evaluation"},
    {"config"},
    {"storage"},
    {"data"},
    {"models"},
    {"training"},
    {"artifact"},
    {"quick_start"},
    {"experiments", "serve", "convert"},
    {"cli", "__main__", "__init__"},
]
LAYER_OF = {unit: k for k, units in enumerate(LAYERS) for unit in units}
# The command line imports its heavy modules only once the arguments are parsed: --help and a mistyped setting
# answer in a fraction of a second, before torch is imported (tests/cli/test_cli_help.py).
LAZY_IMPORTS_ALLOWED = {
    f"recbole_fbsm.cli.{name}" for name in ("datasets", "experiments", "run", "serve", "serve_commands")
}


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path


def plugin_imports(name, path):
    """(imported module, line, inside a function?) for every import of a recbole_fbsm module."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend(
                    (alias.name, child.lineno, in_function)
                    for alias in child.names
                    if alias.name.startswith("recbole_fbsm")
                )
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    base = ".".join(
                        package.split(".")[: len(package.split(".")) - child.level + 1] + ([base] if base else [])
                    )
                if base.startswith("recbole_fbsm"):
                    for alias in child.names:  # `from recbole_fbsm.x import y`: y may be a module
                        candidate = f"{base}.{alias.name}"
                        found.append((candidate if _is_module(candidate) else base, child.lineno, in_function))
            visit(child, nested)

    visit(tree, False)
    return found


def _is_module(dotted):
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def unit(module):
    parts = module.split(".")
    return "__main__" if parts[-1] == "__main__" else parts[1] if len(parts) > 1 else "__init__"


def test_every_top_level_unit_has_a_layer():
    units = {unit(name) for name, _ in modules()}
    assert units <= set(LAYER_OF), sorted(units - set(LAYER_OF))


def test_the_tests_mirror_the_package_folders():
    """tests/<folder>/ holds the tests of recbole_fbsm/<folder>/ (tests/benchmarks/: of benchmarks/), so a module's
    tests are found under its folder's name; tests/ itself: shared helpers, whole-repository checks and the tests of
    the package's top-level modules (test_quick_start.py, test_recbole_compat.py)."""
    tests = Path(__file__).resolve().parent
    folders = {path.relative_to(tests).parts[0] for path in tests.rglob("test_*.py") if path.parent != tests}
    package_folders = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert folders <= package_folders | {"benchmarks"}, sorted(folders - package_folders - {"benchmarks"})


def test_imports_go_down_the_layers_never_up():
    upward = [
        f"{name}:{line} imports {target}"
        for name, path in modules()
        for target, line, _ in plugin_imports(name, path)
        if LAYER_OF[unit(target)] > LAYER_OF[unit(name)]
    ]
    assert not upward, "\n".join(upward)


def test_no_plugin_import_hides_in_a_function():
    hidden = [
        f"{name}:{line} imports {target}"
        for name, path in modules()
        for target, line, inside in plugin_imports(name, path)
        if inside and name not in LAZY_IMPORTS_ALLOWED
    ]
    assert not hidden, "\n".join(hidden)


def test_no_import_cycle():
    graph = {name: {t for t, _, inside in plugin_imports(name, path) if t != name} for name, path in modules()}
    state, cycles = {}, []

    def walk(node, stack):
        state[node] = "open"
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                cycles.append(" -> ".join(stack[stack.index(target) :] + [target]))
            elif target not in state:
                walk(target, stack + [target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            walk(node, [node])
    assert not cycles, "\n".join(cycles)


def comment_above(lines, line):
    """The first line of the comment block that ends just above ``line`` (1-based), or ''."""
    start = line - 1
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    return lines[start].lstrip() if start < line - 1 else ""


def test_no_function_is_longer_than_60_lines_without_a_reason_beside_it():
    """A long function says why in the comment just above its ``def``: ``# longer than 60 lines: ...`` (the
    comment may go on over the next lines, as the formatter's line length asks)."""
    long = []
    for name, path in modules():
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if not comment_above(lines, first).startswith("# longer than 60 lines:"):
                    long.append(f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not long, "\n".join(long)
