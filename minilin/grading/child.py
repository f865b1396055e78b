"""The child process: imports a learner's file and runs the grader's Calls. It never judges and never scores.

    python -I -B path/to/minilin/grading/child.py MINILIN_PARENT PACKAGE_PARENT INPUTS SCRATCH MEMORY_BYTES

Started as a script, not with -m, so that the limits are set before torch (or minilin) is imported.
MINILIN_PARENT holds the grader's own minilin (so both sides use the same code, even in an uninstalled
copy of the course); PACKAGE_PARENT holds `exercises/` (the learner's files, imported as exercises.exNN_*);
INPUTS the grader's step files; SCRATCH is the private writable folder.

This process imports torch once, then forks one worker per chapter: the worker imports the learner's file and
runs the steps; whatever it does (threads, patches, exits) dies with it. Commands arrive one per line on
stdin; answers are frames on the original stdout:

    import <module> <seconds>   fork a worker; it answers frame I {"ok": True} / {"ok": False, "error": {...}}
    run <module> <file>         (to the worker) one frame C per Call, {"ok": True, "value": ...} or
                                {"ok": False, "error": {...}}, after which the step stops
    done                        (to the worker) exit
    then, always, this process  frame X {"reason": "exit" | "timeout" | "garbled" | "too large", "code": ...}
                                once the worker is gone (killed at <seconds>, or at a frame over the limit)

Workers write to a pipe of their own that this process relays frame by frame, so a worker killed half-way
through a frame never corrupts the stream. fd 1 is pointed at stderr before any learner code runs: a print
cannot corrupt the frames by accident (on purpose, it only spoils its own results: the grader reads every
frame with torch.load(weights_only=True) and treats garbage as a crash).
"""
import importlib
import os
import resource
import select
import signal
import sys
import threading
import time
import traceback

FILE_BYTES = 256 << 20  # largest file the learner's code may write (RLIMIT_FSIZE)


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


def describe(err, package):
    """An exception as plain data: type, message, and the learner's lines in the traceback."""
    where = []
    if isinstance(err, SyntaxError) and err.filename and err.filename.startswith(package):
        where.append((os.path.basename(err.filename), err.lineno or 0, (err.text or "").rstrip()))
    for frame in traceback.extract_tb(err.__traceback__):
        if frame.filename.startswith(package):
            where.append((os.path.basename(frame.filename), frame.lineno or 0, (frame.line or "").strip()))
    try:
        message = str(err)
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
        self.steps = 0

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
        try:
            module = importlib.import_module(name)
            self.send(out, b"I", {"ok": True})
        except BaseException as err:  # SyntaxError, ImportError, SystemExit, NotImplementedError...
            self.send(out, b"I", {"ok": False, "error": describe(err, self.package)})
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
                self.send(out, b"C", {"ok": False, "error": describe(err, self.package)})
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
