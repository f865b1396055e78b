"""The check language: a task's checks are generators of Steps, each some Calls and a judge of their results.

    CH = Chapter(1, "ex01_attention", "exact softmax attention")

    @CH.task("1.1", "scaled_scores")
    def scaled_scores(f):
        q, k = rand(2, 3, 5, 4, seed=1), rand(2, 3, 7, 4, seed=2)
        yield close(f(q, k), q @ k.transpose(-2, -1) / 2.0, what="q @ kᵀ / √D")

`f(q, k)` runs nothing: it is a Call, sent to the learner's code (a child process, or in-process for the
course's own pytest run). The expected value is computed here, by the grader, from the minilin reference;
the judge compares and raises `Failure` with a few lines: what was compared and by how much it differs.
"""
import contextlib
import dataclasses
import functools
import hashlib
import math
import secrets

import torch

from minilin.grading.calls import Call, MetaTensor, Opaque, Raised, summary

TOL = 1e-10  # float64: only round-off separates a correct answer from the reference


class Failure(AssertionError):
    """A check's verdict on the learner's results: what was compared and by how much it differs."""


class CannotGrade(Exception):
    """The grader cannot build this check here (e.g. a peer library is not installed)."""


@dataclasses.dataclass
class Step:
    """Calls run in order in one scratch folder; `judge(*results)` raises Failure or returns None."""
    calls: tuple
    judge: object


class Fn:
    """Stands for a learner function: calling it makes a Call (nothing runs until the grader sends it)."""

    def __init__(self, name):
        self.name = name

    def __call__(self, *args, **kwargs):
        return Call(self.name, args, kwargs)

    def each(self, inputs, label=None):
        """One Call that applies the function to many (args, kwargs) pairs and returns the list."""
        inputs = [(tuple(a), dict(kw)) for a, kw in inputs]
        return Call(self.name, (inputs,), capture="each", label=label or "")


def rand(*shape, seed=0, scale=1.0, dtype=torch.float64):
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def gen(seed):
    return torch.Generator().manual_seed(seed)


# --- fresh inputs: the same checks on a draw nobody can know in advance -----------------------------------
def fresh_secret():
    """A per-run secret (64 random bits from the OS): it lives in the grader's memory only."""
    return secrets.randbits(64)


def mixed(secret, seed):
    """The seed a builder's fixed `seed` becomes under `secret` (a hash of both: 63 bits)."""
    digest = hashlib.blake2b(f"{secret}:{int(seed)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


@contextlib.contextmanager
def drawn_from(secret):
    """While active, every seed a check builder sets (torch.Generator().manual_seed, torch.manual_seed: so
    rand, gen, chapter-local generators and seeded module inits) becomes mixed(secret, seed). The builders run
    unchanged and build the same checks (shapes, tolerances, judges) on inputs nobody can precompute. Not
    thread-safe: it patches torch while the steps are built (the grader does that once, before any child runs).
    """
    plain_generator, plain_seed = torch.Generator, torch.manual_seed

    class Salted(plain_generator):
        def manual_seed(self, seed):
            return super().manual_seed(mixed(secret, seed))

    def manual_seed(seed):
        return plain_seed(mixed(secret, seed))
    torch.Generator, torch.manual_seed, torch.random.manual_seed = Salted, manual_seed, manual_seed
    try:
        yield
    finally:
        torch.Generator, torch.manual_seed, torch.random.manual_seed = plain_generator, plain_seed, plain_seed


# --- comparing ---------------------------------------------------------------------------------------
def kind(value):
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} ({str(value.dtype).removeprefix('torch.')})"
    if isinstance(value, Opaque):
        return f"a {value.type} ({value.repr[:60]})"
    if isinstance(value, Raised):
        return f"an exception {value.type}: {value.message}"
    if isinstance(value, MetaTensor):
        return f"a meta tensor of shape {value.shape}"
    return f"{type(value).__name__} {summary(value)}"


def _fmt(x):
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def _compare_tensor(got, exp, atol, rtol, dtype, where):
    if not isinstance(got, torch.Tensor):
        return f"{where}returned {kind(got)}, expected {kind(exp)}"
    if tuple(got.shape) != tuple(exp.shape):
        return f"{where}shape {tuple(got.shape)}, expected {tuple(exp.shape)}"
    if dtype and got.dtype != exp.dtype:
        return f"{where}dtype {got.dtype}, expected {exp.dtype}"
    if got.numel() == 0:
        return None
    if exp.is_floating_point() or got.is_floating_point():
        g, e = got.double(), exp.double()
        diff = (g - e).abs()
        diff[(torch.isnan(g) & torch.isnan(e)) | (torch.isinf(e) & (g == e))] = 0.0
        diff[torch.isnan(diff)] = math.inf  # NaN on one side only
        bad = diff > atol + rtol * e.abs().nan_to_num(posinf=0.0)
        score = diff
    else:
        g, e = got, exp.to(got.dtype) if got.dtype != torch.bool else exp
        bad = g != e
        score = bad.double()
    if not bad.any():
        return None
    if exp.is_floating_point() or got.is_floating_point():
        broken = ~torch.isfinite(g) & torch.isfinite(e)  # NaN or inf where the reference is finite: never close
        if broken.any():
            flat = int(torch.argmax(broken.reshape(-1).to(torch.uint8)))
            index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(got.shape)))
            return (f"{where}{nonfinite_words(g[broken])} in {int(broken.sum())} of {broken.numel()} entries where the "
                    f"reference is finite, first at index {index}: got {_fmt(got.reshape(-1)[flat].item())}, "
                    f"expected {_fmt(exp.reshape(-1)[flat].item())}")
    flat = int(torch.argmax(torch.where(bad, score, torch.zeros_like(score))))
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(got.shape)))
    gv, ev = got.reshape(-1)[flat].item(), exp.reshape(-1)[flat].item()
    allowed = "exact equality" if not exp.is_floating_point() else f"atol {atol:g}, rtol {rtol:g}"
    lines = f"{where}{int(bad.sum())} of {bad.numel()} entries differ"
    if exp.is_floating_point():
        lines += f"; largest difference {_fmt(float(score.reshape(-1)[flat]))}"
    return f"{lines} at index {index}: got {_fmt(gv)}, expected {_fmt(ev)} (allowed: {allowed})"


def nonfinite_words(values):
    """'NaN', 'inf' or 'NaN and inf': what the non-finite `values` (a tensor) hold."""
    kinds = [w for w, hit in (("NaN", bool(torch.isnan(values).any())), ("inf", bool(torch.isinf(values).any())))
             if hit]
    return " and ".join(kinds) or "a non-finite value"


def compare(got, exp, *, atol=TOL, rtol=0.0, dtype=True, where=""):
    """None when `got` matches `exp`, else one line saying where and by how much they differ.

    The one comparison every check goes through (close, equal, expect_close, expect_within): a NaN or an inf
    where the expected value is finite always fails, and the line names it; NaN matches NaN and inf the same
    inf only where the reference holds them."""
    if isinstance(exp, torch.Tensor):
        return _compare_tensor(got, exp, atol, rtol, dtype, where)
    if isinstance(exp, (tuple, list)):
        if not isinstance(got, (tuple, list)):
            return f"{where}returned {kind(got)}, expected a {type(exp).__name__} of {len(exp)}"
        if len(got) != len(exp):
            return f"{where}returned {len(got)} items, expected {len(exp)}"
        for i, (g, e) in enumerate(zip(got, exp)):
            if problem := compare(g, e, atol=atol, rtol=rtol, dtype=dtype, where=f"{where}[{i}]: "):
                return problem
        return None
    if isinstance(exp, dict):
        if not isinstance(got, dict):
            return f"{where}returned {kind(got)}, expected a dict"
        if set(got) != set(exp):
            return f"{where}keys {sorted(map(str, got))}, expected {sorted(map(str, exp))}"
        for key in exp:
            if problem := compare(got[key], exp[key], atol=atol, rtol=rtol, dtype=dtype, where=f"{where}[{key!r}]: "):
                return problem
        return None
    if isinstance(exp, bool) or exp is None or isinstance(exp, (str, bytes)):
        if type(got) is not type(exp) or got != exp:
            return f"{where}returned {kind(got)}, expected {exp!r}"
        return None
    if isinstance(exp, int):
        if type(got) is not int:
            hint = " (convert with int(...) or .item())" if isinstance(got, (torch.Tensor, Opaque, float)) else ""
            return f"{where}returned {kind(got)}, expected the Python int {exp}{hint}"
        if got != exp:
            return f"{where}got {got}, expected {exp} (off by {got - exp})"
        return None
    if isinstance(exp, float):
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if type(got) not in (int, float):
            return f"{where}returned {kind(got)}, expected a number close to {exp:.6g}"
        if not math.isfinite(got) and math.isfinite(exp):
            return f"{where}got {got}, expected {exp:.10g} ({nonfinite_words(torch.tensor([float(got)]))} where the " \
                   "reference is finite)"
        if not abs(got - exp) <= atol + rtol * abs(exp):
            return f"{where}got {got:.10g}, expected {exp:.10g} (difference {abs(got - exp):.3g}; allowed: " \
                   f"atol {atol:g}, rtol {rtol:g})"
        return None
    raise TypeError(f"the grader cannot compare with {type(exp).__name__}")


def describe(call):
    return call.describe() if isinstance(call, Call) else str(call)


def expect_close(got, expected, *, call, what="the reference", atol=TOL, rtol=0.0, dtype=True):
    """Raise Failure naming the call, the reference and the largest difference, unless they match."""
    if problem := compare(got, expected, atol=atol, rtol=rtol, dtype=dtype):
        raise Failure(f"{describe(call)}\n  compared with {what}: {problem}")


def expect(condition, call, message):
    if not condition:
        raise Failure(f"{describe(call)}\n  {message}")


def expect_within(value, bound, call, what):
    """A hand-written check's `value <= bound` (an error, a distance), failing on NaN and inf with words that
    name them (a bare `if value > bound: fail` lets NaN through)."""
    number = float(value.max()) if isinstance(value, torch.Tensor) and value.numel() else value
    if isinstance(value, torch.Tensor) and not bool(torch.isfinite(value).all()):
        raise Failure(f"{describe(call)}\n  {what} is {nonfinite_words(value[~torch.isfinite(value)])} (the answer "
                      "holds NaN or inf)")
    if not isinstance(number, (int, float)) or not math.isfinite(number):
        raise Failure(f"{describe(call)}\n  {what} is {number} (the answer holds NaN or inf)")
    if not number <= bound:
        raise Failure(f"{describe(call)}\n  {what} is {_fmt(float(number))}, allowed at most {_fmt(float(bound))}")


# --- steps ---------------------------------------------------------------------------------------
def close(call, expected, *, what="the reference", atol=TOL, rtol=0.0, dtype=True):
    """The call's result must match `expected` within atol + rtol·|expected| (shape and dtype too)."""
    return Step((call,), lambda got: expect_close(got, expected, call=call, what=what, atol=atol, rtol=rtol,
                                                  dtype=dtype))


def equal(call, expected, *, what="the reference"):
    """Exactly equal: same type for Python ints and bools, same values for tensors."""
    return close(call, expected, what=what, atol=0.0, rtol=0.0)


def raises(call, *names, why=""):
    """The call must raise one of the named exception classes (or a subclass)."""
    call = expecting(call, *names)

    def judge(got):
        if not isinstance(got, Raised):
            raise Failure(f"{call.describe()}\n  returned {kind(got)}; expected it to raise "
                          f"{' or '.join(names)}{(' ' + why) if why else ''}")
    return Step((call,), judge)


def captured(call, capture):
    """The same call, sending back something other than its return value (see calls.Call.capture)."""
    return dataclasses.replace(call, capture=capture)


def expecting(call, *names):
    """The same call, where raising one of the named exception classes is a result, not an error."""
    return dataclasses.replace(call, raises=tuple(names))


def check(*calls, judge):
    """Any judgement over several calls' results: `judge(*results)` raises Failure."""
    return Step(tuple(calls), judge)


# --- tasks and chapters ----------------------------------------------------------------------------
@dataclasses.dataclass
class Task:
    id: str  # "1.4"
    functions: tuple  # the learner functions it grades
    title: str
    build: object  # generator function: one Fn per function -> Steps
    extra: list = dataclasses.field(default_factory=list)  # hidden (teacher) check builders, set per session
    extend: bool = False  # an extend task: the chapter's idea on a case no notebook cell solves

    @property
    def chapter(self):
        return int(self.id.split(".")[0])

    @property
    def marker(self):
        return "task" + self.id.replace(".", "_")

    @functools.cached_property
    def public_steps(self):
        return list(self.build(*map(Fn, self.functions)))

    def steps(self, extra=()):
        """The public steps, then the steps of any hidden checks for this task."""
        out = list(self.public_steps)
        for builder in extra:
            out += list(builder(*map(Fn, self.functions)))
        return out

    def fresh_steps(self, secret, extra=()):
        """The same steps built again with every seed mixed with `secret` (drawn_from): one per step of
        `steps(extra)`, in the same order. Seeds of a generator handed to the learner's function (calls.Gen) stay
        as they are: those checks judge the learner's own draws by statistics calibrated on that seed."""
        with drawn_from(secret):
            out = list(self.build(*map(Fn, self.functions)))
            for builder in extra:
                out += list(builder(*map(Fn, self.functions)))
        return out


@dataclasses.dataclass
class Chapter:
    number: int
    module: str  # "ex01_attention": exercises/ex01_attention.py
    title: str
    allowed: tuple = ()  # minilin names its exercises may use (everything else in minilin is the reference)
    tasks: dict = dataclasses.field(default_factory=dict)

    @property
    def file(self):
        return f"{self.module}.py"

    def task(self, task_id, *functions, extend=False):
        """Decorator: register a check builder for task `task_id`, grading the learner's `functions`.

        extend=True marks an extend task: its solution appears in no notebook (a test holds them to that).
        """
        def register(build):
            title = (build.__doc__ or build.__name__).strip().splitlines()[0]
            self.tasks[task_id] = Task(task_id, functions, title, build, extend=extend)
            return build
        return register


HIDDEN = []  # (task id, builder) registered by hidden_check while a teacher's file is loaded


def hidden_check(task_id):
    """Decorator for a teacher's extra check (a file in --hidden-tests DIR): same form as a task's builder."""
    def register(build):
        HIDDEN.append((task_id, build))
        return build
    return register
