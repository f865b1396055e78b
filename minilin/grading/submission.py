"""Finding a learner's exercise files in a folder that is almost right.

A submission should hold `exNN_topic.py` files, in the folder itself or in its `exercises/` (a clone of the
course). Learners also hand in `ex1_attention.py`, `Ex01_Attention.py`, `ex01_attention.py.txt`, or a clone
nested one folder deeper (`alice/minilin-alice/exercises/`). `locate` finds such a file and says, in a note,
what it graded; when two files could be the one (or a name is only close), it grades neither and says "did
you mean ...". Nothing here reads a file's contents: names only.
"""
import dataclasses
import re
from pathlib import Path

from minilin.grading.text import one_line

SUFFIXES = (".py", ".txt")  # a file saved as .txt by an editor or an upload form is still Python source
NAME = re.compile(r"ex0*(\d+)[\s_.-]*(.*)")
MAX_ENTRIES = 500  # names looked at per folder (a submission is a handful of files)


@dataclasses.dataclass
class Located:
    """Where one submission's files are: `base` (the folder its other .py files are copied from), the file
    graded for each chapter file name, a note per chapter file (what was graded instead of the exact name),
    a note for the whole submission (a nested folder), and a "did you mean" message for names only close."""
    base: Path
    files: dict  # {"ex01_attention.py": Path}
    notes: dict  # {"ex01_attention.py": "graded ex1_attention.py as ex01_attention.py: rename it"}
    hints: dict  # {"ex01_attention.py": "did you mean ex01_atention.py? ..."}
    where: str = ""  # a note for the whole submission, e.g. the files were one folder deeper


def _stem(name):
    """lower-cased name without .py / .txt suffixes (any order, repeated): Ex01_Attention.py.txt -> ex01_attention"""
    stem = name.lower()
    changed = True
    while changed:
        changed = False
        for suffix in SUFFIXES:
            if stem.endswith(suffix) and len(stem) > len(suffix):
                stem, changed = stem[:-len(suffix)], True
    return stem


def _parts(name):
    """(chapter number, topic without separators) of an exercise-like name, or None."""
    match = NAME.fullmatch(_stem(name))
    if not match:
        return None
    return int(match.group(1)), re.sub(r"[\s_.-]", "", match.group(2))


def _is_source(path):
    return path.is_file() and not path.name.startswith(".") and path.name.lower().endswith(SUFFIXES)


def _entries(folder):
    try:
        return sorted(folder.iterdir())[:MAX_ENTRIES]
    except OSError:
        return []


def _match(folder, chapters):
    """{file name: [candidate paths]} strong matches (same number and topic) in one folder, exact names first."""
    found = {}
    entries = [p for p in _entries(folder) if _is_source(p)]
    for chapter in chapters:
        exact = folder / chapter.file
        if exact in entries:
            found[chapter.file] = [exact]
            continue
        want = _parts(chapter.file)
        same = [p for p in entries if _parts(p.name) == want]
        if same:
            found[chapter.file] = same
    return found


def _subfolders(folder):
    return [p for p in _entries(folder) if p.is_dir() and not p.is_symlink()
            and not p.name.startswith((".", "_")) and p.name != "exercises"]


def _choose_base(folder, chapters):
    """The folder holding the exercise files, and a note when it is not `folder` or `folder/exercises`."""
    for base in (folder, folder / "exercises"):
        if base.is_dir() and not base.is_symlink() and _match(base, chapters):
            return base, "", ""
    nested = []
    for sub in _subfolders(folder):
        for base in (sub / "exercises", sub):
            if base.is_dir() and not base.is_symlink() and _match(base, chapters):
                nested.append(base)
                break
    if len(nested) > 1:
        named = [b for b in nested if b.name == "exercises"]
        nested = named if len(named) == 1 else nested
    if len(nested) == 1:
        rel = nested[0].relative_to(folder).as_posix()
        return nested[0], (f"graded {rel}/: the exercise files were one folder deeper than expected (put them in "
                           f"{folder.name}/ or {folder.name}/exercises/)"), ""
    if nested:
        listed = " or ".join(f"{b.relative_to(folder).as_posix()}/" for b in nested)
        return folder, "", f"exercise files are in several folders: did you mean {listed}? Keep one"
    return folder, "", ""


def _close_names(base, chapter, taken):
    """Names that are only close to the chapter's file: same number or same topic, or a notebook."""
    want = _parts(chapter.file)
    close, notebooks = [], []
    for path in _entries(base):
        if not path.is_file() or path.name in taken:
            continue
        if path.name.lower().endswith(".ipynb") and _parts(path.name[:-len(".ipynb")]) == want:
            notebooks.append(path.name)
            continue
        parts = _parts(path.name) if _is_source(path) else None
        if parts and (parts[0] == want[0]) != (parts[1] == want[1]):
            close.append(path.name)
    return close, notebooks


def locate(folder, chapters):
    """Located files of the submission in `folder` for `chapters` (course Chapter objects)."""
    folder = Path(folder)
    base, where, several = _choose_base(folder, chapters)
    found = _match(base, chapters)
    taken = {p.name for paths in found.values() for p in paths}
    files, notes, hints = {}, {}, {}
    for chapter in chapters:
        paths = found.get(chapter.file, [])
        if len(paths) == 1:
            files[chapter.file] = paths[0]
            if paths[0].name != chapter.file:
                notes[chapter.file] = f"graded {paths[0].name} as {chapter.file}: rename it to {chapter.file}"
        elif len(paths) > 1:
            names = " or ".join(p.name for p in paths)
            hints[chapter.file] = f"did you mean {names}? Keep one and name it {chapter.file}"
        elif several:
            hints[chapter.file] = several
        else:
            close, notebooks = _close_names(base, chapter, taken)
            if close:
                hints[chapter.file] = f"did you mean {' or '.join(close)}? Name it {chapter.file} to have it graded"
            elif notebooks:
                hints[chapter.file] = (f"found {notebooks[0]}: the grader reads Python files; copy your functions "
                                       f"into {chapter.file}")
    # names come from the student's folder: one line each, control characters shown (text.one_line)
    return Located(base, files, {k: one_line(v) for k, v in notes.items()},
                   {k: one_line(v) for k, v in hints.items()}, one_line(where))
