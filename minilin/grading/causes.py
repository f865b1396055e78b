"""Why a task fails when it calls another task's failing function (Result.cause)."""
import ast
import dataclasses

from minilin.grading import honesty
from minilin.grading.course import task_key


def _calls(source):
    """{top-level function: (first line, last line, names it uses)} of a learner's file."""
    out = {}
    for node in honesty.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - {node.name}
            out[node.name] = (node.lineno, node.end_lineno, names)
    return out


def add_causes(chapter, source, results):
    """A failing task whose function calls another failing task's function says so (in Result.cause).

    Certain when the exception's traceback passes through the other function ("fails because"); otherwise
    found statically, through the file's own helpers ("probably fails because")."""
    try:
        defs = _calls(source)
    except (SyntaxError, ValueError, RecursionError):
        return
    owner = {f: t for t in chapter.tasks.values() for f in t.functions}
    for task in chapter.tasks.values():
        result = results.get(task.id)
        if result is None or result.status in ("pass", "missing"):
            continue
        reached, seen, todo = [], set(), list(task.functions)
        while todo:  # through the file's helpers, stopping at other tasks' functions
            name = todo.pop(0)
            for used in sorted(defs.get(name, (0, 0, set()))[2]):
                if used in seen or used not in defs:
                    continue
                seen.add(used)
                if used in owner and owner[used].id != task.id:
                    reached.append(used)
                elif used not in owner:
                    todo.append(used)
        failing = [f for f in reached if results.get(owner[f].id) and results[owner[f].id].status != "pass"
                   and results[owner[f].id].message != result.message]  # not one failure of the whole file
        if not failing:
            continue
        inside = [f for f in failing if any(file == chapter.file and defs[f][0] <= line <= defs[f][1]
                                            for file, line in result.lines)]
        name = (inside or sorted(failing, key=lambda f: task_key(owner[f].id)))[0]
        other = results[owner[name].id]
        how = "is not implemented yet" if other.message.startswith("not implemented yet") else "fails"
        cause = f"{'fails' if inside else 'probably fails'} because it calls your {name} " \
                f"(Task {owner[name].id}), which {how}"
        results[task.id] = dataclasses.replace(result, cause=cause)
