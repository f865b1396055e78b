"""Checks a table cannot pass, and the similarity report (issue 44, items 3 and 6).

One class (task 8.1 only) is graded once with --similarity: a submission that answers from a table of the
reference's outputs keyed by an input hash, an identical copy of it, solutions/ renamed and reformatted, and an
honest solution written differently. The other tests run nothing in a child.
"""
import ast
import base64
import builtins
import csv
import hashlib
import importlib
import importlib.util
import io
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from minilin.grading import similarity
from minilin.grading.calls import dumps, execute, loads_untrusted
from minilin.grading.checks import Failure
from minilin.grading.course import TASKS
from minilin.grading.runner import Session, run_in_process

ROOT = Path(__file__).resolve().parent.parent
TASK = "8.1"
FUNCTION = "convex_copy_map"
MEMORISED = '''
import base64, hashlib, io
import torch

_TABLE = torch.load(io.BytesIO(base64.b64decode({blob!r})), weights_only=True)


def _key(args, kwargs):
    parts = [a.tolist() if isinstance(a, torch.Tensor) else a for a in (*args, *sorted(kwargs.items()))]
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def convex_copy_map(*args, **kwargs):
    """No construction here: the answers to the inputs seen before, by their hash."""
    return _TABLE.get(_key(args, kwargs), torch.zeros(1))
'''
HONEST = '''
import torch


def convex_copy_map(sources, k):
    """A random rank-(k - 1) projector over positions, its rows shifted to weights >= 0, one slot undoing the shift."""
    n = len(sources)
    basis, _, _ = torch.linalg.svd(torch.rand(n, k - 1, dtype=torch.float64) - 0.5, full_matrices=False)
    rows = basis.index_select(0, sources)  # (n, k - 1)
    lift = -rows.min(dim=1, keepdim=True).values.clamp(max=0)  # each row's own shift
    weights = torch.hstack([rows + lift, lift])
    undo = -basis.sum(dim=1)  # the last slot's row over positions
    return weights / weights.sum(dim=1, keepdim=True), torch.vstack([basis.T, undo[None]])
'''


def table_source():
    """The memorising file: the solution's answer to every Call of the task's fixed-input checks."""
    solution = importlib.import_module("solutions.ex08_limits")
    table = {}
    for step in TASKS[TASK].public_steps:
        for call in step.calls:
            key = hashlib.sha256(repr([a.tolist() if isinstance(a, torch.Tensor) else a
                                       for a in (*call.args, *sorted(call.kwargs.items()))]).encode()).hexdigest()
            with tempfile.TemporaryDirectory() as scratch:
                table[key] = loads_untrusted(dumps(execute(solution, call, scratch)))
    buffer = io.BytesIO()
    torch.save(table, buffer)
    return MEMORISED.format(blob=base64.b64encode(buffer.getvalue()).decode())


class _Rename(ast.NodeTransformer):
    """Every local name and helper gets another name (the task's signature stays); docstrings go."""

    def __init__(self, keep):
        self.keep = keep

    def visit_Name(self, node):
        if node.id not in self.keep:
            node.id = f"my_{node.id}_"
        return node

    def visit_FunctionDef(self, node):
        if node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            node.body = node.body[1:] or [ast.Pass()]
        if node.name != FUNCTION:
            node.name = f"my_{node.name}_"
        for arg in node.args.args:
            self.keep.add(arg.arg)
        self.generic_visit(node)
        return node


def renamed_solution():
    """solutions/ex08_limits.py with its names changed, reformatted (ast.unparse) and commented."""
    tree = ast.parse((ROOT / "solutions" / "ex08_limits.py").read_text(encoding="utf-8"))
    keep = set(similarity._aliases(tree)) | set(dir(builtins)) | {FUNCTION}
    lines = ast.unparse(_Rename(keep).visit(tree)).splitlines()
    return "\n".join(f"{line}  # mine" if line.strip().startswith(("my_", "return")) else line for line in lines)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("fresh")
    memorised = table_source()
    files = {"memo": memorised, "memo_copy": memorised, "renamed": renamed_solution(), "honest": HONEST}
    for name, text in files.items():
        (base / "class" / name).mkdir(parents=True)
        (base / "class" / name / "ex08_limits.py").write_text(text, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "minilin", "grade", "--submissions", str(base / "class"),
                           "--task", TASK, "--jobs", "2", "--timeout", "60", "--out", str(base / "gradebook.csv"),
                           "--feedback", str(base / "feedback"), "--similarity", str(base / "similarity.csv")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TQDM_DISABLE": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    with open(base / "gradebook.csv", newline="", encoding="utf-8") as handle:
        rows = {r["student"]: r for r in csv.DictReader(handle)}
    with open(base / "similarity.csv", newline="", encoding="utf-8") as handle:
        pairs = list(csv.DictReader(handle))
    return dict(proc=proc, rows=rows, pairs=pairs, base=base, memorised=memorised)


@pytest.mark.needs_solutions
def test_a_table_of_the_fixed_answers_passes_them_but_not_fresh_inputs(graded):
    spec = importlib.util.spec_from_file_location("memo", graded["base"] / "class" / "memo" / "ex08_limits.py")
    memo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(memo)
    run_in_process(TASKS[TASK], memo)  # the fixed checks alone: every one passes
    with pytest.raises(Failure):
        run_in_process(TASKS[TASK], memo, secret=12345)
    rows, out = graded["rows"], graded["proc"].stdout
    assert rows["memo"]["points"] == "0" and rows["memo"]["status"] == "fail", rows["memo"]
    assert rows["honest"]["status"] == "pass" and rows["renamed"]["status"] == "pass", rows
    checks = int(rows["memo"]["checks_total"])
    assert f"fresh inputs: {checks} of {checks} checks also run on inputs drawn anew" in out, out
    feedback = (graded["base"] / "feedback" / "memo.md").read_text(encoding="utf-8")
    assert "fresh inputs: check 1 passed on its fixed inputs and fails on a new random draw" in feedback
    assert "convex_copy_map(<" in feedback  # the call by its shapes, never the draw's values


def test_the_fresh_draw_changes_every_seed_and_keeps_the_checks(monkeypatch):
    task, secret = TASKS["9.1"], 987654321987654321
    with Session([task], fresh=True) as two, Session([task], fresh=False) as fixed:
        monkeypatch.setattr("minilin.grading.runner.fresh_secret", lambda: secret)
        one = Session([task], fresh=True)
        assert [t is not None for t in one.twins["9.1"]] == [True] * len(one.steps["9.1"])
        assert not any(fixed.twins["9.1"]) and "fresh inputs: off" in fixed.fresh_note()
        a, b = one.twins["9.1"][0].calls[0].args[0], two.twins["9.1"][0].calls[0].args[0]
        assert a.shape == b.shape == one.steps["9.1"][0].calls[0].args[0].shape and not torch.equal(a, b)
        saved = b"".join(p.read_bytes() for p in one.root.rglob("*") if p.is_file())
        assert str(secret).encode() not in saved and secret.to_bytes(8, "little") not in saved
        assert secret not in vars(one).values()  # the secret is gone once the inputs are drawn
        one.__exit__(None, None, None)
    assert torch.Generator().manual_seed(3).initial_seed() == 3  # torch is itself again after the build


@pytest.mark.needs_solutions
def test_similar_pairs_are_flagged_and_honest_ones_are_not(graded):
    pairs = {(p["first"], p["second"]): p for p in graded["pairs"]}
    assert ("memo", "memo_copy") in pairs or ("memo_copy", "memo") in pairs, pairs
    assert pairs[(similarity.REFERENCE, "renamed")]["verdict"] == "identical after normalisation", pairs
    assert not [p for p in pairs if "honest" in p], pairs
    assert all(p["task"] == TASK and p["function"] == FUNCTION for p in graded["pairs"])
    assert "similarity: " in graded["proc"].stdout and "pairs of functions flagged" in graded["proc"].stdout


def test_similarity_cells_are_defused(tmp_path):
    for name, text in (("=cmd|calc!A0", HONEST), ("+other", HONEST)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "ex08_limits.py").write_text(text, encoding="utf-8")
    from minilin.grade import write_similarity
    from minilin.grading import report
    line = write_similarity(tmp_path / "s.csv", sorted(p for p in tmp_path.iterdir() if p.is_dir()),
                            [TASKS[TASK]], report)
    cells = [row for row in csv.reader(open(tmp_path / "s.csv", encoding="utf-8"))]
    assert "1 of" in line and all(not c.startswith(("=", "+")) for row in cells[1:] for c in row), cells
