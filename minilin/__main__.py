"""Command line: python -m minilin {grade,bench,train,sample} [options]. Each command has --help."""
import argparse
import importlib
import sys

COMMANDS = {
    "grade": ("minilin.grade", "run the exercise tests against exercises/ and print a per-task score"),
    "bench": ("minilin.bench", "time / memory / FLOP curves for every attention variant (CSV + PNG)"),
    "train": ("minilin.train", "train a tiny byte-level language model with a chosen attention"),
    "sample": ("minilin.train", "generate text from a checkpoint written by `train`"),
}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(
        prog="python -m minilin",
        description="minilin: efficient attention from scratch.",
        epilog="\n".join(f"  {name:7s} {text}" for name, (_, text) in COMMANDS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=sorted(COMMANDS), help="what to run; `COMMAND --help` for its options")
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0
    args = parser.parse_args(argv[:1])
    module = importlib.import_module(COMMANDS[args.command][0])
    entry = getattr(module, "sample_main" if args.command == "sample" else "main")
    return entry(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
