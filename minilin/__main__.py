"""Command line: python -m minilin {grade,release,bench,train,sample,site} [options]. Each command has --help."""
import importlib
import os
import signal
import sys

if not __package__:  # `python minilin ...` runs this file as a script, with minilin/ itself first on sys.path
    print(f"python {sys.argv[0]}: error: run the course's commands as a module, with -m: python -m minilin "
          f"{' '.join(sys.argv[1:]) or '--help'}", file=sys.stderr)
    sys.exit(2)

from minilin import __version__  # noqa: E402 (after the check above: run as a script, this import fails)
from minilin.cli import Parser, UsageError, interrupted_line, reset_progress

COMMANDS = {
    "grade": ("minilin.grade", "main", "grade your exercises (or a class's submissions) and print a per-task table"),
    "release": ("minilin.grading.release", "main", "write a student copy of the course (no solutions)"),
    "bench": ("minilin.bench", "main", "time / memory / FLOP curves for every attention variant (CSV + PNG)"),
    "train": ("minilin.train", "main", "train a tiny byte-level language model with a chosen attention"),
    "sample": ("minilin.sample", "main", "generate text from a checkpoint written by `train`"),
    "site": ("minilin.site", "main", "build the course as a static website from the committed notebooks"),
}
# What is on disk when a command is stopped before it reports anything more precise (Ctrl-C: exit code 130).
KEPT = {
    "grade": "no gradebook or feedback was written (they are written when grading ends)",
    "release": "the release folder may be incomplete: delete it and run release again",
    "bench": "no CSV or PNG was written (bench writes them when the sweep ends)",
    "train": "no checkpoint was written",
    "sample": "nothing was written",
    "site": "the site folder may be incomplete: run site again",
}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler and __name__ == "__main__":
        signal.signal(signal.SIGINT, signal.default_int_handler)   # from here on Ctrl-C raises KeyboardInterrupt
    parser = Parser(
        prog="python -m minilin",
        description="minilin: efficient attention from scratch.",
        epilog="\n".join(f"  {name:8s} {text}" for name, (_, _, text) in COMMANDS.items()),
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=list(COMMANDS), help="what to run; `COMMAND --help` for its options")
    parser.add_argument("--version", action="version", version=f"minilin {__version__}")
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0
    if argv[0] == "--version":
        print(f"minilin {__version__}")
        return 0
    prog = f"python -m minilin {argv[0]}" if argv[0] in COMMANDS else "python -m minilin"
    try:
        args = parser.parse_args(argv[:1])
        module_name, entry, _ = COMMANDS[args.command]
        reset_progress(KEPT[args.command])
        return getattr(importlib.import_module(module_name), entry)(argv[1:])
    except UsageError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line that says where it stopped and what is on disk, no traceback
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C must not cut this line or the exit code
        _close_progress_bars()
        print(interrupted_line(prog), file=sys.stderr, flush=True)
        return 130


def run(command):
    """`python -m minilin.grade ARGS` (a command's own module run directly) does what `python -m minilin grade
    ARGS` does, instead of importing the module and exiting 0 having done nothing."""
    _exit(main([command, *sys.argv[1:]]))


def _close_progress_bars():
    """End any progress bar's line first, so the interrupted line starts a line of its own."""
    tqdm = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ()) or ()):
        try:
            bar.close()
        except Exception:  # a bar that cannot close must not hide the message
            pass


def _exit(code):
    """Exit with `code`; after Ctrl-C (130), run the exit handlers and leave with 130 ourselves. CPython ends a
    process by re-raising SIGINT on itself (exit status -2, not 130) whenever its "unhandled KeyboardInterrupt"
    flag is left set, which can happen even though main caught the interrupt (seen once in CI, under load)."""
    if code != 130:
        sys.exit(code)
    import atexit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed pipe must not turn the exit into a traceback
            pass
    os._exit(130)


if __name__ == "__main__":
    _exit(main())
