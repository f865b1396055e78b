"""Launch badges of a published copy (`release OUTDIR --repo-url URL`, minilin/launch.py): the badges open each
notebook's own path in that repository, and the Colab setup cell does nothing anywhere but on Colab."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

from minilin import launch
from minilin.cli import UsageError

ROOT = Path(__file__).resolve().parent.parent
URL = "https://github.com/example-org/minilin-course"
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    out = tmp_path_factory.mktemp("published")
    shutil.copytree(ROOT / "notebooks", out / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    changed = launch.add_launch(out, URL, branch="main")
    return out, changed


def cells(path):
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def test_badges_open_each_notebooks_own_path_in_the_repository(published):
    out, changed = published
    assert changed == [f"notebooks/{n}" for n in NOTEBOOKS]
    for name in NOTEBOOKS:
        first = "".join(cells(out / "notebooks" / name)[0]["source"])
        original = "".join(cells(ROOT / "notebooks" / name)[0]["source"])
        assert first.splitlines()[0] == original.splitlines()[0], "the title stays the first line"
        colab = re.findall(r"\]\((https://colab\.research\.google\.com/github/[^)]+)\)", first)
        binder = re.findall(r"\]\((https://mybinder\.org/v2/gh/[^)]+)\)", first)
        assert colab == [f"https://colab.research.google.com/github/example-org/minilin-course/blob/main/"
                         f"notebooks/{name}"]
        assert len(binder) == 1 and binder[0].startswith("https://mybinder.org/v2/gh/example-org/minilin-course/main?")
        assert unquote(binder[0].split("labpath=")[1]) == f"notebooks/{name}"
        assert (ROOT / unquote(binder[0].split("labpath=")[1])).is_file()
        assert original.split("\n", 1)[1].strip() in first, "the rest of the first cell is unchanged"


def test_a_second_release_replaces_the_badges_and_the_cell(published, tmp_path):
    out, _ = published
    shutil.copytree(out / "notebooks", tmp_path / "notebooks")
    launch.add_launch(tmp_path, URL)
    for name in NOTEBOOKS:
        again = cells(tmp_path / "notebooks" / name)
        assert again == cells(out / "notebooks" / name)


def setup_cell(out, name):
    found = [c for c in cells(out / "notebooks" / name) if launch.TAG in c["metadata"].get("tags", [])]
    assert len(found) == 1 and cells(out / "notebooks" / name).index(found[0]) == 1
    return "".join(found[0]["source"])


def test_the_setup_cell_does_nothing_outside_colab(published, tmp_path):
    out, _ = published
    code = setup_cell(out, NOTEBOOKS[1])
    probe = (f"import os, sys\nstart = os.getcwd()\nexec(compile({code!r}, 'cell', 'exec'))\n"
             "assert os.getcwd() == start, os.getcwd()\nassert 'subprocess' not in dir()\n")
    r = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == "", (r.stdout, r.stderr)


def test_on_colab_the_cell_clones_installs_with_colabs_torch_and_moves_into_notebooks(published, tmp_path):
    out, _ = published
    code = setup_cell(out, NOTEBOOKS[1])
    course = tmp_path / "content" / "minilin-course"
    (course / "notebooks").mkdir(parents=True)   # what the clone would have made
    probe = f"""
import os, subprocess, sys, types
sys.modules["google"] = types.ModuleType("google"); sys.modules["google.colab"] = types.ModuleType("google.colab")
ran = []
subprocess.run = lambda args, check: ran.append(args)
real_isdir = os.path.isdir
os.path.isdir = lambda p: False if p == "/content/minilin-course" else real_isdir(p)
real_chdir = os.chdir
os.chdir = lambda p: (ran.append(["chdir", p]), real_chdir({str(course / 'notebooks')!r}))
exec(compile({code!r}, "cell", "exec"))
import json, torch; print(json.dumps([ran, torch.__version__]))
"""
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    ran, torch_version = json.loads(r.stdout)
    clone, pip, chdir = ran
    assert clone == ["git", "clone", "--depth", "1", "--branch", "main", URL, "/content/minilin-course"]
    assert pip[1:5] == ["-m", "pip", "install", "--quiet"] and "/content/minilin-course[course]" in pip
    assert f"torch=={torch_version}" in pip, "Colab's own PyTorch is pinned, not replaced"
    assert chdir == ["chdir", "/content/minilin-course/notebooks"]


@pytest.mark.parametrize("url", ["github.com/a/b", "https://gitlab.com/a/b", "https://github.com/a", "",
                                 "https://github.com/a/b/tree/main"])
def test_a_url_that_is_not_a_github_repository_is_refused(url):
    with pytest.raises(UsageError, match="https://github.com/OWNER/REPO"):
        launch.parse_repo_url(url)


def test_a_repository_url_with_git_suffix(tmp_path):
    assert launch.parse_repo_url("https://github.com/o/r.git") == ("o", "r")
    assert launch.parse_repo_url("https://github.com/o/r/") == ("o", "r")
    assert os.path.basename(URL) == "minilin-course"


@pytest.mark.needs_solutions
def test_release_with_repo_url_badges_every_notebook_and_without_it_none(tmp_path, capsys):
    from minilin.grading import release
    with_url, without = tmp_path / "published", tmp_path / "plain"
    assert release.main([str(with_url), "--repo-url", URL, "--branch", "course-2027"]) == 0
    assert release.main([str(without)]) == 0
    assert "added Colab and Binder badges" in capsys.readouterr().out
    for name in NOTEBOOKS:
        badged, plain = cells(with_url / "notebooks" / name), cells(without / "notebooks" / name)
        assert f"github/example-org/minilin-course/blob/course-2027/notebooks/{name})" in "".join(badged[0]["source"])
        assert launch.TAG in badged[1]["metadata"].get("tags", [])
        assert len(badged) == len(plain) + 1
        assert not any("colab" in "".join(c["source"]).lower() for c in plain), name


def test_release_refuses_a_bad_repo_url_before_writing_anything(tmp_path):
    from minilin.grading import release
    with pytest.raises(UsageError, match="OWNER/REPO"):
        release.main([str(tmp_path / "out"), "--repo-url", "https://example.org/x"])
    assert not (tmp_path / "out").exists()
