"""Static scans of a learner's file (nothing is executed): forbidden helpers, and pristine stubs.

Honesty: an exercise asks for the function minilin already has. A task fails when its function uses, directly
or through the file's own helpers, a minilin name its chapter does not allow (`Chapter.allowed`) or anything
from `solutions`. Names are resolved through imports, aliases and attribute chains (`import minilin as m;
m.attention.softmax_attention`), re-exports are followed to where they are defined, and string-based imports
(`importlib.import_module("minilin.performer")`, `__import__`) count too. This scan gives the clear message
before anything runs; names it cannot see (built at run time, exec'd sources, peer libraries) are refused at run
time inside the sandbox, where each chapter's child can import only what the chapter allows (`child.Guard`).

Stubs: a stub's body is its docstring and `raise NotImplementedError(...)`. The course's pytest run applies its
"stub must fail" guard only to pristine stubs, and `release` writes task functions back to stubs.
"""
import ast
import importlib
import threading


_AST_LOCK = threading.Lock()


def parse(source, filename="<unknown>"):
    """ast.parse under one lock. A class is graded in a thread pool, and CPython 3.11's parser is not safe to run
    from several threads at once (concurrent parses raised "SystemError: AST constructor recursion depth mismatch")."""
    with _AST_LOCK:
        return ast.parse(source, filename=filename)


FORBIDDEN_ROOTS = ("minilin", "solutions")


def _is_ours(path):
    return path.split(".")[0] in FORBIDDEN_ROOTS


def canonical(path):
    """minilin.softmax_attention -> minilin.attention.softmax_attention (where the object is defined)."""
    parts = path.split(".")
    if parts[0] != "minilin":
        return path
    obj, i = None, len(parts)
    while i > 0:
        try:
            obj = importlib.import_module(".".join(parts[:i]))  # only minilin's own (trusted) modules
            break
        except (ImportError, ValueError):
            i -= 1
    if obj is None:
        return path
    for name in parts[i:]:
        if not hasattr(obj, name):
            return path
        obj = getattr(obj, name)
    if getattr(obj, "__qualname__", None) and getattr(obj, "__module__", None):
        return f"{obj.__module__}.{obj.__qualname__}"
    return getattr(obj, "__name__", path) if type(obj).__name__ == "module" else path


def forbidden(path, allowed):
    if path.split(".")[0] == "solutions":
        return True
    if path.split(".")[0] != "minilin":
        return False
    path = canonical(path)
    return not any(path == a or path.startswith(a + ".") for a in allowed)


class _Refs(ast.NodeVisitor):
    """Collects, for one unit of code: dotted references (path, line), strings naming our modules, and names."""

    def __init__(self, bindings):
        self.bindings, self.paths, self.names = bindings, [], set()

    def visit_Attribute(self, node):
        chain, inner = [], node
        while isinstance(inner, ast.Attribute):
            chain.append(inner.attr)
            inner = inner.value
        if isinstance(inner, ast.Name):
            self.names.add(inner.id)
            if inner.id in self.bindings:
                self.paths.append((".".join([self.bindings[inner.id]] + chain[::-1]), node.lineno))
            return
        self.generic_visit(node)

    def visit_Name(self, node):
        self.names.add(node.id)
        if node.id in self.bindings:
            self.paths.append((self.bindings[node.id], node.lineno))

    def visit_Expr(self, node):
        if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):  # not a docstring
            self.generic_visit(node)

    def visit_Constant(self, node):
        if isinstance(node.value, str) and _is_ours(node.value.strip()) and " " not in node.value.strip():
            self.paths.append((node.value.strip(), node.lineno))  # importlib.import_module("minilin.x")


def _bindings(tree):
    """Every import in the file (any scope): bound name -> dotted path; and star imports (path, line)."""
    names, stars = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else \
                    alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name == "*":
                    stars.append((node.module, node.lineno))
                else:
                    names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names, stars


def _bound_by(stmt):
    out = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {a.asname or a.name.split(".")[0] for a in node.names}
    return out


def scan(source, functions, allowed=()):
    """{function name: message} for each of `functions` that uses a forbidden name. `source` must parse."""
    tree = parse(source)
    bindings, stars = _bindings(tree)
    units = {}  # top-level name -> (forbidden (path, line) list, referenced names)
    everything = []  # forbidden uses at module level that bind no name: they taint every function
    for path, line in stars:
        if _is_ours(path) and forbidden(path + ".*", allowed):
            everything.append((f"from {path} import *", line))
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):  # `from minilin.x import y as <task function>`
            for name in _bound_by(stmt) & set(functions):
                if bindings.get(name) and forbidden(bindings[name], allowed):
                    units.setdefault(name, ([], set()))[0].append((bindings[name], stmt.lineno))
            continue
        refs = _Refs(bindings)
        refs.visit(stmt)
        bad = [(p, line) for p, line in refs.paths if forbidden(p, allowed)]
        bound = _bound_by(stmt) if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
            else {stmt.name}
        if bad and not bound:
            everything.extend(bad)
        for name in bound:
            found, names = units.setdefault(name, ([], set()))
            found.extend(bad)
            names |= refs.names - {name}
    report = {}
    for function in functions:
        seen, todo, found = set(), [function], list(everything)
        while todo:
            name = todo.pop()
            if name in seen or name not in units:
                continue
            seen.add(name)
            found += units[name][0]
            todo += list(units[name][1])
        if found:
            path, line = min(found, key=lambda p: p[1])
            what = "the reference solutions" if path.startswith("solutions") else "the package's reference"
            helpers = ", ".join(allowed) if allowed else "no minilin helpers"
            report[function] = (f"{function} uses {path} (line {line}), {what}: write it yourself "
                                f"(this chapter allows {helpers})")
    return report


# --- stubs ---------------------------------------------------------------------------------------
def _body_without_docstring(func):
    body = func.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
            isinstance(body[0].value.value, str):
        body = body[1:]
    return body


def is_stub(func):
    """True when a FunctionDef is only a docstring and `raise NotImplementedError(...)`."""
    body = _body_without_docstring(func)
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def top_level_functions(source):
    return {n.name: n for n in parse(source).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def pristine(source, functions):
    """True when every one of `functions` exists and is still a stub (False for a file that does not parse)."""
    try:
        defs = top_level_functions(source)
    except (SyntaxError, ValueError):
        return False
    return all(name in defs and is_stub(defs[name]) for name in functions)


def stubify(source, tasks_of):
    """`source` with each function in {name: task id} reduced to its docstring + raise NotImplementedError."""
    lines = source.splitlines(keepends=True)
    defs = top_level_functions(source)
    for name in sorted(tasks_of, key=lambda n: -defs[n].lineno if n in defs else 0):
        func = defs.get(name)
        if func is None or is_stub(func):
            continue
        body = _body_without_docstring(func)
        indent = " " * (func.body[0].col_offset if func.body else func.col_offset + 4)
        start = body[0].lineno - 1 if body else func.end_lineno
        lines[start:func.end_lineno] = [f'{indent}raise NotImplementedError("Task {tasks_of[name]}")\n']
    return "".join(lines)
