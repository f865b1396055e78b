"""The child's command line: inside bubblewrap (`bwrap`) where it works, a plain process elsewhere.

In bwrap the learner's code sees only what the child needs, read-only: /usr (and /bin, /lib... or their
symlinks), a minimal /etc (the dynamic linker's cache, the time zone; no passwd), the CPU list in /sys, and the
interpreter's folders (its prefixes and site-packages: `python_folders`), with the installed minilin, the peer
libraries and any hidden path that lies inside them covered; nothing else of the disk (no home folder, no other
copy of the course, no /var, no /etc/passwd). /tmp (the scratch folder) and /dev/shm are private size-capped
tmpfs (TMP_BYTES, SHM_BYTES), the root is read-only, no network and no other process (--unshare-all), no
capabilities. Its own files and the grader's inputs are bound read-only under /tmp/grade. The environment is
emptied (no tokens leak) and the child sets its own memory and file-size limits before it imports anything
(`child.py`). Where a memory cgroup can be made (v2 or v1, `cgroup_status`), each child, bwrap and all, starts
inside one of its own capped at the memory limit plus the two tmpfs (the pages written there are charged to
it); elsewhere each process has the limit as its address space and the tmpfs sizes add to it, and the grader's
first line says which. Without bwrap the same child runs as a plain process: timeout and memory cap
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
import signal
import subprocess
import sys
import time
import uuid
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
        return "bwrap", "sandbox: bwrap (only the system's and Python's folders, read-only; private /tmp and " \
                        "/dev/shm; no network)"
    if mode == "bwrap":
        return None, reason
    return "none", f"sandbox: none ({reason}): code runs unsandboxed, with a timeout and a memory cap; honesty " \
                   "is checked statically only"


# --- one memory limit over the whole sandbox: a cgroup where one can be made -----------------------------
CGROUP = Path("/sys/fs/cgroup")
ENTER = 'echo $$ > "$1" && shift && exec "$@"'  # the child's first process joins its cgroup, then becomes bwrap


def _own_cgroups():
    """[(folder, limit file, swap file)] where this process's memory cgroup could have a child (v2, then v1)."""
    found = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        number, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if number == "0" and controllers == "":
            found += [(CGROUP / path.lstrip("/"), "memory.max", "memory.swap.max")]
        elif "memory" in controllers.split(","):
            for base in (CGROUP / "memory" / path.lstrip("/"), CGROUP / "memory"):
                found.append((base, "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"))
    return found


def _make_group(base, limit_file, swap_file, limit):
    group = base / f"minilin-grade-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    group.mkdir()
    try:
        (group / limit_file).write_text(str(limit))
        if (group / swap_file).exists():
            try:
                (group / swap_file).write_text("0" if swap_file == "memory.swap.max" else str(limit))
            except OSError:
                pass
    except OSError:
        remove_group(group)
        raise
    return group


def kill_group(group):
    """SIGKILL every process left in a child's cgroup."""
    try:
        if (group / "cgroup.kill").exists():
            (group / "cgroup.kill").write_text("1")
            return
        pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def remove_group(group):
    """Remove a child's cgroup once its processes are gone (a few tries: the kernel frees it lazily)."""
    if group is None:
        return
    for _ in range(20):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)


@functools.lru_cache(maxsize=1)
def cgroup_status():
    """(base, limit file, swap file) of a cgroup folder in which this process can make a memory-limited group
    and move a process into it, or (None, reason)."""
    reason = "no memory cgroup this user may create"
    for base, limit_file, swap_file in _own_cgroups():
        if not base.is_dir():
            continue
        try:
            group = _make_group(base, limit_file, swap_file, 64 << 20)
        except OSError as err:
            reason = f"cannot create a memory cgroup in {base} ({err.strerror or err})"
            continue
        try:
            probe = subprocess.run(["/bin/sh", "-c", ENTER, "sh", str(group / "cgroup.procs"), "true"],
                                   capture_output=True, timeout=30)
            if probe.returncode == 0:
                return (base, limit_file, swap_file), ""
            reason = f"cannot move a process into a cgroup in {base}"
        except (OSError, subprocess.TimeoutExpired) as err:
            reason = f"cannot move a process into a cgroup in {base} ({err})"
        finally:
            remove_group(group)
    return None, reason


def memory_note(memory):
    """The words of the grader's first line on how memory is limited."""
    where, reason = cgroup_status()
    if where is not None:
        return f"{memory / 2**30:g} GiB per submission (one cgroup: every process, /tmp and /dev/shm)"
    return (f"{memory / 2**30:g} GiB per process (no cgroup here: {reason}; /tmp adds at most "
            f"{TMP_BYTES >> 20} MiB and /dev/shm {SHM_BYTES >> 20} MiB)")


def in_memory_group(argv, memory):
    """(argv, group): argv started inside a fresh cgroup capped at `memory` plus the sandbox's tmpfs sizes (the
    pages written there are charged to it), or (argv, None) where no cgroup can be made."""
    where, _ = cgroup_status()
    if where is None:
        return argv, None
    try:
        group = _make_group(*where, memory + TMP_BYTES + SHM_BYTES)
    except OSError:
        return argv, None
    return ["/bin/sh", "-c", ENTER, "sh", str(group / "cgroup.procs"), *argv], group


def environment(scratch):
    """An empty environment but for what Python and torch need: no tokens, no PYTHON* variables."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": scratch, "TMPDIR": scratch,
            "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": os.path.join(scratch, ".matplotlib"), "TQDM_DISABLE": "1"}


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


SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # bound read-only (or their symlinks)
ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives")
SYS = ("/sys/devices/system/cpu",)  # what torch's CPU detection reads
SHM_BYTES = 64 << 20  # the sandbox's /dev/shm tmpfs


def python_folders():
    """The interpreter's folders the child needs: its prefixes (a virtual environment and the Python it was made
    from) and its site-packages, resolved, without one that lies inside another or under SYSTEM."""
    import site
    import sysconfig
    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(sys.executable).resolve().parent.parent)}
    found |= {v for k, v in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib")}
    found |= set(site.getsitepackages())
    paths = sorted({Path(f).resolve() for f in found if f and Path(f).is_dir()} - {Path("/")})
    system = [Path(s).resolve() for s in SYSTEM if Path(s).exists()]
    return [p for p in paths if not any(o in p.parents for o in [*paths, *system])
            and not any(o == p for o in system)]


def _inside(path, roots):
    path = Path(path)
    return any(path == r or r in path.parents for r in roots)


def _system_binds():
    """The system's folders read-only (a symlink such as /lib -> usr/lib as a symlink), a minimal /etc."""
    args = []
    for name in SYSTEM:
        path = Path(name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            args += ["--ro-bind", name, name]
    for name in (*ETC, *SYS):
        if os.path.exists(name):
            args += ["--ro-bind", name, name]
    return args


def bound_roots():
    """Every folder of the host that the sandbox shows (read-only)."""
    roots = [Path(s).resolve() for s in SYSTEM if Path(s).is_dir()]
    return roots + python_folders() + [Path(e) for e in (*ETC, *SYS) if os.path.exists(e)]


def _hidden_inside(hide, roots):
    """bwrap arguments that cover each existing path of `hide` that a bound folder would show (a folder by an
    empty tmpfs, a file by /dev/null): the installed minilin, a class's folders under a bound prefix..."""
    args = []
    home = Path.home()
    for path in [*hide, *(home / c for c in CREDENTIALS)]:
        path = Path(path).resolve()
        if not path.exists() or path == Path("/") or not _inside(path, roots):
            continue
        args += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
    return args


def _peers_hidden(roots):
    """Empty folders over the peer libraries (where a bound folder shows them)."""
    return [a for folders in peer_folders().values() for f in folders if _inside(Path(f).resolve(), roots)
            for a in (["--tmpfs", f] if Path(f).is_dir() else ["--ro-bind", "/dev/null", f])]


def command(mode, *, lib, package_parent, inputs, scratch, memory, hide=()):
    """(argv, cwd, env, group) that start `minilin/grading/child.py` for one learner's files (`lib`: see
    library) inside a memory cgroup of its own (`group`, None where none can be made; remove_group it after)."""
    if mode == "none":
        argv = [sys.executable, "-I", "-B", str(Path(lib) / "minilin" / "grading" / "child.py"), str(lib),
                str(package_parent), str(inputs), str(scratch), str(memory)]
        argv, group = in_memory_group(argv, memory)
        return argv, str(scratch), environment(str(scratch)), group
    roots = bound_roots()
    argv = [shutil.which("bwrap"), *_system_binds(), "--dev", "/dev", "--proc", "/proc",
            "--size", str(TMP_BYTES), "--tmpfs", "/tmp", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
            *(a for p in python_folders() for a in ("--ro-bind", str(p), str(p))),
            *_hidden_inside([*hide, *grader_files()], roots), *_peers_hidden(roots),
            "--ro-bind", str(Path(lib) / "minilin"), f"{SANDBOX_ROOT}/lib/minilin",
            "--ro-bind", str(Path(package_parent) / "exercises"), f"{SANDBOX_ROOT}/exercises",
            "--ro-bind", str(inputs), f"{SANDBOX_ROOT}/inputs", "--dir", SANDBOX_SCRATCH, "--chdir", SANDBOX_SCRATCH,
            "--remount-ro", "/",
            "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--",
            sys.executable, "-I", "-B", f"{SANDBOX_ROOT}/lib/minilin/grading/child.py", f"{SANDBOX_ROOT}/lib",
            SANDBOX_ROOT, f"{SANDBOX_ROOT}/inputs", SANDBOX_SCRATCH, str(memory)]
    argv, group = in_memory_group(argv, memory)
    return argv, str(scratch), environment(SANDBOX_SCRATCH), group
