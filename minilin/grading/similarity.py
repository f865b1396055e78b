"""The teacher's similarity report: pairs of submissions (and the reference solutions) whose graded functions are
near-copies after normalisation. It changes no points; it names pairs for a person to look at.

    python -m minilin grade --submissions submissions/ --out gradebook.csv --similarity similarity.csv

Per task function (with the file's own helpers it calls, other tasks' functions left out), the source is parsed
and normalised: docstrings, comments and formatting go (the AST has none), every name the file binds (arguments,
locals, its helpers) becomes a placeholder numbered in order of first use, while imported modules, attributes
(`.transpose`), keywords and constants stay. Two normalised functions that are equal are "identical after
normalisation"; two whose node sequences match at SIMILAR or more (difflib's ratio) are a "near copy".
Functions shorter than MIN_NODES nodes are not compared: a one-line answer is the same in every honest file.

It cannot see: a copy rewritten by hand (statements reordered, loops turned into comprehensions, another API
for the same step), a copy of a source outside the class, or code shared as an idea. It can flag: two honest
solutions of a short, tightly specified function that happen to be written the same way.
"""
import ast
import builtins
import difflib
import itertools
from pathlib import Path

from minilin.grading import honesty, submission

COLUMNS = ("task", "function", "first", "second", "similarity", "verdict")
SIMILAR = 0.9  # difflib ratio of the normalised node sequences at or above which a pair is flagged
MIN_NODES = 40  # functions smaller than this (in AST nodes) are not compared
REFERENCE = "reference (solutions/)"


class _Normalise(ast.NodeTransformer):
    """Names the file binds -> v0, v1, ... in order of first use; docstrings dropped."""

    def __init__(self, bound, aliases):
        self.bound, self.aliases, self.names = bound, aliases, {}

    def _name(self, name):
        if name not in self.bound:
            return self.aliases.get(name, name)  # `import torch.nn.functional as F`: F and nn.functional alike
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node):
        return ast.copy_location(ast.Name(id=self._name(node.id), ctx=node.ctx), node)

    def visit_arg(self, node):
        return ast.copy_location(ast.arg(arg=self._name(node.arg)), node)

    def _function(self, node):
        node.name = self._name(node.name)
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
                isinstance(body[0].value.value, str):
            body = body[1:] or [ast.Pass()]
        node.body, node.decorator_list, node.returns = body, [], None
        return self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_Expr(self, node):  # a bare string (a comment written as a string) says nothing
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return None
        return self.generic_visit(node)


def _aliases(tree):
    """{name an import binds: what it imports}, e.g. {"F": "torch.nn.functional", "sqrt": "math.sqrt"}."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update({a.asname or a.name.split(".")[0]: a.name if a.asname else a.name.split(".")[0]
                        for a in node.names})
        elif isinstance(node, ast.ImportFrom):
            out.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
    return out


def _bound(tree):
    """Names the file itself binds (functions, arguments, assignments), not imports or builtins."""
    imported = set(_aliases(tree))
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
    return bound - imported - set(dir(builtins))


def _tokens(node):
    """The node as a flat sequence: node types, and the names, attributes and constants they hold."""
    out = []
    for child in ast.walk(node):
        out.append(type(child).__name__)
        for field in ("id", "arg", "attr", "name"):
            value = getattr(child, field, None)
            if isinstance(value, str):
                out.append(value)
        if isinstance(child, ast.Constant):
            out.append(repr(child.value))
    return out


def normalised(source, functions):
    """{function: (normalised text, tokens)} for the `functions` a file defines, each with the file's own helpers
    it reaches (other graded functions left out). Unparsable files and absent functions give nothing."""
    try:
        tree = honesty.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    bound, out = _bound(tree), {}
    for name in functions:
        if name not in defs:
            continue
        reached, todo = [name], [name]
        while todo:  # the file's helpers, in the order the function reaches them
            for used in sorted({n.id for n in ast.walk(defs[todo.pop(0)]) if isinstance(n, ast.Name)}):
                if used in defs and used not in reached and used not in functions:
                    reached.append(used)
                    todo.append(used)
        module = ast.Module(body=[ast.parse(ast.unparse(defs[f])).body[0] for f in reached], type_ignores=[])
        module = _Normalise(bound, _aliases(tree)).visit(module)
        out[name] = (ast.dump(module, annotate_fields=False), _tokens(module))
    return out


def _sources(folder, chapters):
    """{chapter file: source} of a submission, found the way the grader finds them (submission.locate)."""
    found, out = submission.locate(folder, chapters), {}
    for chapter in chapters:
        path = found.files.get(chapter.file) or found.base / chapter.file
        try:
            if path.is_file() and not path.is_symlink() and path.stat().st_size <= 1 << 20:
                out[chapter.file] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return out


def compare(folders, tasks, reference=None):
    """Flagged pairs as rows (dicts of COLUMNS) and the number of pairs compared, for `folders` ({name: path}),
    the graded `tasks` and optionally the reference solutions' folder (named REFERENCE)."""
    from minilin.grading.course import CHAPTERS
    chapters = [CHAPTERS[n] for n in dict.fromkeys(t.chapter for t in tasks)]
    named = dict(folders)
    if reference is not None:
        named = {REFERENCE: reference, **named}
    sources = {name: _sources(Path(path), chapters) for name, path in named.items()}
    rows, compared = [], 0
    for task in tasks:
        file = CHAPTERS[task.chapter].file
        forms = {name: normalised(src[file], task.functions) for name, src in sources.items() if file in src}
        for function in task.functions:
            have = [(name, forms[name][function]) for name in forms if function in forms[name]
                    and len(forms[name][function][1]) >= MIN_NODES]
            for (a, (text_a, tok_a)), (b, (text_b, tok_b)) in itertools.combinations(have, 2):
                compared += 1
                if text_a == text_b:
                    score, verdict = 1.0, "identical after normalisation"
                else:
                    matcher = difflib.SequenceMatcher(None, tok_a, tok_b, autojunk=False)
                    if matcher.real_quick_ratio() < SIMILAR or matcher.quick_ratio() < SIMILAR:
                        continue
                    score, verdict = matcher.ratio(), "near copy"
                    if score < SIMILAR:
                        continue
                rows.append({"task": task.id, "function": function, "first": a, "second": b,
                             "similarity": f"{score:.3f}", "verdict": verdict})
    return rows, compared
