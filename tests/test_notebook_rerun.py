"""Cells that can be re-run: a learner runs a cell twice, or goes back one cell, and nothing later breaks.

A static check over every notebook: no cell rebinds a name that an *earlier* cell defined to a function of
itself (`scores = scores / math.sqrt(D)`, `x += 1`), the pattern that makes a second run of the cell compute
something else. And an execution check for notebooks 00-02: every code cell run twice in a row in a fresh
kernel, no error.
"""
import ast
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def code_cells(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells) if c["cell_type"] == "code"]


def python_source(src):
    """The cell without IPython's ! and % lines (not Python)."""
    return "\n".join("" if line.lstrip().startswith(("!", "%")) else line for line in src.splitlines())


def self_rebinds(tree):
    """Names that a cell's top-level statements rebind to a function of themselves before binding them anew."""
    bound, found = set(), []
    for stmt in tree.body:
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            if stmt.target.id not in bound:
                found.append(stmt.target.id)
            bound.add(stmt.target.id)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            used = {n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name)}
            found += sorted((names & used) - bound)
            bound |= names
        else:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    bound.add(node.id)
                elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                    bound.add(node.name)
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_cell_rebinds_an_earlier_name_to_a_function_of_itself(path):
    defined, bad = set(), []
    for i, src in code_cells(path):
        tree = ast.parse(python_source(src))
        bad += [(i, name) for name in self_rebinds(tree) if name in defined]
        defined |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        defined |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert not bad, (f"{path.name}: cells (index, name) that change a name an earlier cell defined; running the "
                     f"cell twice changes what later cells see — give the new value its own name: {bad}")


def test_the_static_check_finds_the_pattern():
    assert self_rebinds(ast.parse("scores = scores / 2")) == ["scores"]
    assert self_rebinds(ast.parse("x += 1")) == ["x"]
    assert self_rebinds(ast.parse("x = 1\nx = x + 1")) == []          # bound in the same cell first: re-runnable
    assert self_rebinds(ast.parse("y = f(x)")) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["00_start_here", "01_exact_attention", "02_low_rank"])
def test_every_cell_can_run_twice_in_a_row(name, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient
    path = ROOT / "notebooks" / f"{name}.ipynb"
    nb = nbformat.read(path, as_version=4)
    cells = []
    for cell in nb.cells:
        cells.append(cell)
        if cell.cell_type == "code":
            cells.append(nbformat.from_dict(json.loads(json.dumps(cell))))   # the same cell again, at once
    nb.cells = cells
    env_before = dict(os.environ)
    os.environ.setdefault("TQDM_DISABLE", "1")
    try:
        client = NotebookClient(nb, timeout=1800, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}})
        client.execute()   # raises CellExecutionError, naming the cell, on the first error
    finally:
        os.environ.clear()
        os.environ.update(env_before)
