"""The child's command line: inside bubblewrap (`bwrap`) where it works, a plain process elsewhere.

In bwrap the learner's code sees the system read-only, a private writable /tmp (a size-capped tmpfs: the
scratch folder), no network and no other process (--unshare-all), no capabilities, and none of: the course's
solutions/, the class's other submissions, the teacher's hidden checks, the grader's own files, well-known
credential folders in $HOME. Its own files and the grader's inputs are bound read-only under /tmp/grade.
The environment is emptied (no tokens leak) and the child sets its own memory and file-size limits before it
imports anything (`child.py`). Without bwrap the same child runs as a plain process: timeout and memory cap
still hold, but it could write where you can; the grader says so in one line.

What each chapter's code can import (`library`, `allowance`): in bwrap the course folder (the real minilin, its
tests, notebooks and git history) and the peer libraries' folders are hidden; the child's `minilin` is a
filtered copy that holds only the grading child. Every worker (one per chapter, or per run of tasks whose inputs
need the same modules) then receives, over its own pipe, the sources of what it may import: the helpers its
chapter allows and the modules the grader's inputs for those tasks are made of (chapter 5's transplants get our
modules and the peer libraries they transplant between). Anything else under minilin, solutions or a peer
library imports as a placeholder whose every use raises an ImportError that says it is not allowed in this
chapter (`child.Guard`). Unsandboxed, the files stay readable: honesty is then checked statically only.
"""
import ast
import base64
import functools
import importlib
import importlib.util
import json
import os
import pickletools
import shutil
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

from minilin.grading import honesty

MODES = ("auto", "bwrap", "none")
TMP_BYTES = 512 << 20  # the sandbox's /tmp (scratch) tmpfs
CREDENTIALS = (".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".config", ".netrc", ".pypirc",
               ".git-credentials", ".jupyter", ".local/share/jupyter")
SANDBOX_ROOT = "/tmp/grade"  # holds exercises/ (the learner's files) and inputs/ inside bwrap
SANDBOX_SCRATCH = "/tmp/scratch"
PACKAGE = Path(__file__).resolve().parents[1]  # the grader's minilin/ (hidden in the sandbox)
PEERS = ("linformer", "performer_pytorch", "linear_attention_transformer", "fla", "fast_transformers")
GUARDED = ("minilin", "solutions", *PEERS)  # import roots the child's guard decides on
VIEW = ("grading/__init__.py", "grading/calls.py", "grading/child.py")  # minilin files every chapter sees
VIEW_INIT = '"""minilin as graded code sees it: the grading child and what its chapter allows (grading/child.py)."""\n'


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
                       "and a memory cap; honesty is checked statically only"
    if works:
        return "bwrap", "sandbox: bwrap (read-only system, private /tmp, no network)"
    if mode == "bwrap":
        return None, reason
    return "none", f"sandbox: none ({reason}): code runs unsandboxed, with a timeout and a memory cap; honesty " \
                   "is checked statically only"


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
    """folder/minilin: the child's minilin, a copy that holds only the grading child (VIEW) and a docstring-only
    __init__ (the real one imports the references). The child puts `folder` first on sys.path; bwrap binds it."""
    package = Path(folder) / "minilin"
    for name in VIEW:
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PACKAGE / name, package / name)
    (package / "__init__.py").write_text(VIEW_INIT, encoding="utf-8")
    return Path(folder)


def grader_files():
    """What the sandbox hides of ours: the course folder when minilin runs from a checkout (its package, tests,
    notebooks, build/ copies, .git), else the installed package."""
    root = PACKAGE.parent
    return [root] if (root / "pyproject.toml").is_file() and (root / "minilin").is_dir() else [PACKAGE]


@functools.lru_cache(maxsize=1)
def peer_folders():
    """{peer: its installed folders}, for each peer library importable here."""
    found = {}
    for name in PEERS:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None:
            where = list(spec.submodule_search_locations or []) or [spec.origin]
            found[name] = [str(Path(w).resolve()) for w in where if w and Path(w).exists()]
    return found


# --- what a worker may import ---------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def pickled_modules(path):
    """The modules whose classes and functions a torch.save'd file names (what unpickling it imports)."""
    with zipfile.ZipFile(path) as archive:
        data = archive.read(next(n for n in archive.namelist() if n.endswith("data.pkl")))
    found, strings = set(), []
    for op, arg, _ in pickletools.genops(data):
        if op.name in ("GLOBAL", "INST"):
            found.add(arg.split(" ")[0])
        elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
            found.add(strings[-2])
        elif isinstance(arg, str):
            strings.append(arg)
    return frozenset(m for m in found if m.split(".")[0] in GUARDED)


def _module_of(path):
    """minilin.attention.softmax_attention -> minilin.attention (the longest prefix that is a module)."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            if importlib.util.find_spec(".".join(parts[:i])) is not None:
                return ".".join(parts[:i])
        except (ImportError, ValueError):
            continue
    raise ValueError(f"{path}: no such module")


def _package_sources(name):
    """{module: (is_package, file)} for a peer library: all of its .py files (its own imports stay inside)."""
    spec = importlib.util.find_spec(name)
    if spec.submodule_search_locations is None:
        return {name: (False, spec.origin)}
    out = {}
    for base in spec.submodule_search_locations:
        for file in sorted(Path(base).rglob("*.py")):
            parts = list(file.relative_to(base).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            module = ".".join([name, *(parts[:-1] if is_package else parts)])
            out.setdefault(module, (is_package, str(file)))
    return out


def _minilin_sources(module):
    """{module: (is_package, file)} for one minilin module and the packages above it (but minilin's own)."""
    out, parts = {}, module.split(".")
    for i in range(2, len(parts) + 1):
        spec = importlib.util.find_spec(".".join(parts[:i]))
        out[".".join(parts[:i])] = (spec.submodule_search_locations is not None, spec.origin)
    return out


def _imports(file, module, is_package):
    """Absolute names of guarded modules that `file` imports, at any depth in the file."""
    tree = honesty.parse(Path(file).read_text(encoding="utf-8"), str(file))
    package = module if is_package else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            names.add(base)
            names |= {f"{base}.{a.name}" for a in node.names if a.name != "*"}
    return {n for n in names if n.split(".")[0] in GUARDED}


@functools.lru_cache(maxsize=None)
def allowance(chapter_number, helpers, needs):
    """The line a chapter's worker reads before it imports the learner's file: "allow N" and N bytes of base64,
    the compressed sources of every module it may import (helpers, the modules in `needs`, what they import)."""
    todo = [_module_of(h) for h in helpers] + sorted(needs)
    files, peers = {}, set()
    while todo:
        name = todo.pop()
        root = name.split(".")[0]
        if name in files or root not in GUARDED or root == "solutions" or name == "minilin":
            continue
        if root in PEERS:
            if root in peers:
                continue
            peers.add(root)
            new = _package_sources(root)
        else:
            try:
                new = _minilin_sources(name)
            except (ImportError, AttributeError, ValueError):
                continue  # `from minilin.attention import softmax_attention` names a function, not a module
        for module, (is_package, file) in new.items():
            if module not in files:
                files[module] = (is_package, file)
                todo += sorted(_imports(file, module, is_package))
    modules = {m: {"package": p, "file": f, "source": Path(f).read_text(encoding="utf-8")} for m, (p, f) in
               files.items() if not m.startswith("minilin.grading")}
    hidden = [str(p) for p in grader_files()] + [f for fs in peer_folders().values() for f in fs]
    text = ", ".join(helpers) if helpers else "no minilin helpers"
    blob = {"chapter": chapter_number, "allows": text, "modules": modules, "hidden": hidden,
            "guarded": list(GUARDED)}
    data = base64.b64encode(zlib.compress(json.dumps(blob).encode(), 6))
    return f"allow {len(data)}\n{data.decode()}"


def _python_under_tmp():
    """A Python (a virtual environment, say) installed under /tmp would vanish under the sandbox's fresh /tmp:
    bind its prefix back, read-only, at the same path (only the interpreter's folders, nothing else of /tmp)."""
    args = []
    for prefix in sorted({sys.prefix, sys.base_prefix, sys.exec_prefix}):
        if prefix.startswith("/tmp/") and Path(prefix).is_dir():
            args += ["--ro-bind", prefix, prefix]
    return args


def _python_inside(hidden):
    """The interpreter's folders that lie in a hidden folder (a course's .venv), bound back read-only."""
    args = []
    for prefix in sorted({sys.prefix, sys.base_prefix, sys.exec_prefix}):
        path = Path(prefix).resolve()
        if any(path != h and h in path.parents for h in map(Path, hidden)) and path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    return args


def _peers_hidden():
    """Empty folders over the peer libraries (also where a venv under /tmp was bound back)."""
    return [a for folders in peer_folders().values() for f in folders
            for a in (["--tmpfs", f] if Path(f).is_dir() else ["--ro-bind", "/dev/null", f])]


def command(mode, *, lib, package_parent, inputs, scratch, memory, hide=()):
    """(argv, cwd, env) that start `minilin/grading/child.py` for one learner's files (`lib`: see library)."""
    if mode == "none":
        argv = [sys.executable, "-I", "-B", str(Path(lib) / "minilin" / "grading" / "child.py"), str(lib),
                str(package_parent), str(inputs), str(scratch), str(memory)]
        return argv, str(scratch), environment(str(scratch))
    ours = [p.resolve() for p in grader_files() if not str(p.resolve()).startswith("/tmp/")]
    argv = [shutil.which("bwrap"), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--size", str(TMP_BYTES), "--tmpfs", "/tmp", *_python_under_tmp(), *_hidden([*hide, *ours]),
            *_python_inside(ours), *_peers_hidden(),
            "--ro-bind", str(Path(lib) / "minilin"), f"{SANDBOX_ROOT}/lib/minilin",
            "--ro-bind", str(Path(package_parent) / "exercises"), f"{SANDBOX_ROOT}/exercises",
            "--ro-bind", str(inputs), f"{SANDBOX_ROOT}/inputs", "--dir", SANDBOX_SCRATCH, "--chdir", SANDBOX_SCRATCH,
            "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--",
            sys.executable, "-I", "-B", f"{SANDBOX_ROOT}/lib/minilin/grading/child.py", f"{SANDBOX_ROOT}/lib",
            SANDBOX_ROOT, f"{SANDBOX_ROOT}/inputs", SANDBOX_SCRATCH, str(memory)]
    return argv, str(scratch), environment(SANDBOX_SCRATCH)
