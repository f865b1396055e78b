"""Launch badges for a published copy of the course (`python -m minilin release OUTDIR --repo-url URL`).

Each notebook of the copy gets, under its title, an "Open in Colab" and a "Launch Binder" badge pointing at
that notebook in the published GitHub repository, and a first code cell that, only on Google Colab, clones the
repository, installs the course into Colab's Python (keeping Colab's own PyTorch) and changes into `notebooks/`.
Anywhere else the cell does nothing and prints nothing, so strict nbval and the stored outputs are unchanged.
Binder builds its environment from the repository's `environment.yml`.
"""
import json
import re
from pathlib import Path
from urllib.parse import quote

from minilin.cli import UsageError

GITHUB = re.compile(r"https://github\.com/([A-Za-z0-9][A-Za-z0-9-]{0,38})/([A-Za-z0-9._-]{1,100}?)(?:\.git)?/?")
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
BINDER_BADGE = "https://mybinder.org/badge_logo.svg"
TAG = "launch-setup"  # the setup cell's tag (a second release of a copy replaces it instead of adding another)

SETUP = '''\
# On Google Colab only: fetch the course from {url}, install it into Colab's Python (Colab's own
# PyTorch stays; the pin below is the version it already has) and move into notebooks/. Elsewhere: nothing.
import sys

if "google.colab" in sys.modules:
    import os
    import subprocess

    import torch

    course = "/content/{repo}"
    if not os.path.isdir(course):
        subprocess.run(["git", "clone", "--depth", "1", "--branch", "{branch}", "{url}", course], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "-e", course + "[course]",
                    "torch==" + torch.__version__], check=True)
    os.chdir(course + "/notebooks")
'''


def parse_repo_url(url):
    """(owner, repo) of a GitHub repository URL; UsageError naming the expected form otherwise."""
    match = GITHUB.fullmatch(url or "")
    if not match:
        raise UsageError(f"--repo-url {url}: give the GitHub repository the copy is published at, "
                         "as https://github.com/OWNER/REPO (Colab and Binder open notebooks from GitHub)")
    return match.group(1), match.group(2)


def links(owner, repo, branch, path):
    """The Colab and Binder URLs that open `path` (relative to the repository root) of that repository."""
    colab = f"https://colab.research.google.com/github/{owner}/{repo}/blob/{branch}/{path}"
    binder = f"https://mybinder.org/v2/gh/{owner}/{repo}/{branch}?labpath={quote(path, safe='')}"
    return colab, binder


def badge_line(owner, repo, branch, path):
    colab, binder = links(owner, repo, branch, path)
    return f"[![Open in Colab]({COLAB_BADGE})]({colab}) [![Launch Binder]({BINDER_BADGE})]({binder})"


def _lines(text):
    return text.splitlines(keepends=True)


def add_to_notebook(path, owner, repo, branch, rel):
    """Badges under the first cell's title, and the Colab setup cell as the first code cell."""
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    cells = nb["cells"]
    cells[:] = [c for c in cells if TAG not in c.get("metadata", {}).get("tags", [])]
    first = cells[0]
    source = "".join(first["source"])
    badge = badge_line(owner, repo, branch, rel)
    source = re.sub(r"\n\[!\[Open in Colab\].*\n", "\n", source)  # a badge of an earlier release
    title, _, rest = source.partition("\n")  # the badges go right under the title line
    first["source"] = _lines(f"{title}\n\n{badge}\n" + ("\n" + rest.lstrip("\n") if rest.strip() else ""))
    url = f"https://github.com/{owner}/{repo}"
    setup = {"cell_type": "code", "execution_count": None, "id": "launch-setup",
             "metadata": {"tags": [TAG]}, "outputs": [],
             "source": _lines(SETUP.format(url=url, repo=repo, branch=branch))}
    if "id" not in first:
        setup.pop("id")
    cells.insert(1, setup)
    Path(path).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def add_launch(out, repo_url, branch="main"):
    """Every notebook under out/notebooks/: badges and the Colab cell. Returns the notebooks changed."""
    owner, repo = parse_repo_url(repo_url)
    changed = []
    for path in sorted((Path(out) / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        rel = path.relative_to(out).as_posix()
        add_to_notebook(path, owner, repo, branch, rel)
        changed.append(rel)
    return changed
