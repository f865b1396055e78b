"""The child process: imports a learner's file and runs the grader's Calls. It never judges and never scores.

    python -I -B path/to/minilin/grading/child.py MINILIN_PARENT PACKAGE_PARENT INPUTS SCRATCH MEMORY_BYTES

Started as a script, not with -m, so that the limits are set before torch (or minilin) is imported.
MINILIN_PARENT holds the grader's own minilin (so both sides use the same code, even in an uninstalled
copy of the course); PACKAGE_PARENT holds `exercises/` (the learner's files, imported as exercises.exNN_*);
INPUTS the grader's step files; SCRATCH is the private writable folder.

This process imports torch once, then forks one worker per chapter: the worker imports the learner's file and
runs the steps; whatever it does (threads, patches, exits) dies with it. Commands arrive one per line on
stdin; answers are frames on the original stdout:

    import <module> <seconds>   fork a worker; it reads the next line, `allow <N>` and N bytes (what this
                                chapter may import, see Guard), then answers frame I {"ok": True} /
                                {"ok": False, "error": {...}}
    run <module> <file>         (to the worker) one frame C per Call, {"ok": True, "value": ...} or
                                {"ok": False, "error": {...}}, after which the step stops
    done                        (to the worker) exit
    then, always, this process  frame X {"reason": "exit" | "timeout" | "garbled" | "too large", "code": ...}
                                once the worker is gone (killed at <seconds>, or at a frame over the limit)

Workers write to a pipe of their own that this process relays frame by frame, so a worker killed half-way
through a frame never corrupts the stream. fd 1 is pointed at stderr before any learner code runs: a print
cannot corrupt the frames by accident (on purpose, it only spoils its own results: the grader reads every
frame with torch.load(weights_only=True) and treats garbage as a crash).

Imports: this process never imports anything of minilin but `minilin.grading.calls`, from a copy that holds only
the grading child (`sandbox.library`). Each worker installs a Guard first in sys.meta_path: the modules its
chapter allows come from the sources the grader sent down its pipe; any other name under minilin, solutions or a
peer library imports as a placeholder whose every use raises an ImportError that says it is not allowed in this
chapter. The guard is the clear message, not the wall: code that removes it finds no such files (in bwrap).
"""
import base64
import ctypes
import importlib
import importlib.util
import json
import os
import resource
import select
import signal
import sys
import threading
import time
import traceback
import types
import zlib

FILE_BYTES = 256 << 20  # largest file the learner's code may write (RLIMIT_FSIZE)
ON_DISK = ("minilin", "minilin.grading", "minilin.grading.calls", "minilin.grading.child")  # the child's copy


def limit(memory):
    for what, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_FSIZE, FILE_BYTES), (resource.RLIMIT_CORE, 0)):
        try:
            resource.setrlimit(what, (value, value))
        except (ValueError, OSError):  # macOS refuses RLIMIT_AS; the time limit still holds
            pass


def exit_with_parent():
    """A watchdog: if our parent dies (the grader on Ctrl-C), do not live on in a learner's endless loop."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


class NotAllowed:
    """What a name the chapter does not allow is bound to: every use raises the ImportError that says why."""
    __slots__ = ("_name", "_why")

    def __init__(self, name, why):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_why", why)

    def _refuse(self, *args, **kwargs):
        raise ImportError(self._why.format(name=self._name), name=self._name)

    __call__ = __getitem__ = __iter__ = __mro_entries__ = _refuse

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return NotAllowed(f"{self._name}.{attr}", self._why)

    def __repr__(self):
        return f"<{self._name}: not allowed in this chapter>"


class NotAllowedModule(types.ModuleType):
    """The placeholder a forbidden import gives: its attributes are NotAllowed (so other tasks keep working)."""

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return NotAllowed(f"{self.__name__}.{attr}", self.__dict__.get("__why__", "{name} is not allowed"))


class Guard:
    """The import hook of one worker (a meta path finder and loader): serves the allowed modules' sources."""

    def __init__(self, blob):
        self.modules, self.roots, self.hidden = blob["modules"], set(blob["guarded"]), blob["hidden"]
        self.why = (f"{{name}} is not allowed in this chapter (chapter {blob['chapter']} allows {blob['allows']}): "
                    "write it yourself")

    @classmethod
    def receive(cls, fd):
        """Read `allow <N>` and the N bytes that follow (base64 of zlib-compressed JSON)."""
        words = (read_line(fd) or "").split()
        if len(words) != 2 or words[0] != "allow" or not words[1].isdigit():
            raise RuntimeError("the grader sent no list of what this chapter may import")
        data, size = bytearray(), int(words[1]) + 1  # and its newline
        while len(data) < size and (chunk := os.read(fd, size - len(data))):
            data += chunk
        return cls(json.loads(zlib.decompress(base64.b64decode(bytes(data).strip()))))

    def install(self):
        sys.meta_path.insert(0, self)
        if "minilin" in sys.modules:
            sys.modules["minilin"].__getattr__ = self.attribute  # getattr(minilin, "attention") too

    def allowed(self, name):
        return name.split(".")[0] not in self.roots or name in self.modules or name in ON_DISK

    def attribute(self, attr):
        """minilin.<attr> for a submodule not imported yet: the import system imports it (allowed) or not."""
        if attr.startswith("__") or self.allowed(f"minilin.{attr}"):
            raise AttributeError(f"module 'minilin' has no attribute {attr!r}")
        return importlib.import_module(f"minilin.{attr}")

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in self.roots or name in ON_DISK:
            return None
        if name in self.modules:
            info = self.modules[name]
            return importlib.util.spec_from_loader(name, self, origin=info["file"], is_package=info["package"])
        return importlib.util.spec_from_loader(name, self, is_package=True)

    def create_module(self, spec):
        if spec.name in self.modules:
            return None
        module = NotAllowedModule(spec.name)
        module.__why__ = self.why
        return module

    def exec_module(self, module):
        info = self.modules.get(module.__name__)
        if info is not None:
            module.__file__ = info["file"]
            exec(compile(info["source"], info["file"], "exec"), module.__dict__)

    def get_source(self, name):
        return (self.modules.get(name) or {}).get("source")

    def explain(self, err):
        """The message for what a refused name or a hidden file raised elsewhere (sys.modules, open), or None."""
        if isinstance(err, KeyError) and err.args and isinstance(err.args[0], str) and \
                not self.allowed(err.args[0]):
            return self.why.format(name=err.args[0])
        if isinstance(err, ImportError) and isinstance(err.name, str) and not self.allowed(err.name):
            return self.why.format(name=err.name)  # also once the guard was removed: the files are not there
        filename = err.filename if isinstance(err, FileNotFoundError) else None  # a hidden folder is empty
        if isinstance(filename, str) and (any(part in self.roots for part in filename.split("/")) or
                                          any(filename.startswith(h + "/") for h in self.hidden)):
            return f"{err}: " + self.why.format(name="reading minilin's or a peer library's files")
        return None


def private_memory():
    """No other process of this user (a daemon an earlier chapter left) may read this worker's memory."""
    try:
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4: not dumpable, not ptrace-able
    except (OSError, AttributeError):  # not Linux
        pass


def describe(err, package, guard=None):
    """An exception as plain data: type, message, and the learner's lines in the traceback."""
    where = []
    if isinstance(err, SyntaxError) and err.filename and err.filename.startswith(package):
        where.append((os.path.basename(err.filename), err.lineno or 0, (err.text or "").rstrip()))
    for frame in traceback.extract_tb(err.__traceback__):
        if frame.filename.startswith(package):
            where.append((os.path.basename(frame.filename), frame.lineno or 0, (frame.line or "").strip()))
    try:
        message = (guard and guard.explain(err)) or str(err)
    except BaseException:
        message = "<unprintable>"
    return {"type": type(err).__name__, "mro": [c.__name__ for c in type(err).__mro__],
            "message": message[:800], "where": where[-3:]}


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_line(fd):
    """One command, read byte by byte: nothing is buffered here that a forked worker would read twice."""
    line = bytearray()
    while (byte := os.read(fd, 1)) and byte != b"\n":
        line += byte
    return line.decode() if byte or line else None


class Child:
    def __init__(self, package, inputs, scratch):
        import torch
        torch.set_num_threads(1)
        from minilin.grading import calls
        self.torch, self.calls = torch, calls
        self.package, self.inputs, self.scratch = package, inputs, scratch
        self.commands = os.dup(0)
        self.out = os.dup(1)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(2, 1)
        sys.stdin = open(os.devnull)
        self.steps, self.guard = 0, None

    def send(self, fd, kind, obj):
        try:
            data = self.calls.frame(kind, obj)
        except Exception as err:  # a value torch.save cannot write
            data = self.calls.frame(kind, {"ok": False, "error": {
                "type": "ResultError", "mro": ["ResultError"], "where": [],
                "message": f"the result cannot be sent back: {err}"}})
        write_all(fd, data)

    def serve(self):
        self.send(self.out, b"R", {"ok": True})
        while (line := read_line(self.commands)) is not None:
            words = line.split()
            if len(words) == 3 and words[0] == "import":  # anything else is a leftover for a dead worker
                self.chapter(words[1], float(words[2]))

    def chapter(self, module, seconds):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker: writes only to its own pipe
            os.close(r)
            os.close(self.out)
            try:
                exit_with_parent()
                self.work(module, w)
            finally:
                os._exit(0)
        os.close(w)
        reason, size = self.relay(r, pid, time.monotonic() + seconds)
        _, status = os.waitpid(pid, 0)
        os.close(r)
        self.send(self.out, b"X", {"reason": reason, "size": size, "code": os.waitstatus_to_exitcode(status)})

    def relay(self, r, pid, deadline):
        """Forward the worker's complete frames; kill it at the deadline or at a bad or oversized frame."""
        header, limit_bytes, buf = self.calls.HEADER, self.calls.MAX_FRAME, bytearray()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                return "timeout", 0
            if not select.select([r], [], [], min(left, 1.0))[0]:
                continue
            chunk = os.read(r, 1 << 20)
            if not chunk:
                return "exit", 0
            buf += chunk
            while len(buf) >= header.size:
                kind, size = header.unpack(bytes(buf[:header.size]))
                if kind not in (b"I", b"C") or size > limit_bytes:
                    os.kill(pid, signal.SIGKILL)
                    return ("too large" if kind in (b"I", b"C") else "garbled"), size
                if len(buf) < header.size + size:
                    break
                write_all(self.out, buf[:header.size + size])
                del buf[:header.size + size]

    def work(self, name, out):
        private_memory()
        try:
            self.guard = Guard.receive(self.commands)
            self.guard.install()
            module = importlib.import_module(name)
            self.send(out, b"I", {"ok": True})
        except BaseException as err:  # SyntaxError, ImportError, SystemExit, NotImplementedError...
            self.send(out, b"I", {"ok": False, "error": describe(err, self.package, self.guard)})
            module = None
        while (line := read_line(self.commands)) is not None:
            words = line.split()
            if words[:1] == ["done"]:
                return
            if len(words) == 3 and words[0] == "run" and module is not None:
                self.run(module, os.path.join(self.inputs, words[2]), out)

    def run(self, module, path, out):
        calls = self.torch.load(path, weights_only=False)  # the grader's own file
        self.steps += 1
        folder = os.path.join(self.scratch, f"step{os.getpid()}-{self.steps}")
        os.makedirs(folder)
        for call in calls:
            try:
                value = self.calls.execute(module, call, folder)
            except BaseException as err:
                self.send(out, b"C", {"ok": False, "error": describe(err, self.package, self.guard)})
                return
            self.send(out, b"C", {"ok": True, "value": value})


def main(argv):
    minilin_parent, parent, inputs, scratch, memory = argv[1], argv[2], argv[3], argv[4], int(argv[5])
    limit(memory)
    exit_with_parent()
    sys.path.insert(0, minilin_parent)
    sys.path.insert(0, parent)
    os.makedirs(scratch, exist_ok=True)
    os.chdir(scratch)
    Child(os.path.join(parent, "exercises"), inputs, scratch).serve()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
