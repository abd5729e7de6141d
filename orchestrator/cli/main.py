"""The `probe` command line."""

from __future__ import annotations

import argparse
import sys
import tempfile
import traceback

from orchestrator import __version__
from orchestrator.api.errors import USAGE_ERRORS, ResultsUnwritable, usage_message
from orchestrator.cli import collect, exitcodes, history, importer, info, run
from orchestrator.store.lock import LockHeld


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="probe",
        description="fleetprobe: agentless GPU fleet probes over SSH, a topology inventory, and checks.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=exitcodes.TABLE,
    )
    parser.add_argument("--version", action="version", version=f"fleetprobe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    run.add_parser(sub)
    info.add_parsers(sub)
    history.add_parsers(sub)
    importer.add_parser(sub)
    collect.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return exitcodes.USAGE
    try:
        return int(args.func(args))
    except USAGE_ERRORS as e:
        print(f"probe: error: {usage_message(e)}", file=sys.stderr)
        return exitcodes.USAGE
    except LockHeld as e:
        print(f"probe: {e}", file=sys.stderr)
        return exitcodes.LOCKED
    except ResultsUnwritable as e:
        print(f"probe: cannot write the results to {e.run_dir}: {e.error.strerror or e.error}; the run was stopped "
              f"(files already there are complete). Free space or choose another directory with --results",
              file=sys.stderr)
        return exitcodes.RESULTS_UNWRITABLE
    except KeyboardInterrupt:
        print("probe: interrupted", file=sys.stderr)
        return exitcodes.INTERRUPTED
    except BrokenPipeError:
        return exitcodes.OK
    except Exception:
        with tempfile.NamedTemporaryFile("w", prefix="fleetprobe-crash-", suffix=".txt", delete=False) as f:
            traceback.print_exc(file=f)
        print(f"probe: internal error (a bug in fleetprobe); traceback saved to {f.name}", file=sys.stderr)
        return exitcodes.INTERNAL


if __name__ == "__main__":
    sys.exit(main())
