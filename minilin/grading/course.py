"""The course's chapters with exercises, task lookup, and a teacher's hidden checks."""
import importlib
import importlib.util
from pathlib import Path

from minilin.cli import UsageError
from minilin.grading import checks

COURSE_CHAPTERS = tuple(range(1, 11))  # notebooks 01-10 (00 is the start page)
EXERCISE_MODULES = ("ex01_attention", "ex02_lowrank", "ex03_linformer", "ex04_performer", "ex05_peers", "ex06_memory",
                    "ex07_lm", "ex08_limits", "ex09_gates", "ex10_kernel")


def _load():
    chapters = {}
    for name in EXERCISE_MODULES:
        chapter = importlib.import_module(f"minilin.grading.{name}").CHAPTER
        chapters[chapter.number] = chapter
    return chapters


CHAPTERS = _load()  # {1: Chapter, 2: ..., 10: ...}
WITHOUT_EXERCISES = tuple(c for c in COURSE_CHAPTERS if c not in CHAPTERS)
TASKS = {task.id: task for chapter in CHAPTERS.values() for task in chapter.tasks.values()}


def task_key(task_id):
    return tuple(int(p) for p in task_id.split("."))


def select(chapters=(), tasks=()):
    """The Tasks to grade for --chapter / --task (each repeatable; none: every task). Unknown ones: UsageError."""
    with_exercises = ", ".join(map(str, CHAPTERS))
    for chapter in chapters:
        if chapter not in COURSE_CHAPTERS:
            raise UsageError(f"there is no chapter {chapter}: the course has chapters "
                             f"{COURSE_CHAPTERS[0]}-{COURSE_CHAPTERS[-1]}, with exercises in {with_exercises}")
        if chapter not in CHAPTERS:
            raise UsageError(f"chapter {chapter} has no exercises; chapters with exercises: {with_exercises}")
    for task in tasks:
        if task not in TASKS:
            near = [t for t in TASKS if not chapters or TASKS[t].chapter in chapters]
            raise UsageError(f"there is no task {task!r}; tasks: {', '.join(sorted(near, key=task_key))}")
    chosen = [t for t in TASKS.values() if (not chapters and not tasks) or t.chapter in chapters or t.id in tasks]
    return sorted(chosen, key=lambda t: task_key(t.id))


def allowed_helpers_text():
    """One line per chapter: the exercise file and the minilin names it may use (for --help and feedback)."""
    lines = []
    for chapter in CHAPTERS.values():
        allowed = ", ".join(chapter.allowed) if chapter.allowed else "none"
        lines.append(f"  chapter {chapter.number} ({chapter.file}): allowed minilin helpers: {allowed}")
    return "\n".join(lines)


def load_hidden(folder):
    """A teacher's extra checks: every *.py in `folder`, registering builders with @hidden_check("N.M").

    Returns {task id: [builders]}. The files are the teacher's code and run in the grader (trusted).
    """
    folder = Path(folder)
    if folder.is_file():
        raise UsageError(f"--hidden-tests {folder}: is a file, not a folder; put the *.py check files in a folder "
                         f"and give the folder")
    if not folder.is_dir():
        raise UsageError(f"--hidden-tests {folder}: not a folder of *.py check files")
    extra = {}
    for path in sorted(folder.glob("*.py")):
        checks.HIDDEN.clear()
        spec = importlib.util.spec_from_file_location(f"minilin_hidden_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as err:
            raise UsageError(f"--hidden-tests: {path} fails to load: {type(err).__name__}: {err}") from None
        for task_id, builder in checks.HIDDEN:
            if task_id not in TASKS:
                raise UsageError(f"--hidden-tests: {path} adds a check to task {task_id!r}, which does not exist")
            extra.setdefault(task_id, []).append(builder)
    checks.HIDDEN.clear()
    if not extra:
        raise UsageError(f"--hidden-tests {folder}: no checks found (decorate builders with "
                         "@minilin.grading.checks.hidden_check(\"N.M\"))")
    return extra
