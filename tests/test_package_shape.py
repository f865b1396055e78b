"""The package's shape: no import cycle between minilin's modules, and no file too long to read.

The import graph counts every `import` statement naming a minilin module, at module level *and* inside
functions. A function-level import is still a dependency: it is how two modules that need each other usually
hide the loop (bench's `main` imported plots while plots imported bench), and the two then cannot be read,
tested or changed one without the other. An edge goes to the most specific module named
(`from minilin.bench.results import series` -> minilin.bench.results; `from minilin import plots` ->
minilin.plots; `from minilin import softmax_attention` -> minilin). Python also runs a package's __init__ before
its submodules; that is not counted as an import the submodule makes.
"""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "minilin"
MAX_LINES = 450


def module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules():
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(name, path, known):
    """The minilin modules that the file `path` (module `name`) imports anywhere in its code."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . import x, from ..bench import y
                base = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import minilin.bench.results as r` names a known module;
                target = target.rpartition(".")[0]  # an attribute path falls back to its module
            if target.startswith("minilin") and target != name:
                found.add(target)
    return found


def import_graph():
    known = modules()
    return {name: imported_modules(name, path, known) for name, path in known.items()}


def find_cycle(graph):
    """One import cycle as a list of module names [a, b, ..., a], or None (depth-first search)."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_graph_sees_function_level_and_relative_imports(tmp_path):
    # the checker itself: a cycle through a function-level import is found, a clean graph passes
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    source = tmp_path / "m.py"
    source.write_text("import os\nfrom minilin.bench import results\n\ndef f():\n    from minilin import plots\n"
                      "    import minilin.bench.sweep as s\n    from minilin import softmax_attention\n")
    known = {"minilin", "minilin.plots", "minilin.bench", "minilin.bench.results", "minilin.bench.sweep"}
    assert imported_modules("minilin.m", source, known) == {"minilin.bench.results", "minilin.plots",
                                                             "minilin.bench.sweep", "minilin"}


def test_no_import_cycle():
    graph = import_graph()
    assert "minilin.bench.results" in graph["minilin.plots"]  # the graph is the real one
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle)} (move the shared part into a module both can import)"


def test_plots_reads_only_the_results_of_the_bench():
    # and its names (the method-name grammar over the registry), never the code that runs a sweep
    graph = import_graph()
    assert {m for m in graph["minilin.plots"] if m.startswith("minilin.bench")} <= {"minilin.bench.results",
                                                                                    "minilin.bench.names"}
    assert not any(m.startswith("minilin") for m in graph["minilin.bench.results"])
    assert graph["minilin.bench.names"] == {"minilin.variants"}


def test_the_registry_imports_no_variant():
    # variants name their modules and builders by dotted path, imported on first use: no cycle can run through it
    assert not any(m.startswith("minilin") for m in import_graph()["minilin.variants"])


def test_no_file_is_too_long():
    lengths = {str(p.relative_to(PACKAGE.parent)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    too_long = {path: n for path, n in sorted(lengths.items()) if n > MAX_LINES}
    assert not too_long, f"split these files (at most {MAX_LINES} lines each, one concept per file): {too_long}"
