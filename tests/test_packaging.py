"""The course installs the same packages whether a learner uses pip (pyproject) or conda (environment.yml)."""
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml  # PyYAML comes with JupyterLab (jupyter-events), part of the course extra

ROOT = Path(__file__).resolve().parent.parent
CONDA_NAMES = {"pytorch": "torch"}  # conda package name -> PyPI name


def requirement_name(req):
    return re.split(r"[<>=!~\[ ;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def pyproject_packages():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # the library and the course extra; the optional `fla` extra (a 1 GB triton, for one peer test) and `site`
    # extra (the course website's builder) are left to `pip install -e ".[fla]"` / `".[site]"` in either
    # environment, as the README says
    extras = project["optional-dependencies"]
    reqs = project["dependencies"] + [r for name, extra in extras.items() if name not in ("fla", "site")
                                      for r in extra]
    return {requirement_name(r) for r in reqs}


def environment_packages():
    deps = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    conda = [d for d in deps if isinstance(d, str)]
    pip = [r for d in deps if isinstance(d, dict) for r in d.get("pip", [])]
    names = {CONDA_NAMES.get(requirement_name(d), requirement_name(d)) for d in conda}
    names |= {requirement_name(r) for r in pip if not r.startswith("-e")}
    return names - {"python", "pip"}


def test_environment_yml_lists_the_same_packages_as_pyproject():
    env = environment_packages()
    assert env == pyproject_packages(), (
        f"only in environment.yml: {sorted(env - pyproject_packages())}; "
        f"only in pyproject.toml: {sorted(pyproject_packages() - env)}")


@pytest.mark.needs_solutions
def test_grade_command_scores_solutions_and_stubs(tmp_path):
    from minilin.grading.course import TASKS
    from minilin.grading.release import write_stubs
    write_stubs(ROOT / "exercises", tmp_path / "stubs")  # the stubs as released, whatever exercises/ holds

    def grade(*where):
        return subprocess.run([sys.executable, "-m", "minilin", "grade", "--chapter", "1", *where],
                              capture_output=True, text=True, cwd=ROOT, timeout=300)
    solved, stubs = grade("--impl", "solutions"), grade("--folder", str(tmp_path / "stubs"))
    n = sum(t.chapter == 1 for t in TASKS.values())
    assert solved.returncode == 0, solved.stderr
    assert f"score: {n}/{n} points (100%), {n}/{n} tasks pass [solutions]" in solved.stdout
    assert stubs.returncode == 1 and f"score: 0/{n} points (0%), 0/{n} tasks pass [stubs]" in stubs.stdout


def test_cli_help_lists_every_command():
    out = subprocess.run([sys.executable, "-m", "minilin", "--help"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120).stdout
    for command in ("grade", "bench", "train", "sample"):
        assert command in out


@pytest.mark.slow
def test_the_wheel_ships_every_module_and_its_commands_run_from_it(tmp_path):
    """A non-editable install (pip install ., a wheel, pip install git+URL) has every subpackage and the LICENSE,
    and `python -m minilin COMMAND --help` works from it, outside the course folder."""
    import subprocess
    import sys
    import zipfile
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path / "dist"), str(ROOT)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = next((tmp_path / "dist").glob("minilin-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    tree = {p.relative_to(ROOT).as_posix() for p in (ROOT / "minilin").rglob("*.py")} | {"minilin/pydoc_topics.txt.gz"}
    missing = sorted(tree - names)
    assert not missing, f"the wheel lacks {missing}"
    for sub in ("minilin/bench/", "minilin/train/", "minilin/grading/"):
        assert any(n.startswith(sub) for n in names), sub
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "the wheel must carry the LICENSE text"
    target = tmp_path / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                                str(wheel)], capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr[-3000:]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {**__import__("os").environ, "PYTHONPATH": str(target)}
    where = subprocess.run([sys.executable, "-c", "import minilin; print(minilin.__file__)"], cwd=outside, env=env,
                           capture_output=True, text=True)
    assert where.stdout.strip().startswith(str(target)), where
    for command in ("grade", "release", "bench", "train", "sample"):
        ran = subprocess.run([sys.executable, "-m", "minilin", command, "--help"], cwd=outside, env=env,
                             capture_output=True, text=True)
        assert ran.returncode == 0 and "usage:" in ran.stdout, (command, ran.stderr[-2000:])
