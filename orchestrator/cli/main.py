"""The `probe` command line."""

from __future__ import annotations

import argparse
import difflib
import errno
import io
import sys
import tempfile
import traceback
from typing import Any

from orchestrator import __version__
from orchestrator.api.errors import USAGE_ERRORS, ResultsUnwritable, usage_message
from orchestrator.cli import collect, exitcodes, history, importer, info, judging, npd, run, signals
from orchestrator.engine import descriptors
from orchestrator.engine.runner import ctrl_c_of
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
    judging.add_parsers(sub)
    importer.add_parser(sub)
    collect.add_parsers(sub)
    npd.add_parser(sub)
    return parser


def _suggest_options(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """An unknown option is a usage error (exit 2) that names the option it resembles: argparse
    itself says only "unrecognized arguments" (Python 3.14 learns to suggest)."""
    args, extras = parser.parse_known_args(argv)
    if not extras:
        return
    command = getattr(args, "command", None)
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    target = sub.choices.get(command, parser) if sub is not None and command else parser
    known = [o for a in target._actions for o in a.option_strings]
    hints = []
    for x in extras:
        name = x.split("=", 1)[0]
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.75) if name.startswith("-") else []
        if close:
            hints.append(f"{name} (did you mean {close[0]}?)")
    if hints:
        target.error("unrecognized arguments: " + ", ".join(hints))


def _streams_never_fail() -> None:
    """stdout/stderr that cannot fail to encode: cron's environment may say PYTHONIOENCODING=ascii
    or LANG=C, and a host name, GPU model or message can hold any character.  What the terminal's
    encoding lacks is written as a backslash escape, which still says which character it was."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


def main(argv: list[str] | None = None) -> int:
    """The `probe` command.  `argv` None: this process is the command (cli/entry.py), and once its
    exit status is decided SIGINT and SIGTERM change nothing (cli/signals.py).  Given `argv`, a
    caller in a process of its own, SIGTERM is an interrupt while the command runs, and the
    caller's handler is put back after."""
    whole = argv is None
    replaced: dict[int, Any] = {}
    try:
        try:
            replaced = signals.as_interrupts(whole)  # its handler may run as it returns
            return _command(argv)
        finally:
            signals.decided(whole)
    except KeyboardInterrupt:  # while the options were read, or as the command returned
        signals.decided(whole)
        print("probe: interrupted", file=sys.stderr)
        return exitcodes.INTERRUPTED
    finally:
        if not whole:
            signals.restore(replaced)


def _command(argv: list[str] | None) -> int:
    _streams_never_fail()
    descriptors.raise_soft_limit()
    parser = build_parser()
    _suggest_options(parser, sys.argv[1:] if argv is None else argv)
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
    except (KeyboardInterrupt, RuntimeError) as e:
        if ctrl_c_of(e) is None:
            return _internal_error()
        print("probe: interrupted", file=sys.stderr)
        return exitcodes.INTERRUPTED
    except BrokenPipeError:
        return exitcodes.OK
    except OSError as e:
        if not descriptors.is_exhaustion(e) and e.errno not in (errno.EAGAIN, errno.ENOMEM):
            return _internal_error()
        what = descriptors.out_of_descriptors() if descriptors.is_exhaustion(e) else \
            f"{e.strerror}: the system lends the controller no more processes or memory (ulimit -u, -v)"
        print(f"probe: {what}; what finished is kept", file=sys.stderr)
        return exitcodes.OS_LIMIT
    except Exception:
        return _internal_error()


def _internal_error() -> int:
    with tempfile.NamedTemporaryFile("w", prefix="fleetprobe-crash-", suffix=".txt", delete=False) as f:
        traceback.print_exc(file=f)
    print(f"probe: internal error (a bug in fleetprobe); traceback saved to {f.name}", file=sys.stderr)
    return exitcodes.INTERNAL


if __name__ == "__main__":
    sys.exit(main())
