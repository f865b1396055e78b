"""Command line: python -m minilin {grade,release,bench,train,sample} [options]. Each command has --help."""
import importlib
import sys

from minilin.cli import Parser, UsageError

COMMANDS = {
    "grade": ("minilin.grade", "main", "grade your exercises (or a class's submissions) and print a per-task table"),
    "release": ("minilin.grade", "release_main", "write a student copy of the course (no solutions)"),
    "bench": ("minilin.bench", "main", "time / memory / FLOP curves for every attention variant (CSV + PNG)"),
    "train": ("minilin.train", "main", "train a tiny byte-level language model with a chosen attention"),
    "sample": ("minilin.sample", "main", "generate text from a checkpoint written by `train`"),
}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = Parser(
        prog="python -m minilin",
        description="minilin: efficient attention from scratch.",
        epilog="\n".join(f"  {name:8s} {text}" for name, (_, _, text) in COMMANDS.items()),
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=list(COMMANDS), help="what to run; `COMMAND --help` for its options")
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0
    try:
        args = parser.parse_args(argv[:1])
        module_name, entry, _ = COMMANDS[args.command]
        return getattr(importlib.import_module(module_name), entry)(argv[1:])
    except UsageError as err:
        prog = f"python -m minilin {argv[0]}" if argv[0] in COMMANDS else "python -m minilin"
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
