"""Grading one submission: the grader's side of the child protocol, and the in-process runner for pytest.

A Session builds every task's steps once (inputs and expected values from fixed seeds) and writes each step's
Calls to a file the children read. `Session.grade(folder)` copies the learner's exNN_*.py files, scans them
(syntax, honesty), then starts one child per submission (Python and torch imported once, see child.py; this
side's end of its pipe is pipe.py), which forks a worker per chapter: `import`, one `run` per step, `done`.
Results come back as encoded values that this side judges. Every step (check) of a task runs and is counted
(Result.checks): the first failure is the task's message, and a task passing some of its checks is a fail with
partial credit (rubric.earned). The time limit is per chapter. When a worker hangs, dies or sends garbage, only
the task it was running fails, from the check it was running on (the whole chapter if it was importing the
file), and a fresh worker takes the remaining tasks; a child that stops answering altogether is replaced.

Fresh inputs (on by default): the Session also builds every step again with its seeds mixed with a per-run secret
(checks.drawn_from; the secret stays in this process, only the inputs it draws are written for the children).
Each check whose inputs then differ has a fresh twin, run right after it when it passes: the check counts as
passed only if its twin passes too. The number of checks (and so partial credit, rubric weights, every export)
stays the number of public checks; a twin's failure is the check's failure, its message saying so. A table of
the reference's answers to the fixed inputs cannot pass a twin.
"""
import collections
import dataclasses
import itertools
import shutil
import tempfile
import threading
import time
from pathlib import Path

import torch

from minilin.grading import honesty, sandbox, submission
from minilin.grading.calls import dumps, execute, loads_untrusted, summary
from minilin.grading.checks import CannotGrade, Failure, fresh_secret
from minilin.grading.causes import add_causes
from minilin.grading.course import CHAPTERS
from minilin.grading.fresh import fresh_message, twins
from minilin.grading.pipe import Child, ChildGone
from minilin.grading.text import one_line, visible

STATUSES = ("pass", "fail", "error", "timeout", "crash", "missing")
MAX_SOURCE = 1 << 20  # bytes per learner file
GRACE = 15.0  # seconds the child may take beyond a chapter's limit to report it (it kills the worker itself)


@dataclasses.dataclass
class Result:
    task: str
    status: str  # one of STATUSES
    message: str = ""  # a few lines; the first is the summary (the teacher's full message)
    hidden: str = ""  # "2 of 3" when a teacher's hidden check decided it: learners see only that it failed
    note: str = ""  # what the grader graded instead of the exact file (e.g. a misnamed or nested file)
    cause: str = ""  # "fails because it calls your scaled_scores (Task 1.1), which fails"
    lines: tuple = ()  # (file, line) of the learner's files in the traceback, innermost last
    checks: tuple = ()  # one bool per check (the task's Steps, public then hidden): did it pass (its fresh twin too)
    failed: tuple = ()  # (check number from 1, what it ran, hidden label or "") of each failed check run

    @property
    def checks_passed(self):
        return sum(map(bool, self.checks))

    @property
    def checks_total(self):
        return len(self.checks)


@dataclasses.dataclass
class Limits:
    timeout: float = 60.0  # seconds per chapter (importing the file and every check)
    memory: int = 4 << 30  # bytes of address space of the child (RLIMIT_AS)
    startup: float = 180.0  # seconds for the child to start Python and import torch (not the learner's time)


def _where(error):
    where = error.get("where") or []
    if not where:
        return ""
    file, line, text = where[-1]
    return f"\n  at {file} line {line}: {text}" if text else f"\n  at {file} line {line}"


def error_result(task_id, error, doing, memory):
    """A learner's exception as a Result: not implemented yet (fail), or what raised and where (error)."""
    kind, message = error.get("type", "Exception"), error.get("message", "")
    if kind == "NotImplementedError":
        return Result(task_id, "fail", f"not implemented yet: {doing} raised NotImplementedError"
                                       f"({message!r}){_where(error)}", lines=_lines(error))
    if kind == "SyntaxError":
        return Result(task_id, "error", f"SyntaxError while {doing}: {message}{_where(error)}")
    hint = ""
    if kind == "MemoryError" or "can't allocate memory" in message:
        hint = f" (the grader allows {memory / 2**30:g} GiB)"
    first = message.splitlines()[0][:300] if message else ""
    return Result(task_id, "error", f"{doing} raised {kind}: {first}{hint}{_where(error)}", lines=_lines(error))


def _lines(error):
    """Line numbers of the learner's exercise file in an exception's traceback (innermost last)."""
    out = []
    for frame in error.get("where") or []:
        try:
            file, line = frame[0], int(frame[1])
        except (TypeError, ValueError, IndexError):
            continue
        if isinstance(file, str):
            out.append((file, line))
    return tuple(out)


def syntax_message(file, err):
    pointer = ""
    if err.text:
        pointer = f"\n    {err.text.rstrip()}\n    {' ' * max(0, (err.offset or 1) - 1)}^"
    return f"SyntaxError in {file} line {err.lineno}: {err.msg}{pointer}"


class Session:
    """One grading run over `tasks`: steps and input files built once, shared by every submission graded."""

    def __init__(self, tasks, *, limits=None, mode="none", hidden=None, hide=(), fresh=True):
        """`fresh`: also run each check on inputs drawn from a per-run secret (the module's docstring)."""
        self.tasks, self.limits, self.mode = list(tasks), limits or Limits(), mode
        self.root = Path(tempfile.mkdtemp(prefix="minilin-grade-"))
        self.hide = (*hide, self.root)  # other students' copies, if TMPDIR is not under /tmp
        self.inputs = self.root / "inputs"
        self.inputs.mkdir()
        self.lib = sandbox.library(self.root / "lib")
        self.steps, self.unavailable = {}, {}
        self.twins, self.fixed_only = {}, {}  # {task id: [fresh step or None per step]}, {task id: why not}
        self.fresh = fresh
        secret = fresh_secret() if fresh else None
        for task in self.tasks:
            extra = (hidden or {}).get(task.id, ())
            try:
                self.steps[task.id] = task.steps(extra)
            except CannotGrade as err:
                self.unavailable[task.id] = str(err)
                continue
            steps = self.steps[task.id]
            self.twins[task.id] = [None] * len(steps)
            if secret is not None:
                self.twins[task.id], why = twins(task, steps, secret, extra)
                if why:
                    self.fixed_only[task.id] = why
            for i, step in enumerate(steps):
                torch.save(list(step.calls), self.inputs / f"{task.id}-{i}.pt")
            for i, twin in enumerate(self.twins[task.id]):  # numbered on after the steps: the name tells nothing
                if twin is not None:
                    torch.save(list(twin.calls), self.inputs / f"{task.id}-{len(steps) + i}.pt")
        del secret
        self._ids, self._lock = itertools.count(), threading.Lock()

    def fresh_note(self):
        """A line for the grader's header: how many checks also run on fresh inputs, and which tasks have
        none (a table of the fixed inputs' answers could pass those), with the reason."""
        if not self.fresh:
            return "fresh inputs: off (--fixed-inputs): every check runs on its fixed inputs only"
        total = sum(len(s) for s in self.steps.values())
        twinned = sum(t is not None for ts in self.twins.values() for t in ts)
        text = f"fresh inputs: {twinned} of {total} checks also run on inputs drawn anew for this run"
        by_reason = {}
        for task_id, why in self.fixed_only.items():
            by_reason.setdefault(why, []).append(task_id)
        return text + "".join(f"; {why}: {', '.join(ids)}" for why, ids in by_reason.items())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.root, ignore_errors=True)

    def grade(self, folder):
        """{task id: Result} for the exNN_*.py files in `folder` (exercises/, solutions/ or one student's).

        The files may be in `folder`, its exercises/, or one folder deeper, and slightly misnamed
        (submission.locate): what was graded instead of the exact name is each Result's note."""
        with self._lock:
            student = self.root / "students" / str(next(self._ids))
        package = student / "exercises"
        package.mkdir(parents=True)
        (student / "scratch").mkdir()
        chapters = [CHAPTERS[n] for n in dict.fromkeys(t.chapter for t in self.tasks)]
        found = submission.locate(folder, chapters)
        for path in sorted(found.base.glob("*.py"))[:200]:
            if path.is_file() and not path.is_symlink() and path.stat().st_size <= MAX_SOURCE:
                shutil.copyfile(path, package / path.name)
        for name, path in found.files.items():
            (package / name).unlink(missing_ok=True)
            if path.is_file() and not path.is_symlink() and path.stat().st_size <= MAX_SOURCE:
                shutil.copyfile(path, package / name)
        (package / "__init__.py").write_text("")
        results, plan, sources = {}, [], {}
        for chapter in chapters:
            tasks = [t for t in self.tasks if t.chapter == chapter.number]
            runnable = self._scan(chapter, tasks, package / chapter.file, Path(folder), found, results)
            if runnable:
                sources[chapter.number] = (package / chapter.file).read_text(encoding="utf-8")
                plan.append((chapter, collections.deque(runnable)))
        self._run(collections.deque(plan), student, results)
        shutil.rmtree(student, ignore_errors=True)
        for chapter in chapters:
            note = "; ".join(filter(None, (found.where, found.notes.get(chapter.file, ""))))
            for task in (t for t in self.tasks if t.chapter == chapter.number):
                if note:
                    results[task.id] = dataclasses.replace(results[task.id], note=note)
            if chapter.number in sources:
                add_causes(chapter, sources[chapter.number], results)
        return {t.id: as_data(counted(results[t.id], len(self.steps.get(t.id, ())))) for t in self.tasks}

    def _scan(self, chapter, tasks, path, folder, found, results):
        """Missing file, syntax error, forbidden helpers: decided here, without running anything."""
        def every(status, message):
            results.update({t.id: Result(t.id, status, message) for t in tasks})
        if not path.is_file():
            if chapter.file in found.files:
                name = one_line(found.files[chapter.file].name)
                every("error", f"{name} is a link or larger than {MAX_SOURCE >> 10} KiB: "
                               "not graded")
            else:
                hint = found.hints.get(chapter.file)
                every("missing", f"no {chapter.file} in {one_line(folder.name)}/" + (f"; {hint}" if hint else ""))
            return []
        try:
            source = path.read_text(encoding="utf-8")
            honesty.parse(source, filename=chapter.file)
            problems = honesty.scan(source, [f for t in tasks for f in t.functions], chapter.allowed)
        except SyntaxError as err:
            every("error", syntax_message(chapter.file, err))
            return []
        except (UnicodeDecodeError, ValueError, RecursionError, MemoryError) as err:
            every("error", f"{chapter.file} cannot be read as Python source: {type(err).__name__}")
            return []
        runnable = []
        for task in tasks:
            if task.id in self.unavailable:
                results[task.id] = Result(task.id, "error", f"cannot be graded here: {self.unavailable[task.id]}")
            elif bad := [problems[f] for f in task.functions if f in problems]:
                results[task.id] = Result(task.id, "fail", bad[0])
            else:
                runnable.append(task)
        return runnable

    def _run(self, queue, student, results):
        child = None
        try:
            while queue:
                if child is None and (child := self._start(student, queue, results)) is None:
                    return
                chapter, tasks = queue[0]
                now = {"doing": f"importing {chapter.file}", "importing": True}
                try:
                    self._chapter(child, chapter, tasks, results, now)
                    queue.popleft()
                except ChildGone as gone:
                    self._gone(queue, gone, now, results)
                    if not gone.alive:
                        child.close()
                        child = None
        finally:
            if child is not None:
                child.close()

    def _start(self, student, queue, results):
        """A fresh child (Python and torch imported, no learner code yet), or None: every task left crashes."""
        argv, cwd, env, group = sandbox.command(self.mode, lib=self.lib, package_parent=student,
                                                inputs=self.inputs, scratch=student / "scratch",
                                                memory=self.limits.memory, hide=self.hide)
        child = Child(argv, cwd, env, student, group=group)
        try:
            child.recv(b"R", time.monotonic() + self.limits.startup)
            return child
        except ChildGone as gone:
            child.close()
            why = f"no answer within {self.limits.startup:g} s" if gone.status == "timeout" else gone.message
            for _, tasks in queue:
                results.update({t.id: Result(t.id, "crash", f"the grader could not start Python and torch: {why}")
                                for t in tasks})
            queue.clear()
            return None

    def _chapter(self, child, chapter, tasks, results, now):
        """Worker processes: import the file, run each remaining task's steps, then let it go. A worker may import
        what the chapter allows and what its tasks' inputs are made of (sandbox.allowance): tasks whose inputs need
        other modules (chapter 5's transplants) get a worker of their own, after the tasks before them."""
        module = f"exercises.{chapter.module}"
        deadline = time.monotonic() + self.limits.timeout
        while tasks:
            needs = self._needs(tasks[0])
            now.update(doing=f"importing {chapter.file}", importing=True)
            child.send(f"import {module} {max(deadline - time.monotonic(), 0.1):.3f}")
            child.send(sandbox.allowance(chapter.number, tuple(chapter.allowed), needs))
            reply = child.recv(b"I", deadline + GRACE)
            now["importing"] = False
            if not reply.get("ok"):
                for task in tasks:
                    results[task.id] = error_result(task.id, reply.get("error") or {}, now["doing"],
                                                    self.limits.memory)
                tasks.clear()
            while tasks and self._needs(tasks[0]) == needs:
                results[tasks[0].id] = self._task(child, module, tasks[0], deadline + GRACE, now)
                tasks.popleft()
            now["doing"] = f"finishing {chapter.file}"
            child.send("done")
            child.recv(b"X", deadline + GRACE)  # the worker is gone; how does not matter any more

    def _needs(self, task):
        """The guarded modules (minilin's, peers') that unpickling this task's inputs imports in the child."""
        twins = [i for i, t in enumerate(self.twins.get(task.id, ())) if t is not None]
        files = [*range(len(self.steps[task.id])), *(len(self.steps[task.id]) + i for i in twins)]
        return frozenset().union(*(sandbox.pickled_modules(str(self.inputs / f"{task.id}-{i}.pt")) for i in files))

    def _gone(self, queue, gone, now, results):
        """The worker hung, died or sent garbage: fail what it was doing; the rest goes to a fresh worker."""
        _, tasks = queue[0]
        if gone.status == "timeout":
            message = f"no answer within {self.limits.timeout:g} s while {now['doing']} (the time limit per " \
                      "chapter; --timeout S changes it)"
        else:
            message = f"the process running your code {gone.message}\n  while {now['doing']}"
        for task in list(tasks) if now["importing"] else list(tasks)[:1]:
            hidden = "" if now["importing"] else now.get("hidden", "")
            result = Result(task.id, gone.status, message, hidden=hidden)
            if not now["importing"]:  # the checks before this one counted; this one and the rest fail
                result = self._scored(task, result, now.get("checks", []),
                                      now.get("failed", []), start=len(now.get("checks", [])))
            results[task.id] = result
            tasks.remove(task)
        if not tasks:
            queue.popleft()

    def _task(self, child, module, task, deadline, now):
        result = self._steps(child, module, task, deadline, now)
        now["hidden"] = ""  # set while a hidden check runs: a worker lost then fails with the hidden label
        now["checks"], now["failed"], now["first"] = [], [], None
        return result

    def _steps(self, child, module, task, deadline, now):
        """Every check runs (partial credit): the first failure is the message, each check is counted."""
        steps, public = self.steps[task.id], len(task.public_steps)
        now["checks"], now["failed"], now["first"] = [], [], None
        twins = self.twins.get(task.id) or [None] * len(steps)
        for i, (step, twin) in enumerate(zip(steps, twins)):
            hidden = f"{i - public + 1} of {len(steps) - public}" if i >= public else ""  # a teacher's check
            now["doing"], now["hidden"] = f"running {step.calls[0].describe()}", hidden
            result = self._step(child, module, f"{task.id}-{i}.pt", task, step, deadline, hidden, now)
            fresh = result is None and twin is not None
            if fresh:  # the same check on fresh inputs: it counts only if both pass
                now["doing"] = f"running {twin.calls[0].describe()} on fresh inputs"
                result = self._step(child, module, f"{task.id}-{len(steps) + i}.pt", task, twin, deadline, hidden,
                                    now, fresh=i + 1)
            now["checks"].append(result is None)
            if result is not None:
                now["failed"].append(label(i, twin if fresh else step, hidden, fresh=fresh))
                now["first"] = now["first"] or result
        return self._scored(task, now["first"] or Result(task.id, "pass"), now["checks"], now["failed"])

    def _step(self, child, module, inputs, task, step, deadline, hidden, now, fresh=0):
        """None when the check passes, else its failing Result (the learner's exception or the judge's verdict).
        `fresh`: the number of the check whose fresh twin this is (its failure says so)."""
        child.send(f"run {module} {inputs}")
        values = []
        for call in step.calls:
            now["doing"] = f"running {call.describe()}" + (" on fresh inputs" if fresh else "")
            reply = child.recv(b"C", deadline)
            if not reply.get("ok"):  # the child stops this check's calls there and waits for the next check
                result = error_result(task.id, reply.get("error") or {}, call.describe(), self.limits.memory)
                return dataclasses.replace(result, hidden=hidden, message=fresh_message(result.message, fresh))
            values.append(reply.get("value"))
        if verdict := judge(step, values):
            return Result(task.id, "fail", fresh_message(verdict, fresh), hidden=hidden)
        return None

    def _scored(self, task, first, checks, failed, start=None):
        """The task's Result from its checks; with `start` (a lost worker), checks from there on fail too."""
        steps, public = self.steps[task.id], len(task.public_steps)
        checks, failed = list(checks), list(failed)
        for i in range(len(steps) if start is None else start, len(steps)):
            checks.append(False)
            failed.append(label(i, steps[i], f"{i - public + 1} of {len(steps) - public}" if i >= public else ""))
        result = dataclasses.replace(first, checks=tuple(checks), failed=tuple(failed))
        if 0 < result.checks_passed < result.checks_total:
            result = dataclasses.replace(result, status="fail")  # partly right: a fail with partial credit
        return result


def as_data(result):
    """The Result with what the learner's code or folder controls (exception messages, printed output, names)
    made plain text: control and format characters shown as escapes, line breaks kept only between a
    message's lines (each sink indents or fences them); see text.visible."""
    return dataclasses.replace(result, message=visible(result.message, keep="\n"), cause=one_line(result.cause),
                               note=one_line(result.note))


def label(index, step, hidden, fresh=False):
    """How a failed check is named: its number and the call it ran, shortened to its keyword arguments when
    long, e.g. (4, "attention(..., causal=True)", ""); `fresh`: it failed on its fresh inputs (", fresh inputs"
    follows the call); a hidden check's label is for the teacher only."""
    call = step.calls[0] if step.calls else None
    what = call.describe() if call is not None else ""
    if len(what) > 60 and not call.label and call.capture != "each":
        keywords = "".join(f", {k}={summary(v)}" for k, v in call.kwargs.items())
        what = f"{call.fn}(...{keywords})"
    what = what if len(what) <= 60 else what[:57].rstrip(" ,(") + "..."
    return index + 1, what + (", fresh inputs" if fresh else ""), hidden


def counted(result, total):
    """A Result decided without running its checks (missing file, syntax error...): every check failed."""
    if result.checks or not total:
        return result
    return dataclasses.replace(result, checks=(result.status == "pass",) * total)


def judge(step, values):
    """None when the step's judge accepts the values, else its message."""
    try:
        step.judge(*values)
    except Failure as failure:
        return str(failure)
    except Exception as err:  # the learner's values broke an assumption of the judge (a wrong type...)
        return f"{step.calls[0].describe()}\n  returned something the check cannot use ({type(err).__name__}: {err})"
    return None


def run_in_process(task, module, extra=(), secret=None):
    """The course's own check of solutions/ and stubs (pytest): the same steps, run in this process (`secret`:
    the steps built on fresh inputs instead, checks.drawn_from).

    The learner's exceptions propagate unchanged (the stub guard expects NotImplementedError); a wrong result
    raises Failure (an AssertionError). Never use this for code you do not trust.
    """
    chapter = CHAPTERS[task.chapter]
    problems = honesty.scan(Path(module.__file__).read_text(encoding="utf-8"), task.functions, chapter.allowed)
    if problems:
        raise Failure("\n".join(problems.values()))
    for step in (task.steps(extra) if secret is None else task.fresh_steps(secret, extra)):
        with tempfile.TemporaryDirectory() as scratch:
            values = [loads_untrusted(dumps(execute(module, call, scratch))) for call in step.calls]
        step.judge(*values)
