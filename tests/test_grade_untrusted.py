"""The grader against a class of hostile submissions (issue 44): student-controlled text stays data, a forged
reply frame cannot inflate in the grader, the sandbox shows no other copy of the course, caps /dev/shm and holds
everything under one memory limit (tests/test_grade_finite.py: every check fails NaN, inf and wrong shapes).

One small class (chapter 6's cheap tasks) is graded once, with every export; the other tests need no
child process.
"""
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from minilin.grading import sandbox
from minilin.grading.course import CHAPTERS

ROOT = Path(__file__).resolve().parent.parent
SANDBOXED, _ = sandbox.bwrap_status()
CONTROL = {chr(c) for c in (*range(0x20), 0x7f, *range(0x80, 0xa0))} - {"\n"}
FAKE = "99_fake_student     47 points  (47 pass)"
EVE = f"eve\n{FAKE}"  # a folder name that tries to print a summary line of its own
MAL = "mal\x1b[2J<b>lory<b>\u202e"  # clears the screen, bold HTML, a bidi override
NESTED = f"clone\x1b[31m`<i>x<i>`\n{FAKE}"  # a nested clone's folder: its name is in every note
NASTY = "\\x1b[31m<img src=x onerror=alert(1)>``` [click](http://evil.example) | **bold** \\u202e"
RAISER = '''
import sys
def exact_saved_bytes(B, H, N, M, D, Dv, itemsize):
    print("\\x1b[2J<script>alert(1)</script>", file=sys.stderr)
    raise ValueError("{nasty}")
'''.replace("{nasty}", NASTY)
SECRET = f"teacher-secret-{uuid.uuid4().hex}"
WALKER = '''
import os
def _find():
    for top in ("/home", "/root", "/var/tmp", "/srv", "/opt", "/mnt", "/work", "/etc", "/tmp"):
        for folder, dirs, files in os.walk(top):
            if folder.endswith("snoitulos"[::-1]) and "ex06_memory.py" in files:  # unseen by the static scan
                return os.path.join(folder, "ex06_memory.py")
    return None
_found = _find()
_leak = ""
for _path in ("/etc/passwd", os.path.expanduser("~/notes.txt"), "{notes}"):
    try:
        _leak += open(_path).read()[:200]
    except OSError:
        pass
if _found:
    exec(open(_found).read())
else:
    def __getattr__(name):  # every task's function
        def found_nothing(*args, **kwargs):
            raise RuntimeError("found nothing; leaked: " + _leak)
        return found_nothing
'''


def write_class(base, copy=None):
    """The class: two names that try to fake a summary line, and (sandboxed) a student who walks the disk for
    another copy of the course (`copy`, outside the course) and runs its solution."""
    klass = base / "submissions"
    sol = (ROOT / "solutions" / "ex06_memory.py").read_text(encoding="utf-8")
    files = {EVE: {"ex06_memory.py": sol}, f"{MAL}/{NESTED}": {"ex06_memory.py": sol + RAISER}}
    if copy is not None:
        files["walker"] = {"ex06_memory.py": WALKER.replace("{notes}", str(copy / "notes.txt"))}
    for name, content in files.items():
        (klass / name).mkdir(parents=True)
        for file, text in content.items():
            (klass / name / file).write_text(text, encoding="utf-8")
    return klass


def plant_copy():
    """Another copy of the course outside it (last year's folder, say): a solutions/ file and a teacher's note,
    both carrying SECRET."""
    copy = Path("/var/tmp") / f"minilin-last-year-{uuid.uuid4().hex[:8]}"
    (copy / "solutions").mkdir(parents=True)
    for name in ("ex06_memory.py", "ex01_attention.py"):
        text = (ROOT / "solutions" / name).read_text(encoding="utf-8")
        (copy / "solutions" / name).write_text(f"# {SECRET}\n{text}", encoding="utf-8")
    (copy / "notes.txt").write_text(f"grades: {SECRET}\n", encoding="utf-8")
    return copy


def minilin(*args, timeout=600):
    env = {**os.environ, "TQDM_DISABLE": "1"}
    return subprocess.run([sys.executable, "-m", "minilin", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    copy = plant_copy() if SANDBOXED else None  # unsandboxed, the walker would find it (honesty is static there)
    klass = write_class(base, copy)
    out = {k: base / k for k in ("gradebook.csv", "wide.csv", "feedback", "gradescope")}
    proc = minilin("grade", "--submissions", str(klass), "--chapter", "6", "--jobs", "2", "--timeout", "30",
                   "--out", str(out["gradebook.csv"]), "--wide", str(out["wide.csv"]),
                   "--feedback", str(out["feedback"]), "--gradescope", str(out["gradescope"]))
    one = minilin("grade", "--folder", str(klass / MAL), "--task", "6.1", "--timeout", "30",
                  "--gradescope-json", str(base / "one.json"))
    if copy is not None:
        shutil.rmtree(copy, ignore_errors=True)
    return dict(proc=proc, one=one, base=base, walked=copy is not None, **out)


def no_control(text, where):
    bad = sorted({c for c in text if c in CONTROL or c in "\u202e\u2028\u2029"})
    assert not bad, f"{where} holds raw control characters {bad!r}"


@pytest.mark.needs_solutions
def test_student_text_is_data_in_the_terminal(graded):
    proc, one = graded["proc"], graded["one"]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert one.returncode == 1, one.stderr[-2000:]
    for out, where in ((proc.stdout, "grade --submissions"), (one.stdout, "grade --folder")):
        no_control(out, where)
        assert not any(line.startswith(FAKE.split()[0]) for line in out.splitlines()), out
    summary = [line for line in proc.stdout.splitlines() if "points" in line and "(" in line]
    assert summary[0].startswith("eve\\n99_fake_student") and summary[1].startswith("mal\\x1b[2J"), summary
    assert "\\u202e" in proc.stdout
    assert "clone\\x1b[31m" in one.stdout  # the nested folder's note, shown as text


def outside_code(markdown):
    """What Markdown renders as Markdown: the text without fenced blocks and code spans."""
    kept, fence = [], None
    for line in markdown.splitlines():
        mark = re.match(r"`{3,}", line)
        if fence is None and mark:
            fence = mark.group(0)
        elif fence is not None:
            if line.strip() == fence:
                fence = None
        else:
            kept.append(re.sub(r"(`+)(.+?)(?<!`)\1(?!`)", "", line))
    return "\n".join(kept)


@pytest.mark.needs_solutions
def test_student_text_is_data_in_feedback_json_and_csv(graded):
    feedback = sorted(graded["feedback"].glob("*.md"))
    assert len(feedback) == 2 + graded["walked"]
    for path in feedback:
        text = path.read_text(encoding="utf-8")
        no_control(text, path.name)
        for raw in ("<img", "<b>", "<i>", "<script", "[click](http", "**bold"):
            assert raw not in outside_code(text), (path.name, raw)
        if path.name.startswith("mal"):
            assert "&lt;b&gt;lory" in text  # the heading: escaped, not HTML
            table = [line for line in text.splitlines() if line.startswith("| 6.1 ")][0]
            assert "&lt;img" in table and "\\`\\`\\`" in table  # the summary: escaped, shown as typed
            fences = [line for line in text.splitlines() if line.startswith("```")]
            assert fences[0] == "````text" and fences[1] == "````"  # longer than the message's ```
    for path in [*graded["gradescope"].glob("*/results.json"), graded["base"] / "one.json"]:
        data = json.loads(path.read_text(encoding="utf-8"))
        no_control(json.dumps(data, ensure_ascii=False).replace("\n", ""), path.parent.name)
        for test in data["tests"]:
            no_control(test["output"].replace("\n", ""), f"{path}: {test['number']}")
    for name in ("gradebook.csv", "wide.csv"):
        with open(graded[name], newline="", encoding="utf-8") as handle:
            for row in csv.reader(handle):
                for cell in row:
                    no_control(cell.replace("\n", ""), name)
                    assert "\n" not in cell, (name, cell)


# --- item 2: a forged reply frame is refused before it is inflated ----------------------------------------
PEAK_MIB = 64  # the grader's peak memory may grow by at most this much while it refuses the frames below
READER = '''
import resource, sys, time
from minilin.grading.calls import HEADER
from minilin.grading.pipe import Child, ChildGone
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for path in sys.argv[1:]:
    child = Child(["cat", path], ".", {}, ".")
    try:
        reply = child.recv(b"C", time.monotonic() + 60)
        print("loaded", type(reply.get("value")).__name__, flush=True)
    except ChildGone as gone:
        print("refused", gone.status, gone.message, flush=True)
    child.close()
print("peak", (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
'''


def _rewrite(data, pickle_edit=None, deflated=0):
    """A torch.save archive with its pickle edited, and its data/0 record replaced by `deflated` zero bytes
    (compressed, streamed: never held in memory here)."""
    import io
    import zipfile
    source, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for info in source.infolist():
            body = source.read(info.filename)
            if info.filename.endswith("data.pkl") and pickle_edit:
                body = pickle_edit(body)
            if info.filename.endswith("data/0") and deflated:
                record = zipfile.ZipInfo(info.filename)
                record.compress_type = zipfile.ZIP_DEFLATED
                with archive.open(record, "w", force_zip64=True) as handle:
                    chunk = bytes(1 << 20)
                    for _ in range(deflated >> 20):
                        handle.write(chunk)
                continue
            archive.writestr(info, body)
    return out.getvalue()


def test_a_forged_frame_is_refused_before_it_is_inflated(tmp_path):
    import torch

    from minilin.grading.calls import HEADER, dumps
    declared = 512 << 20  # bytes each forged storage declares
    honest = dumps({"ok": True, "value": torch.arange(6, dtype=torch.float64)})
    count = declared // 8
    bigger = lambda body: body.replace(b"K\x06t", b"J" + count.to_bytes(4, "little") + b"t")  # noqa: E731
    frames = {
        "honest": honest,
        "deflated": _rewrite(honest, bigger, deflated=declared),  # 512 MiB of zeros in a ~0.5 MB frame
        "declares more": _rewrite(honest, bigger),  # 512 MiB declared, 48 bytes held
        "stride 0": dumps({"ok": True, "value": torch.zeros(1, dtype=torch.float64).expand(count)}),
    }
    paths = []
    for name, data in frames.items():
        assert len(data) < 2 << 20, (name, len(data))
        path = tmp_path / name.replace(" ", "-")
        path.write_bytes(HEADER.pack(b"C", len(data)) + data)
        paths.append(str(path))
    proc = subprocess.run([sys.executable, "-c", READER, *paths], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and len(lines) == 5, proc.stdout + proc.stderr[-2000:]
    assert lines[0] == "loaded Tensor"
    for name, line in zip(list(frames)[1:], lines[1:4]):
        assert line.startswith("refused crash sent back data the grader refuses to load"), (name, line)
    assert float(lines[4].split()[1]) < PEAK_MIB, lines[4]


# --- item 1: the sandbox shows only the system's and Python's folders -----------------------------------
def outputs(graded):
    """Everything the class's grading wrote or printed, as text."""
    texts = [graded["proc"].stdout, graded["proc"].stderr, graded["one"].stdout, graded["one"].stderr]
    for path in graded["base"].rglob("*"):
        if path.is_file() and path.suffix in (".csv", ".md", ".json"):
            texts.append(path.read_text(encoding="utf-8"))
    return "\n".join(texts)


@pytest.mark.needs_solutions
@pytest.mark.skipif(not SANDBOXED, reason="no bwrap here: unsandboxed, honesty is checked statically only")
def test_a_submission_that_reads_another_copy_of_the_course_gets_nothing(graded):
    with open(graded["gradebook.csv"], newline="", encoding="utf-8") as handle:
        rows = [r for r in csv.DictReader(handle) if r["student"] == "walker"]
    assert len(rows) == len(CHAPTERS[6].tasks) and all(float(r["points"]) == 0 for r in rows), rows
    assert all("found nothing; leaked: " in r["message"] for r in rows), rows
    text = outputs(graded)
    assert SECRET not in text and "root:x:0:0" not in text


def sandboxed(script, tmp_path, memory=1 << 30):
    """Run `script` with the child's sandbox (sandbox.command, the interpreter's -c instead of child.py)."""
    from minilin.grading import sandbox as box
    (tmp_path / "exercises").mkdir()
    (tmp_path / "inputs").mkdir()
    argv, cwd, env, group = box.command("bwrap", lib=box.library(tmp_path / "lib"), package_parent=tmp_path,
                                        inputs=tmp_path / "inputs", scratch=tmp_path, memory=memory,
                                        hide=[ROOT / "solutions"])
    argv = argv[:argv.index("-I")] + ["-c", script]
    try:
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    finally:
        box.remove_group(group)


SHM = '''
import os, sys
print(sorted(os.listdir("/")), sorted(os.listdir("/etc")), flush=True)
print("visible:", [p for p in sys.argv[1:] if os.path.exists(p)], flush=True)
written = 0
try:
    with open("/dev/shm/fill", "wb") as handle:
        for _ in range(128):
            handle.write(bytes(1 << 20))
            handle.flush()
            written += 1
    print("wrote", written, flush=True)
except OSError as err:
    print("refused after", written, "MiB:", err.strerror, flush=True)
'''


@pytest.mark.skipif(not SANDBOXED, reason="no bwrap here")
def test_the_sandbox_binds_only_what_the_child_needs_and_caps_dev_shm(tmp_path):
    from minilin.grading import sandbox as box
    assert box.SHM_BYTES <= 64 << 20
    secret = [str(ROOT / "solutions"), str(ROOT / "minilin" / "attention.py"), str(ROOT / ".git"),
              str(Path.home() / ".ssh"), "/etc/passwd", "/etc/shadow", "/var/tmp", "/home", "/root/.bashrc"]
    proc = sandboxed(SHM.replace("sys.argv[1:]", repr(secret)), tmp_path)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and len(lines) == 3, proc.stdout + proc.stderr[-2000:]
    assert lines[1] == "visible: []", lines[1]
    assert lines[2].startswith("refused after ") and int(lines[2].split()[2]) <= 64, lines[2]
    top = eval(lines[0].split("] [")[0] + "]")
    assert set(top) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "sys", "tmp", "usr",
                        *(Path(p).parts[1] for p in box.python_folders())}, top


@pytest.mark.skipif(not SANDBOXED or sandbox.cgroup_status()[0] is None, reason="no bwrap or no memory cgroup")
def test_one_memory_limit_holds_the_whole_sandbox(tmp_path):
    script = "import sys\nblob = bytearray(1536 << 20)\nprint('allocated', flush=True)\n"
    proc = sandboxed(script, tmp_path, memory=64 << 20)  # 64 MiB + /tmp + /dev/shm: far below 1.5 GiB
    assert proc.returncode != 0 and "allocated" not in proc.stdout, (proc.returncode, proc.stdout, proc.stderr)



# --- item 8: the grader imports only what it grades ---------------------------------------------------
def test_grading_imports_the_benchmark_only_for_chapter_6():
    """The grader's modules load no part of minilin.bench (whose package imports its command line, an import
    cycle)."""
    script = ("import sys\nfrom minilin.grading.course import TASKS\nfrom minilin.grading import runner, report\n"
              "from minilin import grade\n"
              "print(sorted(m for m in sys.modules if m.startswith('minilin.bench')))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr[-2000:]


# --- item 7: a rubric that weighs hidden checks cannot zero a class where they are not shipped --------------
HIDDEN_6_1 = '''from minilin.grading.checks import equal, hidden_check


@hidden_check("6.1")
def one_of_each(exact_saved_bytes):
    yield equal(exact_saved_bytes(1, 1, 1, 1, 1, 1, 4), 16)
'''


def test_release_ships_a_rubric_for_the_public_checks_only(tmp_path):
    import tomllib
    import zipfile

    from minilin.cli import UsageError
    from minilin.grading.course import TASKS
    from minilin.grading.release import main as release
    from minilin.grading.rubric import check_weights, load_rubric
    public = len(TASKS["6.1"].public_steps)
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / "extra.py").write_text(HIDDEN_6_1)
    rubric = tmp_path / "rubric.toml"
    rubric.write_text(f'[points]\n"6.1" = 4\n[weights]\n"6.1" = {[1] * public + [3]}\n')  # public, then hidden
    bundle = tmp_path / "autograder.zip"
    assert release(["--gradescope", str(bundle), "--rubric", str(rubric), "--hidden-tests",
                    str(tmp_path / "hidden")]) == 0
    with zipfile.ZipFile(bundle) as archive:
        name = next(n for n in archive.namelist() if n.endswith("rubric.toml"))
        shipped = archive.read(name).decode()
    assert tomllib.loads(shipped)["weights"] == {"6.1": [1] * public}
    (tmp_path / "shipped.toml").write_text(shipped)
    check_weights(load_rubric(tmp_path / "shipped.toml"), {"6.1": public})  # what the bundle's grade accepts
    rubric.write_text(f'[weights]\n"6.1" = {[0] * public + [1]}\n')  # only the hidden check weighs
    with pytest.raises(UsageError, match="run only the public checks"):
        release(["--gradescope", str(tmp_path / "again.zip"), "--rubric", str(rubric), "--hidden-tests",
                 str(tmp_path / "hidden")])
