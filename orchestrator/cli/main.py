"""The `probe` command line."""

from __future__ import annotations

import argparse
import difflib
import errno
import io
import sys
import tempfile
import traceback
from typing import Any, NoReturn

from orchestrator import __version__
from orchestrator.api.errors import USAGE_ERRORS, ResultsUnwritable, usage_message
from orchestrator.cli import collect, exitcodes, history, importer, info, judging, npd, run, signals
from orchestrator.engine import descriptors
from orchestrator.engine.runner import ctrl_c_of
from orchestrator.store.lock import LockHeld


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (the README's promise): the command's own name,
    what was wrong, the nearest name where one is close, and where the usage is, never the usage
    itself (`probe run --show topo,gpu` printed twelve lines of it before the one that helped)."""

    def error(self, message: str) -> NoReturn:
        self.exit(exitcodes.USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # a command, --format, --findings ...: argparse lists the choices but names none of them
        if action.choices is not None and value not in action.choices:
            known = [str(c) for c in action.choices]
            raise argparse.ArgumentError(action, f"invalid choice: {value!r}{_nearest(str(value), known)} "
                                                 f"(choose from {', '.join(known)})")


def _nearest(word: str, known: list[str], cutoff: float = 0.6) -> str:
    """"; did you mean run?" for the known name closest to `word`, "" when none is close."""
    close = difflib.get_close_matches(word, known, n=1, cutoff=cutoff)
    return f"; did you mean {close[0]}?" if close else ""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="probe",
        description="fleetprobe: agentless GPU fleet probes over SSH, a topology inventory, and checks.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=exitcodes.TABLE,
    )
    parser.add_argument("--version", action="version", version=f"fleetprobe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    run.add_parser(sub)
    info.add_parsers(sub)
    history.add_parsers(sub)
    judging.add_parsers(sub)
    importer.add_parser(sub)
    collect.add_parsers(sub)
    npd.add_parser(sub)
    return parser


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    return dict(sub.choices) if sub is not None else {}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [o for a in parser._actions for o in a.option_strings]


def _unknown_option(name: str, target: argparse.ArgumentParser, commands: dict[str, argparse.ArgumentParser]) -> str:
    """What to say of an option `target` does not take: the one of its own it resembles, else the
    commands that do take it (an option given to the wrong command), else only its name."""
    own = _nearest(name, _options(target), cutoff=0.75)
    if own:
        return f"{name} ({own[2:]})"
    elsewhere = [c for c, p in commands.items() if name in _options(p)]
    if elsewhere:
        return f"{name} (an option of {', '.join(f'probe {c}' for c in elsewhere)}, not of {target.prog})"
    return name


def _refuse_unknown_options(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """Unrecognized arguments are refused by the command they were given to, in its own words
    (argparse hands them to the top-level parser, whose usage names no option of the command)."""
    commands = _commands(parser)
    first = argv[0].split("=", 1)[0] if argv else ""
    if first.startswith("-") and first not in _options(parser):  # `probe -i inv.yml run`
        owners = [c for c, p in commands.items() if first in _options(p)]
        if owners:
            parser.error(f"{first} goes after the command: it is an option of "
                         f"{', '.join(f'probe {c}' for c in owners)} (probe {owners[0]} {first} ...)")
    args, extras = parser.parse_known_args(argv)
    if not extras:
        return
    target = commands.get(getattr(args, "command", None) or "", parser)
    said = [_unknown_option(x.split("=", 1)[0], target, commands) if x.startswith("-") else repr(x) for x in extras]
    target.error("unrecognized arguments: " + ", ".join(said))


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
    _refuse_unknown_options(parser, sys.argv[1:] if argv is None else argv)
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
