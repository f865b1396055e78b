"""The grader's end of a child process: the process (bwrap or plain), the framed pipe to it, and how it ended.

runner.Session drives a child through this: `send` one command line, `recv` one frame of the kind it expects
(R ready, I imported, C a call's value, X a worker gone), decoded with calls.loads_untrusted (weights-only data;
anything else is refused). Whatever goes wrong on the way (a timeout, a closed pipe, a frame that is not a result, a
worker the child reports gone) is raised as ChildGone, with the words the learner reads.
"""
import os
import select
import signal
import subprocess
import tempfile
import time

from minilin.grading.calls import HEADER, MAX_FRAME, loads_untrusted


class ChildGone(Exception):
    """The learner's worker (alive=True: the child can fork another) or the whole child stopped answering."""

    def __init__(self, status, message, alive=False):
        super().__init__(message)
        self.status, self.message, self.alive = status, message, alive


class Child:
    """One child process (bwrap or plain) and the framed pipe to it."""

    def __init__(self, argv, cwd, env, workdir, group=None):
        self.group = group  # its memory cgroup (sandbox.in_memory_group), removed on close
        self.stderr = tempfile.TemporaryFile(dir=workdir)
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, start_new_session=True)
        self.fd = self.proc.stdout.fileno()

    def send(self, line):
        try:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            raise self.gone() from None

    def _read(self, n, deadline):
        data = bytearray()
        while len(data) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChildGone("timeout", "")
            if not select.select([self.fd], [], [], left)[0]:
                continue
            chunk = os.read(self.fd, min(n - len(data), 1 << 20))
            if not chunk:
                raise self.gone()
            data += chunk
        return bytes(data)

    def recv(self, kind, deadline):
        got, length = HEADER.unpack(self._read(HEADER.size, deadline))
        if got not in (b"R", b"I", b"C", b"X") or length > MAX_FRAME:
            raise ChildGone("crash", "sent back something that is not a result")
        try:
            reply = loads_untrusted(self._read(length, deadline))
        except ChildGone:
            raise
        except Exception as err:  # not weights-only data: refused, never unpickled
            raise ChildGone("crash", f"sent back data the grader refuses to load ({type(err).__name__})") from None
        if not isinstance(reply, dict):
            raise ChildGone("crash", "sent back something that is not a result")
        if got == b"X" and kind != b"X":
            raise self.ended(reply)
        if got != kind:
            raise ChildGone("crash", "sent back something that is not a result")
        return reply

    def ended(self, reply):
        """ChildGone for a worker that the child reports gone (its chapter's process; the child lives on)."""
        reason, size, code = reply.get("reason"), reply.get("size") or 0, reply.get("code")
        if reason == "timeout":
            return ChildGone("timeout", "", alive=True)
        if reason == "too large":
            return ChildGone("crash", f"returned {size / 2**20:.0f} MiB; a result may take at most "
                                      f"{MAX_FRAME >> 20} MiB", alive=True)
        if reason == "garbled":
            return ChildGone("crash", "sent back something that is not a result (did your code write to the "
                                      "grader's pipe?)", alive=True)
        return ChildGone("crash", self.how(code) + self.tail(), alive=True)

    def gone(self):
        """ChildGone for a child that closed its pipe: how it ended and its last lines of output."""
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        return ChildGone("crash", self.how(code) + self.tail())

    @staticmethod
    def how(code):
        if code is None:
            return "closed its output"
        if code < 0 or code > 128:
            number = -code if code < 0 else code - 128
            name = signal.Signals(number).name if number in signal.Signals._value2member_map_ else str(number)
            return f"was killed by signal {name}"
        return f"exited with code {code} (sys.exit / os._exit in your code?)"

    def tail(self):
        self.stderr.seek(max(0, self.stderr.seek(0, os.SEEK_END) - 2000))
        lines = [ln[:160] for ln in self.stderr.read().decode("utf-8", "replace").splitlines()[-4:] if ln.strip()]
        return "".join(f"\n    | {ln}" for ln in lines)

    def close(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # bwrap --die-with-parent takes the sandbox with it
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.wait()
        if self.group is not None:
            from minilin.grading.sandbox import kill_group, remove_group
            kill_group(self.group)  # anything of the sandbox still alive (bwrap's --die-with-parent takes the rest)
            remove_group(self.group)
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        self.stderr.close()
