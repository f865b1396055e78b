"""The student release as a student gets it, its GitHub Classroom workflow, and the Gradescope bundle.

One release is built (module fixture) with a rubric, a teacher's hidden check and `--gradescope`. One
submission (the solutions, with task 1.5 wrong) is graded twice, by the two commands a teacher ships: the
workflow's grading step (run as the YAML spells it, in the release) and the bundle's run_autograder (with
/autograder replaced by a temporary folder), both with a long time limit; the two must give every task the same
points. The release's
notebooks that read committed files run there under strict nbval.
"""
import ast
import base64
import builtins
import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml  # PyYAML comes with JupyterLab (jupyter-events), part of the course extra

from minilin.cli import UsageError
from minilin.grading.classroom import REPORTER_STATUS, reporter_results, step_id
from minilin.grading.course import CHAPTERS, TASKS, task_key
from minilin.grading.release import (RUBRIC, START_HERE, STUDENT_ONLY, TEACHER_ONLY, TORCH, TORCH_CPU_INDEX,
                                     WORKFLOW, student_notebook, student_readme)
from minilin.grading.report import load_rubric

pytestmark = pytest.mark.needs_solutions  # a release is built from the full course
ROOT = Path(__file__).resolve().parent.parent
ORDER = sorted(TASKS, key=task_key)
RUBRIC_TOML = 'default = 1\n[points]\n"4" = 2\n"1.4" = 3\n'
WRONG_1_5 = ("\n\ndef saturated_rows(q, k, scale=None, threshold=0.99):\n"  # no check passes
             "    return torch.full(q.shape[:2], 3.0, dtype=q.dtype)\n")
HIDDEN = '''from minilin.grading.checks import equal, hidden_check


@hidden_check("1.5")
def secret_kibibyte(saturated_rows):
    import torch
    q = torch.ones(1, 1, 2, 4, dtype=torch.float64)  # two equal scores: no row saturated
    yield equal(saturated_rows(q, q), torch.zeros(1, 1, dtype=torch.float64), what="SECRET-1024 no saturated row")
'''
# what only the teacher's course has, or only a teacher runs
TEACHER_WORDS = ("solutions/", ".ci/", "python -m minilin release", "--submissions", "--impl solutions",
                 "--hidden-tests", "For teachers")


# Both gradings below run with a long limit per chapter: the test compares formats and points, which a loaded test
# machine (CI shares its CPUs with notebooks) must not change by timing out a chapter in one of the two runs.
SLOW_MACHINE = ("--timeout", "300")


def run(args, cwd, env=None, timeout=600):
    env = {**os.environ, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def minilin(*args, cwd=ROOT, env=None):
    return run([sys.executable, "-m", "minilin", *args], cwd, env)


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    base = tmp_path_factory.mktemp("release")
    (base / "rubric.toml").write_text(RUBRIC_TOML)
    (base / "hidden").mkdir()
    (base / "hidden" / "secret_check.py").write_text(HIDDEN)
    out, bundle = base / "course", base / "autograder.zip"
    proc = minilin("release", str(out), "--rubric", str(base / "rubric.toml"), "--hidden-tests",
                   str(base / "hidden"), "--gradescope", str(bundle))
    assert proc.returncode == 0, proc.stderr
    assert "hidden checks for tasks 1.5 were not shipped" in proc.stdout
    return SimpleNamespace(base=base, out=out, bundle=bundle, points=load_rubric(base / "rubric.toml"),
                           workflow=yaml.safe_load((out / WORKFLOW).read_text(encoding="utf-8")))


def steps(release):
    return release.workflow["jobs"]["run-autograding-tests"]["steps"]


def submission(folder):
    """The solutions with task 1.5 wrong (a later definition wins), as exNN_*.py files in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for chapter in CHAPTERS.values():
        text = (ROOT / "solutions" / chapter.file).read_text(encoding="utf-8")
        (folder / chapter.file).write_text(text + (WRONG_1_5 if chapter.number == 1 else ""), encoding="utf-8")


@pytest.fixture(scope="module")
def classroom(release):
    """{task id: the command grader's result} from the workflow's one grading step, run as the YAML says."""
    (grade,) = [s for s in steps(release) if "minilin" in s.get("run", "") and "pip" not in s["run"]]
    submission(release.out / "exercises")
    output = release.base / "github_output"
    proc = run([*shlex.split(grade["run"]), *SLOW_MACHINE], release.out,
               env={"GITHUB_OUTPUT": str(output), "GITHUB_REPOSITORY": ""})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    pairs = [line.split("=", 1) for line in output.read_text().splitlines()]
    by_step = {step: json.loads(base64.b64decode(value)) for step, value in pairs}
    assert list(by_step) == [step_id(t) for t in ORDER] and proc.stdout.count("; 300 s per chapter, ") == 1  # one run
    return SimpleNamespace(results={t: by_step[step_id(t)] for t in ORDER}, stdout=proc.stdout, step=grade)


@pytest.fixture(scope="module")
def gradescope(release):
    """The bundle unpacked as Gradescope does, run_autograder run on the same submission: results.json."""
    root = release.base / "autograder"
    with zipfile.ZipFile(release.bundle) as bundle:
        bundle.extractall(root / "source")
    submission(root / "submission")
    proc = run(["bash", str(root / "source" / "run_autograder"), *SLOW_MACHINE], release.base,
               env={"AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable})
    assert proc.returncode == 0 and "; 300 s per chapter, " in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))


# --- the grade extra and the Classroom workflow ------------------------------------------------------
def test_grade_extra_holds_what_grading_imports_and_no_course_tools():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower() for r in extras["grade"]}
    peers = set()  # the third-party modules the checks import (chapter 5's `peer("...")`)
    for path in (ROOT / "minilin" / "grading").glob("ex[0-9][0-9]_*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "peer":
                peers.add(node.args[0].value.split(".")[0])
    distributions = importlib.metadata.packages_distributions()
    assert peers and names == {d.lower() for p in peers for d in distributions[p]}
    assert not names & {"jupyterlab", "playwright", "nbval", "pytest", "performer-pytorch", "ipywidgets"}


def test_workflow_installs_the_pinned_cpu_torch_and_the_grade_extra_with_a_pip_cache(release):
    text = (release.out / WORKFLOW).read_text(encoding="utf-8")
    assert re.search(r"torch==([\d.]+)", (ROOT / ".ci" / "run").read_text()).group(1) == TORCH  # what CI tests
    setup = next(s for s in steps(release) if s.get("uses", "").startswith("actions/setup-python"))
    assert setup["with"]["cache"] == "pip" and (release.out / setup["with"]["cache-dependency-path"]).is_file()
    install = next(s for s in steps(release) if "pip install" in s.get("run", ""))
    assert f"pip install torch=={TORCH} --index-url {TORCH_CPU_INDEX}" in install["run"]
    assert 'pip install -e ".[grade]"' in install["run"]
    for word in ("jupyterlab", "playwright", "[course]", "linformer", "performer", "linear-attention", "[fla]"):
        assert word not in text.lower(), word
    assert "push" in release.workflow["on"]  # quoted: YAML 1.1 would read a bare `on` as True


def test_workflow_grades_once_and_hands_each_task_to_the_reporter(release, classroom):
    assert not [s for s in steps(release) if "autograding-command-grader" in s.get("uses", "")]
    reporter = steps(release)[-1]
    assert reporter["uses"].startswith("classroom-resources/autograding-grading-reporter@")
    assert reporter["with"]["runners"].split(",") == [step_id(t) for t in ORDER]
    assert reporter["env"] == {f"{step_id(t).upper()}_RESULTS": f"${{{{ steps.{classroom.step['id']}.outputs."
                               f"{step_id(t)} }}}}" for t in ORDER}
    assert f"--rubric {RUBRIC}" in classroom.step["run"]
    assert tomllib.loads((release.out / RUBRIC).read_text())["points"] == {t: release.points[t] for t in ORDER}


def test_workflow_results_are_the_reporters_format_with_the_graders_points(release, classroom, gradescope):
    graded = {t["number"]: t for t in gradescope["tests"]}
    for task_id, result in classroom.results.items():
        (test,) = result["tests"]
        assert set(result) == {"version", "status", "max_score", "tests"} and result["version"] == 1
        assert {"name", "status", "score", "message"} <= set(test) and test["status"] == result["status"]
        assert result["max_score"] == release.points[task_id] == graded[task_id]["max_score"], task_id
        assert test["score"] == graded[task_id]["score"], (task_id, test["message"])  # the points of `grade`
        expected = "fail" if task_id == "1.5" else "pass"
        assert result["status"] == expected and (test["score"] == 0) == (expected == "fail"), task_id
    message = classroom.results["1.5"]["tests"][0]["message"]
    assert "saturated_rows" in message and re.match(r"\d+ of \d+ checks pass: ", message), message
    assert "# Feedback:" in classroom.stdout and "1.5" in classroom.stdout  # the feedback, in the Actions log


def test_reporter_results_map_every_grader_status():
    row = {"points": "0", "max_points": "2.5", "message": "'=a formula guard, removed"}
    for status, reporter in REPORTER_STATUS.items():
        results = reporter_results({t: {**row, "task": t, "status": status} for t in TASKS})
        result = json.loads(base64.b64decode(results[step_id("1.1")]))
        assert result["status"] == reporter and result["max_score"] == 2.5
        assert result["tests"][0]["message"] == "=a formula guard, removed"
    assert set(REPORTER_STATUS.values()) == {"pass", "fail", "error"}  # the three the reporter knows


def test_classroom_command_without_an_output_is_a_usage_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_OUTPUT"}
    proc = subprocess.run([sys.executable, "-m", "minilin.grading.classroom"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "python -m minilin.grading.classroom: error: no --output FILE and no GITHUB_OUTPUT (GitHub Actions sets "
        "it): say where to write"]


# --- the Gradescope bundle ---------------------------------------------------------------------------
def test_gradescope_bundle_holds_its_scripts_and_the_package_and_no_solutions_or_hidden_checks(release):
    with zipfile.ZipFile(release.bundle) as bundle:
        infos = {i.filename: i for i in bundle.infolist()}
        texts = {name: bundle.read(name).decode("utf-8", "replace") for name in infos}
    for script in ("setup.sh", "run_autograder"):
        assert infos[script].external_attr >> 16 & 0o111 == 0o111, script  # executable
        assert run(["bash", "-n", "-c", texts[script]], release.base).returncode == 0, script
    for name in ("pyproject.toml", "README.md", "rubric.toml", "minilin/grade.py", "minilin/grading/child.py",
                 "minilin/grading/ex05_peers.py"):
        assert name in infos, name
    assert not [n for n in infos if n.startswith(("solutions/", "exercises/", "tests/", ".ci/")) or ".pyc" in n]
    assert not [n for n, t in texts.items() if "SECRET-1024" in t or "secret_kibibyte" in t or "secret_check" in n]
    assert f"torch=={TORCH} --index-url {TORCH_CPU_INDEX}" in texts["setup.sh"] and "python3.11" in texts["setup.sh"]
    assert '"/autograder/source[grade]"' in texts["setup.sh"]
    assert "/autograder/submission" in texts["run_autograder"].replace("$root", "/autograder")
    assert tomllib.loads(texts["rubric.toml"])["points"] == release.points


def test_gradescope_bundle_grades_a_submission_end_to_end(release, gradescope):
    assert [t["number"] for t in gradescope["tests"]] == ORDER
    total = sum(release.points.values())
    assert gradescope["score"] == total - release.points["1.5"]  # every task but the wrong one, full points
    assert {t["number"] for t in gradescope["tests"] if t["score"] < t["max_score"]} == {"1.5"}


# --- the student copy: README, notebook 00, notebooks that read committed files ---------------------------
def test_release_readme_describes_the_students_folder_and_grading_on_push(release):
    text = (release.out / "README.md").read_text(encoding="utf-8")
    for word in TEACHER_WORDS:
        assert word not in text, word
    for words in ("Actions** tab", "Autograding Reporter", ".github/workflows/classroom.yml", "git push",
                  f"PyTorch {TORCH}", f"{sum(release.points.values())} points", "## Quickstart", "## Notebook map",
                  "results/reference/", "python -m minilin grade --task 3.2"):
        assert words in text, words
    assert text.startswith((ROOT / "README.md").read_text(encoding="utf-8").splitlines()[0] + "\n")
    assert "<!--" not in text
    assert "partial credit" in text and "earns 3/5 of its points" in text  # how a task's checks score
    assert "partial" in (release.out / WORKFLOW).read_text(encoding="utf-8")


def test_rubric_weights_reach_the_release_and_a_wrong_count_names_the_fix(tmp_path):
    from minilin.grading.release import main as release_main
    from minilin.grading.release import rubric_toml
    count = len(TASKS["1.4"].steps())
    (tmp_path / "r.toml").write_text(f'[points]\n"1.4" = 3\n[weights]\n"1.4" = {[1] * (count - 1) + [2]}\n')
    points = load_rubric(tmp_path / "r.toml")
    written = tomllib.loads(rubric_toml(points))
    assert written["weights"] == {"1.4": [1] * (count - 1) + [2]} and written["points"]["1.4"] == 3
    (tmp_path / "again.toml").write_text(rubric_toml(points))
    assert load_rubric(tmp_path / "again.toml").weights == points.weights  # the shipped rubric reads back
    (tmp_path / "bad.toml").write_text(f'[weights]\n"1.4" = [1, 2]\n')
    with pytest.raises(UsageError, match=f"task 1.4 has {count} checks: give {count} weights"):
        release_main([str(tmp_path / "out"), "--rubric", str(tmp_path / "bad.toml")])
    assert not (tmp_path / "out").exists()  # checked before anything is written


def test_release_notebook_00_drops_the_teachers_cells_and_keeps_the_students():
    main = json.loads((ROOT / START_HERE).read_text(encoding="utf-8"))["cells"]
    tags = [c["metadata"].get("tags", []) for c in main]
    teacher = [c for c, t in zip(main, tags) if TEACHER_ONLY in t]
    assert teacher and any("solutions/" in "".join(c["source"]) for c in teacher)
    student = json.loads(student_notebook((ROOT / START_HERE).read_text(encoding="utf-8")))["cells"]
    assert len(student) == len(main) - len(teacher)
    assert [c["id"] for c in student] == [c["id"] for c, t in zip(main, tags) if TEACHER_ONLY not in t]
    text = "\n".join("".join(c["source"]) for c in student)
    for word in TEACHER_WORDS:
        assert word not in text, word
    assert "**Actions** tab" in text and "Autograding Reporter" in text
    assert not [c for c in student if {TEACHER_ONLY, STUDENT_ONLY} & set(c["metadata"].get("tags", []))]
    assert any(STUDENT_ONLY in t for t in tags)


def test_release_readme_and_notebook_00_commands_run_as_written(release):
    from test_readme import check_command, commands_in, markdown_code, notebook_code  # the README's own check
    readme = commands_in(markdown_code((release.out / "README.md").read_text(encoding="utf-8")))
    notebook = commands_in(notebook_code(release.out / START_HERE))
    assert "python -m minilin grade --chapter 3" in readme and notebook
    for command in readme + notebook:
        check_command(command)


def test_release_readme_needs_the_marked_sections():
    with pytest.raises(UsageError, match="student-copy: intro"):
        student_readme("# a README\n\nno marked sections\n", {"1.1": 1})


def _bound_and_used(source):
    """The names a cell binds and the names it reads (IPython magics and shell lines dropped)."""
    tree = ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))
    bound, used = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, (ast.Store, ast.Del)) else used).add(node.id)
        elif isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, ast.Store):
            base = node.value  # `curves["x"] = ...` adds to curves: a later reader needs this cell too
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                base = base.value
            if isinstance(base, ast.Name):
                bound.add(base.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return bound, used


def committed_cells(path):
    """A notebook's first code cell (its imports), the code cells that read results/reference/ (by path, through a
    `REFERENCE / ...` path built in the first cell, or a `committed(...)` or `reference_file(...)` helper defined earlier), and each
    earlier cell that last defines a name they use (transitively), in the notebook's order; or []."""
    cells = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
    code = ["".join(c["source"]) for c in cells]
    names = [_bound_and_used(s) for s in code]
    keep = {0} | {i for i, s in enumerate(code) if i and re.search(r'"results" / "reference"|results/reference/|\bREFERENCE /|\b(?:committed|reference_file)\(', s)}
    if keep == {0}:
        return []
    todo = sorted(keep)
    while todo:
        i = todo.pop()
        for name in names[i][1] - names[i][0] - set(dir(builtins)):
            j = next((j for j in range(i - 1, -1, -1) if name in names[j][0]), None)
            if j is not None and j not in keep:
                keep.add(j)
                todo.append(j)
    return [cells[i] for i in sorted(keep)]


def test_committed_cells_bring_the_definitions_their_readers_use(tmp_path):
    cell = lambda s: {"cell_type": "code", "source": s, "metadata": {}, "outputs": [], "execution_count": None}
    nb = {"cells": [cell("import json"), cell("a = 1\nunused = 2"), cell("def f(x):\n    return x + a"),
                    cell("b = 5"), cell('json.loads(open("results/reference/x.json").read()); print(f(3))')]}
    (tmp_path / "n.ipynb").write_text(json.dumps(nb))
    assert [c["source"] for c in committed_cells(tmp_path / "n.ipynb")] == [nb["cells"][i]["source"] for i in (0, 1, 2, 4)]
    nb["cells"] = nb["cells"][:4]
    (tmp_path / "n.ipynb").write_text(json.dumps(nb))
    assert committed_cells(tmp_path / "n.ipynb") == []


def test_release_notebooks_that_read_committed_files_run_there_under_strict_nbval(release):
    """Notebook 00 (it grades exercises/) in full; of the others, only the cells that read results/reference/
    (with their notebook's imports and the cells defining what they use), in one notebook: a full run of 07
    takes many minutes on 2 cores."""
    folder = release.out / "notebooks"
    template = json.loads((folder / "00_start_here.ipynb").read_text(encoding="utf-8"))
    readers = {p.name: committed_cells(p) for p in sorted(folder.glob("[0-9][0-9]_*.ipynb"))
               if p.name != "00_start_here.ipynb"}
    readers = {name: cells for name, cells in readers.items() if cells}
    assert "07_tiny_lm.ipynb" in readers  # 07: the LM sweep
    template["cells"] = [cell for cells in readers.values() for cell in cells]
    (folder / "committed_files.ipynb").write_text(json.dumps(template, indent=1), encoding="utf-8")
    proc = run([sys.executable, "-m", "pytest", "--nbval", "-p", "no:cacheprovider", "-n", "0", "-q",
                "notebooks/00_start_here.ipynb", "notebooks/committed_files.ipynb"], release.out,
               env={"PYTHONPATH": str(release.out)})  # the kernel imports the release's minilin, as a student's
    assert proc.returncode == 0, proc.stdout[-4000:]
    cells = sum(c["cell_type"] == "code" for c in json.loads((folder / "00_start_here.ipynb").read_text())["cells"])
    assert f"{cells + len(template['cells'])} passed" in proc.stdout, proc.stdout[-1000:]


# --- the command line ---------------------------------------------------------------------------------
def test_release_help_lists_its_options_and_bad_input_is_one_line():
    from minilin.grading.release import build_parser
    text = build_parser().format_help()
    for option in ("--gradescope", "--rubric", "--hidden-tests", "outdir"):
        assert option in text, option
    proc = minilin("release")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "--gradescope FILE.zip" in proc.stderr
    from minilin.grading.release import main
    with pytest.raises(UsageError, match="ending in .zip"):
        main(["--gradescope", str(ROOT / "bundle.tar")])
    with pytest.raises(UsageError, match="ending in .zip"):
        main(["--gradescope", str(ROOT / "no-such-folder" / "bundle.zip")])

