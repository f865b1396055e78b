"""The child's command line: inside bubblewrap (`bwrap`) where it works, a plain process elsewhere.

In bwrap the learner's code sees the system read-only, a private writable /tmp (a size-capped tmpfs: the
scratch folder), no network and no other process (--unshare-all), no capabilities, and none of: the course's
solutions/, the class's other submissions, the teacher's hidden checks, the grader's own files, well-known
credential folders in $HOME. Its own files and the grader's inputs are bound read-only under /tmp/grade.
The environment is emptied (no tokens leak) and the child sets its own memory and file-size limits before it
imports anything (`child.py`). Without bwrap the same child runs as a plain process: timeout and memory cap
still hold, but it could write where you can; the grader says so in one line.
"""
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

MODES = ("auto", "bwrap", "none")
TMP_BYTES = 512 << 20  # the sandbox's /tmp (scratch) tmpfs
CREDENTIALS = (".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".config", ".netrc", ".pypirc",
               ".git-credentials", ".jupyter", ".local/share/jupyter")
SANDBOX_ROOT = "/tmp/grade"  # holds exercises/ (the learner's files) and inputs/ inside bwrap
SANDBOX_SCRATCH = "/tmp/scratch"
PACKAGE = Path(__file__).resolve().parents[1]  # the grader's minilin/, bound read-only for the child


@functools.lru_cache(maxsize=1)
def bwrap_status():
    """(works, reason): bwrap is installed and can create a sandbox here (user namespaces may be disabled)."""
    exe = shutil.which("bwrap")
    if exe is None:
        return False, "bwrap (bubblewrap) is not installed; apt-get install bubblewrap"
    try:
        probe = subprocess.run([exe, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent",
                                "--cap-drop", "ALL", "--", "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return False, f"bwrap cannot start: {err}"
    if probe.returncode != 0:
        first = (probe.stderr.strip().splitlines() or ["no message"])[0]
        return False, f"bwrap cannot create a sandbox here ({first})"
    return True, "bwrap"


def choose(mode):
    """'bwrap' or 'none' for a --sandbox mode; (choice, note) where note is the one line the grader prints."""
    works, reason = bwrap_status()
    if mode == "none":
        return "none", "sandbox: none (--sandbox none): your code runs as a plain process, with a timeout " \
                       "and a memory cap"
    if works:
        return "bwrap", "sandbox: bwrap (read-only system, private /tmp, no network)"
    if mode == "bwrap":
        return None, reason
    return "none", f"sandbox: none ({reason}): code runs unsandboxed, with a timeout and a memory cap"


def environment(scratch):
    """An empty environment but for what Python and torch need: no tokens, no PYTHON* variables."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": scratch, "TMPDIR": scratch,
            "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": os.path.join(scratch, ".matplotlib"), "TQDM_DISABLE": "1"}


def _hidden(hide):
    """bwrap arguments that cover each existing path in `hide` (folders by a tmpfs, files by /dev/null)."""
    args = []
    home = Path.home()
    for path in [*hide, *(home / c for c in CREDENTIALS)]:
        path = Path(path).resolve()
        if str(path).startswith("/tmp/") or not path.exists() or path == Path("/"):
            continue  # /tmp is a fresh tmpfs in the sandbox already
        args += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
    return args


def library(folder):
    """folder/minilin -> the grader's package: what an unsandboxed child puts on sys.path (nothing else of ours)."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    link = Path(folder) / "minilin"
    if not link.exists():
        link.symlink_to(PACKAGE, target_is_directory=True)
    return Path(folder)


def _python_under_tmp():
    """A Python (a virtual environment, say) installed under /tmp would vanish under the sandbox's fresh /tmp:
    bind its prefix back, read-only, at the same path (only the interpreter's folders, nothing else of /tmp)."""
    args = []
    for prefix in sorted({sys.prefix, sys.base_prefix, sys.exec_prefix}):
        if prefix.startswith("/tmp/") and Path(prefix).is_dir():
            args += ["--ro-bind", prefix, prefix]
    return args


def command(mode, *, lib, package_parent, inputs, scratch, memory, hide=()):
    """(argv, cwd, env) that start `minilin/grading/child.py` for one learner's files (`lib`: see library)."""
    if mode == "none":
        argv = [sys.executable, "-I", "-B", str(PACKAGE / "grading" / "child.py"), str(lib), str(package_parent),
                str(inputs), str(scratch), str(memory)]
        return argv, str(scratch), environment(str(scratch))
    argv = [shutil.which("bwrap"), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--size", str(TMP_BYTES), "--tmpfs", "/tmp", *_python_under_tmp(), *_hidden(hide),
            "--ro-bind", str(PACKAGE), f"{SANDBOX_ROOT}/lib/minilin",
            "--ro-bind", str(Path(package_parent) / "exercises"), f"{SANDBOX_ROOT}/exercises",
            "--ro-bind", str(inputs), f"{SANDBOX_ROOT}/inputs", "--dir", SANDBOX_SCRATCH, "--chdir", SANDBOX_SCRATCH,
            "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--",
            sys.executable, "-I", "-B", f"{SANDBOX_ROOT}/lib/minilin/grading/child.py", f"{SANDBOX_ROOT}/lib",
            SANDBOX_ROOT, f"{SANDBOX_ROOT}/inputs", SANDBOX_SCRATCH, str(memory)]
    return argv, str(scratch), environment(SANDBOX_SCRATCH)
