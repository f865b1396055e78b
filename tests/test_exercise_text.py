"""The exercise files' text: one hint format, hints that teach without handing over the solution's code, no
solution statement in an exercise file or (for an extend task) in a notebook, enough extend tasks per chapter,
and hint names that the exercise file can use.

Each rule is a function returning its offenders, run on the course's files and, on a small planted text, shown
able to fail.
"""
import ast
import importlib
import json
import re
import sys
from pathlib import Path

import pytest

from minilin.grading.course import CHAPTERS, COURSE_CHAPTERS, TASKS, task_key

ROOT = Path(__file__).resolve().parent.parent
TIERS = ("Hint 1 (nudge):", "Hint 2 (plan):", "Hint 3 (formula):")
HINT_LINE = re.compile(r"^\s*Hint\s*(\d)\b.*?:", re.M)  # any line that starts a hint, in whatever form
MIN_STATEMENT = 25  # characters, whitespace normalised: a shorter statement (`return out`) gives nothing away
MIN_EXTEND = 2  # extend tasks per chapter
SPAN = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(r"(?<![\w.])([A-Za-z_]\w*)((?:\.[A-Za-z_]\w*)+)")
MODULE_LIKE = set(sys.stdlib_module_names) | {"torch", "F", "nn", "np", "numpy", "minilin", "einops", "scipy",
                                             "math", "functools", "itertools"}


def exercise_files():
    return [ROOT / "exercises" / chapter.file for chapter in CHAPTERS.values()]


def course_text(path):
    """An exercise file's text as the course ships it: the file while its task functions are the stubs (always in
    the course's CI, MINILIN_REQUIRE_STUBS=1); for a learner who has started, git's committed copy (their work
    keeps its hints, but a solved file need not); without git, the rules skip."""
    import os
    import subprocess

    import pytest

    from minilin.grading.honesty import pristine
    text = path.read_text(encoding="utf-8")
    if os.environ.get("MINILIN_REQUIRE_STUBS") or pristine(text, task_functions(path.name)):
        return text
    committed = subprocess.run(["git", "-C", str(ROOT), "show", f"HEAD:exercises/{path.name}"],
                               capture_output=True, text=True)
    if committed.returncode == 0 and pristine(committed.stdout, task_functions(path.name)):
        return committed.stdout
    pytest.skip(f"exercises/{path.name} holds your work and git has no committed stub of it: these rules check "
                "the course's own exercise text")


def task_functions(file_name):
    return [f for chapter in CHAPTERS.values() if chapter.file == file_name for t in chapter.tasks.values()
            for f in t.functions]


def docstrings(source, functions):
    """{function: its docstring} for the top-level `functions` of `source` (those it defines)."""
    return {node.name: ast.get_docstring(node) or "" for node in ast.parse(source).body
            if isinstance(node, ast.FunctionDef) and node.name in functions}


def squash(text):
    return re.sub(r"\s+", "", text)


# --- a. one hint format; tier 3 holds no code --------------------------------------------------------------
def hint_tiers(doc):
    """{tier number: its text (the first line and the indented lines after it)} of a docstring's hints."""
    tiers, lines = {}, doc.splitlines()
    for i, line in enumerate(lines):
        if m := HINT_LINE.match(line):
            indent = len(line) - len(line.lstrip())
            body = [line.strip()]
            for more in lines[i + 1:]:
                if not more.strip() or len(more) - len(more.lstrip()) <= indent:
                    break
                body.append(more.strip())
            tiers.setdefault(int(m[1]), []).append(" ".join(body))
    return tiers


def hint_format_problems(name, doc):
    """The ways a task docstring departs from the one format: three tiers, each once, in order, named exactly."""
    problems, tiers = [], hint_tiers(doc)
    for number, head in enumerate(TIERS, 1):
        found = tiers.get(number, [])
        if len(found) != 1:
            problems.append(f"{name}: {len(found)} lines starting {head!r} (expected exactly one)")
        elif not found[0].startswith(head):
            problems.append(f"{name}: tier {number} starts {found[0][:30]!r}, expected {head!r}")
    if set(tiers) - {1, 2, 3}:
        problems.append(f"{name}: hints numbered {sorted(set(tiers) - {1, 2, 3})}: only tiers 1-3 exist")
    starts = [doc.find(head) for head in TIERS]
    if all(s >= 0 for s in starts) and starts != sorted(starts):
        problems.append(f"{name}: the hint tiers are not in the order nudge, plan, formula")
    return problems


def code_spans(text):
    """The backticked spans of `text` that are Python code calling, indexing or assigning (math in words, and
    math notation that is not Python, e.g. `Σ_j P[i, j] v[j]`, is not code)."""
    out = []
    for span in SPAN.findall(text):
        try:
            tree = ast.parse(span.strip())
        except SyntaxError:
            continue
        if any(isinstance(n, (ast.Call, ast.Subscript, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.NamedExpr))
               for n in ast.walk(tree)):
            out.append(f"`{span}`")
    return out


def tier3_code(name, doc):
    return [f"{name}: {span}" for text in hint_tiers(doc).get(3, []) for span in code_spans(text)]


def test_every_task_function_uses_the_one_hint_format():
    problems = []
    for path in exercise_files():
        functions = task_functions(path.name)
        docs = docstrings(course_text(path), functions)
        problems += [f"{path.name}: {f} is not defined" for f in functions if f not in docs]
        problems += [f"{path.name}: {p}" for f, doc in docs.items() for p in hint_format_problems(f, doc)]
    assert not problems, "hints not in the format Hint 1 (nudge): / Hint 2 (plan): / Hint 3 (formula):\n" + \
        "\n".join(problems)


def test_the_last_hint_tier_teaches_without_the_solutions_code():
    """Tier 3 of every task's hints is the formula or the plan in words: no code span that calls, indexes or
    assigns (`f(x)`, `a[:, 1:]`, `x = ...`), which would hand over the solution's line."""
    offenders = []
    for path in exercise_files():
        docs = docstrings(course_text(path), task_functions(path.name))
        offenders += [f"{path.name}:{o}" for f, doc in docs.items() for o in tier3_code(f, doc)]
    assert not offenders, "tier-3 hints that hold code:\n" + "\n".join(offenders)


PLANTED_DOC = """Task 9.9: a planted docstring.

    Hint 1 (nudge): think about rows.
    Hint 2 (plan): one reduction along `dim` with keepdim=True.
    Hint 3 (formula): out = Σ_j P[i, j] v[j], i.e. `Σ_j P[i, j] v[j]`, computed as
        `torch.softmax(s, -1) @ v` or `a[:, 1:]` or `x = y`.
"""


def test_the_hint_rules_can_fail():
    assert hint_format_problems("f", PLANTED_DOC) == []
    assert tier3_code("f", PLANTED_DOC) == ["f: `torch.softmax(s, -1) @ v`", "f: `a[:, 1:]`", "f: `x = y`"]
    numbered = "Task 9.9.\n\nHints:\n    1. think.\n    2. plan.\n    3. `f(x)`.\n"
    assert len(hint_format_problems("g", numbered)) == 3  # the old numbered form has no tier at all
    renamed = PLANTED_DOC.replace("Hint 2 (plan):", "Hint 2 (idea):").replace("Hint 3", "Hint 4")
    problems = hint_format_problems("h", renamed)
    assert any("tier 2 starts" in p for p in problems) and any("only tiers 1-3" in p for p in problems)


# --- b. and c. no solution statement in an exercise file or an extend task's notebook ---------------------------
def statements(source, functions=None):
    """{normalised statement: its text} of the bodies of `source`'s top-level functions (all, or `functions`):
    every statement at any depth, ast.unparse'd, whitespace removed, 25 characters or more (docstrings left out)."""
    out = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.FunctionDef) or (functions is not None and node.name not in functions):
            continue
        body = node.body[1:] if ast.get_docstring(node) is not None else node.body
        for top in body:
            for stmt in ast.walk(top):
                if isinstance(stmt, ast.stmt):
                    text = ast.unparse(stmt)
                    if len(squash(text)) >= MIN_STATEMENT:
                        out[squash(text)] = text.splitlines()[0]
    return out


def leaked(solution, text, functions=None):
    """The solution's statements (of `functions`, or all) that appear in `text`, whitespace normalised."""
    flat = squash(text)
    return [line for key, line in statements(solution, functions).items() if key in flat]


def own_functions(file_name, solution, exercise):
    """The solution's functions the learner writes: the task functions and helpers the exercise file lacks
    (a helper the exercise file hands out whole is no solution)."""
    given = {n.name for n in ast.parse(exercise).body if isinstance(n, ast.FunctionDef)}
    defined = {n.name for n in ast.parse(solution).body if isinstance(n, ast.FunctionDef)}
    return {f for f in defined if f in task_functions(file_name) or f not in given}


@pytest.mark.needs_solutions
def test_no_solution_statement_is_in_its_exercise_file():
    offenders = []
    for chapter in CHAPTERS.values():
        solution = (ROOT / "solutions" / chapter.file).read_text(encoding="utf-8")
        exercise = course_text(ROOT / "exercises" / chapter.file)
        offenders += [f"{chapter.file}: {line}" for line in
                      leaked(solution, exercise, own_functions(chapter.file, solution, exercise))]
    assert not offenders, "statements of solutions/ that the exercise file shows:\n" + "\n".join(offenders)


def notebook_code(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                     for c in cells if c["cell_type"] == "code")


@pytest.mark.needs_solutions
def test_no_extend_tasks_solution_is_in_a_notebook():
    code = {path.name: notebook_code(path) for path in sorted((ROOT / "notebooks").glob("*.ipynb"))}
    offenders = []
    for task in (t for t in TASKS.values() if t.extend):
        solution = (ROOT / "solutions" / CHAPTERS[task.chapter].file).read_text(encoding="utf-8")
        for name, text in code.items():
            offenders += [f"Task {task.id} ({', '.join(task.functions)}) in {name}: {line}"
                          for line in leaked(solution, text, task.functions)]
    assert not offenders, "extend tasks whose solution a notebook code cell holds:\n" + "\n".join(offenders)


PLANTED_SOLUTION = '''
def attention(q, k, v):
    """Docstring text that may appear anywhere."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if True:
        weights = torch.softmax(scores, dim=-1)
    return weights @ v
'''


def test_the_statement_rules_can_fail(tmp_path):
    exercise = 'def attention(q, k, v):\n    """Hint 3 (formula): weights = torch.softmax( scores,\n    dim=-1 )."""\n'
    assert leaked(PLANTED_SOLUTION, exercise) == ["weights = torch.softmax(scores, dim=-1)"]
    assert leaked(PLANTED_SOLUTION, "Docstring text that may appear anywhere. return weights @ v") == []
    line = "scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5"
    notebook = {"cells": [{"cell_type": "markdown", "source": [line]},
                          {"cell_type": "code", "source": ["s = 1\n", line.replace(" ** ", "**").replace(", ", ",")]}]}
    path = tmp_path / "planted.ipynb"
    path.write_text(json.dumps(notebook), encoding="utf-8")
    assert leaked(PLANTED_SOLUTION, notebook_code(path), ["attention"]) == [  # the code cell, not the markdown
        "scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5"]
    helper = "def attention(q, k, v):\n    return helper_that_is_long_enough(q, k, v)\n"
    assert own_functions("ex99_none.py", PLANTED_SOLUTION + helper.replace("attention", "given"),
                         helper.replace("attention", "given")) == {"attention"}  # a helper handed out whole
    assert leaked(PLANTED_SOLUTION, "scores = q @ k.transpose(-2, -1)", ["other"]) == []


# --- d. extend tasks per chapter -------------------------------------------------------------------------
def extend_shortfall(tasks, chapters, minimum=MIN_EXTEND):
    """'chapter N: K extend tasks (ids)' for each chapter with fewer than `minimum`."""
    out = []
    for chapter in chapters:
        ids = sorted((t.id for t in tasks if t.chapter == chapter and t.extend), key=task_key)
        if len(ids) < minimum:
            out.append(f"chapter {chapter}: {len(ids)} extend task{'s' if len(ids) != 1 else ''} "
                       f"({', '.join(ids) or 'none'})")
    return out


def test_every_chapter_has_two_extend_tasks():
    listed = {c: [t.id for t in TASKS.values() if t.chapter == c and t.extend] for c in COURSE_CHAPTERS}
    short = extend_shortfall(TASKS.values(), COURSE_CHAPTERS)
    assert not short, f"every chapter needs >= {MIN_EXTEND} extend tasks (extend=True); short: " + \
        "; ".join(short) + f". Extend tasks now: {listed}"


def test_the_extend_count_can_fail():
    from minilin.grading.checks import Task
    tasks = [Task("1.1", ("f",), "t", None, extend=True), Task("1.2", ("g",), "t", None, extend=True),
             Task("2.1", ("h",), "t", None, extend=True), Task("2.2", ("i",), "t", None)]
    assert extend_shortfall(tasks, (1, 2, 3)) == ["chapter 2: 1 extend task (2.1)", "chapter 3: 0 extend tasks (none)"]


# --- e. module.attr names in hints resolve in the exercise file's imports ----------------------------------------
def imported_names(source):
    """{name bound by the file's imports: the module path or object path it stands for}."""
    names = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    names[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def resolve(path):
    """The object `a.b.c` names (importing modules on the way), or None."""
    parts = path.split(".")
    for cut_at in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut_at]))
        except ImportError:
            continue
        for attr in parts[cut_at:]:
            if not hasattr(obj, attr):
                return None
            obj = getattr(obj, attr)
        return obj
    return None


def unresolved_hint_names(name, doc, source):
    """The `module.attr` names of a docstring's hints whose module the file does not import, or whose
    attribute does not exist. A name whose head is not module-like (`q.shape`) is the learner's variable."""
    imports, out = imported_names(source), []
    for text in (t for tier in hint_tiers(doc).values() for t in tier):
        for span in SPAN.findall(text):
            for head, rest in DOTTED.findall(span):
                if head not in imports and head not in MODULE_LIKE:
                    continue
                if head not in imports:
                    out.append(f"{name}: `{head}{rest}`: {head} is not imported in the exercise file")
                elif resolve(imports[head] + rest) is None:
                    out.append(f"{name}: `{head}{rest}`: {imports[head]}{rest} does not exist")
    return out


def test_every_module_name_a_hint_uses_is_imported():
    offenders = []
    for path in exercise_files():
        source = course_text(path)
        offenders += [f"{path.name}: {o}" for f, doc in docstrings(source, task_functions(path.name)).items()
                      for o in unresolved_hint_names(f, doc, source)]
    assert not offenders, "hint names the exercise file cannot use:\n" + "\n".join(offenders)


def test_the_name_rule_can_fail():
    source = "import torch\nimport torch.nn.functional as F\nfrom minilin.attention import softmax_attention\n"
    doc = ("Hint 1 (nudge): `torch.cumsum` and `F.softmax`, `q.shape`, `softmax_attention.__name__`.\n"
           "Hint 2 (plan): `math.sqrt` and `np.exp` and `torch.no_such_function`.\n"
           "Hint 3 (formula): in words.\n")
    assert unresolved_hint_names("f", doc, source) == [
        "f: `math.sqrt`: math is not imported in the exercise file",
        "f: `np.exp`: np is not imported in the exercise file",
        "f: `torch.no_such_function`: torch.no_such_function does not exist"]


@pytest.mark.needs_solutions
def test_the_rules_see_every_task_function():
    """The rules above read the task functions of every exercise file: none is silently skipped."""
    seen = {f for path in exercise_files() for f in docstrings(course_text(path),
                                                                task_functions(path.name))}
    assert seen == {f for t in TASKS.values() for f in t.functions}
    for chapter in CHAPTERS.values():  # rule b compares something for every chapter
        solution = (ROOT / "solutions" / chapter.file).read_text(encoding="utf-8")
        exercise = course_text(ROOT / "exercises" / chapter.file)
        assert statements(solution, own_functions(chapter.file, solution, exercise)), chapter.file
    hints = [t for path in exercise_files() for doc in docstrings(course_text(path),
                                                                   task_functions(path.name)).values()
             for t in hint_tiers(doc).get(3, [])]
    assert len(hints) == len(seen)  # rule a reads one tier 3 per task function


# --- f. no task is solved in a notebook, even renamed ---------------------------------------------------------
# Every non-trivial statement (one with a call or arithmetic) of a task's solution functions and of every notebook
# code cell is put in a canonical form: the AST with every local name (a parameter, an assigned variable, a
# function the same source defines) replaced by one placeholder; attributes, constants, operators, keyword names
# and imported or builtin names kept. A task whose statements appear, half or more of them, among the notebooks'
# is solved on the page: copying the cell (under any names) would pass the grader.
PLACEHOLDER = "_"
# Chapters whose rewrite has not landed yet: their notebooks and tasks follow the same rule in their own rewrite
# (chapters 4-6: Performer, the libraries, memory and time; 7-8: the tiny LM, where low rank fails; 9: decay, gates
# and the delta rule). Their tasks run and are reported as expected failures, not skipped.
PENDING_CHAPTERS = {}
SIMPLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Expr)


def _bound_by_import(tree):
    import builtins
    names = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names}
    return names


class _Canonical(ast.NodeTransformer):
    def __init__(self, keep):
        self.keep = keep

    def visit_Name(self, node):
        return ast.copy_location(ast.Name(id=node.id if node.id in self.keep else PLACEHOLDER, ctx=node.ctx), node)

    def visit_arg(self, node):
        return ast.copy_location(ast.arg(arg=PLACEHOLDER, annotation=None), node)

    def visit_Constant(self, node):  # a number may stand for a parameter (`dim=-1` for `dim=dim`): one placeholder
        if isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return ast.copy_location(ast.Name(id=PLACEHOLDER, ctx=ast.Load()), node)
        return node

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Name) and node.operand.id == PLACEHOLDER:
            return node.operand  # -1 and dim alike
        return node


def _non_trivial(stmt):
    """Arithmetic, or a call of something other than a renamed local (`y = f(x)` says nothing on its own)."""
    return any(isinstance(n, (ast.BinOp, ast.AugAssign))
               or isinstance(n, ast.UnaryOp) and not isinstance(n.operand, (ast.Constant, ast.Name))
               or isinstance(n, ast.Call) and not (isinstance(n.func, ast.Name) and n.func.id == PLACEHOLDER)
               for n in ast.walk(stmt))


def canonical_statements(tree, keep, within=None, trivial=False):
    """[canonical text] of the simple non-trivial statements of `tree` (or of the function nodes `within`),
    at any depth (`trivial=True`: every simple statement); docstrings and bare constants left out."""
    roots = within if within is not None else [tree]
    out = []
    for root in roots:
        for stmt in ast.walk(root):
            if not isinstance(stmt, SIMPLE) or stmt is root:
                continue
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue
            canonical = _Canonical(keep).visit(ast.parse(ast.unparse(stmt)))
            if trivial or _non_trivial(canonical):
                out.append(ast.unparse(canonical))
    return out


def python_cells(path):
    """Each code cell of a notebook as Python (IPython's % and ! lines blanked); cells that do not parse left out."""
    out = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        src = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in src.splitlines())
        try:
            out.append(ast.parse(src))
        except SyntaxError:
            continue
    return out


def notebook_statements(paths):
    """{canonical statement: notebook names holding it} over every code cell of `paths`."""
    found = {}
    for path in paths:
        trees = python_cells(path)
        keep = set().union(*(_bound_by_import(t) for t in trees)) if trees else set()
        keep -= {n.name for t in trees for n in ast.walk(t) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        for tree in trees:
            for text in canonical_statements(tree, keep, trivial=True):
                found.setdefault(text, set()).add(path.name)
    return found


def solved_on_the_page(solution_source, functions, found):
    """(matched, total, [matched statements]) for the solution's `functions` against the notebooks' statements."""
    tree = ast.parse(solution_source)
    keep = _bound_by_import(tree) - {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in functions]
    statements = canonical_statements(tree, keep, within=nodes) or canonical_statements(tree, keep, nodes, True)
    matched = [s for s in statements if s in found]
    return len(matched), len(statements), matched


def _task_params():
    out = []
    for task in sorted(TASKS.values(), key=lambda t: task_key(t.id)):
        marks = []
        if task.chapter in PENDING_CHAPTERS:
            marks.append(pytest.mark.xfail(reason=f"pending: the {PENDING_CHAPTERS[task.chapter]} applies this rule",
                                           strict=False))
        out.append(pytest.param(task, id=task.id, marks=marks))
    return out




@pytest.fixture(scope="module")
def notebooks_statements():
    return notebook_statements(sorted((ROOT / "notebooks").glob("*.ipynb")))


@pytest.mark.needs_solutions
@pytest.mark.parametrize("task", _task_params())
def test_no_task_is_solved_in_a_notebook(task, notebooks_statements):
    solution = (ROOT / "solutions" / CHAPTERS[task.chapter].file).read_text(encoding="utf-8")
    matched, total, lines = solved_on_the_page(solution, task.functions, notebooks_statements)
    assert total, f"Task {task.id}: its solution ({', '.join(task.functions)}) has no non-trivial statement"
    where = sorted({nb for s in lines for nb in notebooks_statements[s]})
    assert 2 * matched < total, (
        f"Task {task.id} ({', '.join(task.functions)}): {matched} of its {total} statements stand in notebook code "
        f"({', '.join(where)}), names aside; rewrite the task or the cells:\n  " + "\n  ".join(lines))


def test_the_page_rule_can_fail(tmp_path):
    solution = ("import torch\n"
                "def softmax_rows(scores, dim=-1):\n"
                "    shifted = scores - scores.amax(dim=dim, keepdim=True)\n"
                "    e = torch.exp(shifted)\n"
                "    return e / e.sum(dim=dim, keepdim=True)\n")
    renamed = ("import torch\n"
               "s = torch.randn(3, 4)\n"
               "def my_rows(x, dim=-1):\n"
               "    z = x - x.amax(dim=dim, keepdim=True)\n"
               "    w = torch.exp(z)\n"
               "    return w / w.sum(dim=dim, keepdim=True)\n")
    path = tmp_path / "planted.ipynb"
    path.write_text(json.dumps({"cells": [{"cell_type": "code", "source": renamed.splitlines(True)}]}),
                    encoding="utf-8")
    assert solved_on_the_page(solution, ["softmax_rows"], notebook_statements([path]))[:2] == (3, 3)
    other = renamed.replace("torch.exp(z)", "torch.exp2(z)").replace("w / w.sum", "w * w.sum")
    path.write_text(json.dumps({"cells": [{"cell_type": "code", "source": other.splitlines(True)}]}),
                    encoding="utf-8")
    assert solved_on_the_page(solution, ["softmax_rows"], notebook_statements([path]))[:2] == (1, 3)
    # a call of a package function by the same name on the page is not a renamed local: kept as written
    assert canonical_statements(ast.parse("y = softmax_attention(q, k, v, causal=True)"), {"softmax_attention"}) == \
        ["_ = softmax_attention(_, _, _, causal=True)"]
    assert canonical_statements(ast.parse("y = f(x)\nz = x.sum(-1)\nw = x.sum(dim)"), set()) == \
        ["_ = _.sum(_)", "_ = _.sum(_)"]  # a call of a renamed local alone is not counted; -1 and dim alike
