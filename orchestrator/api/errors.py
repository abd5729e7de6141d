"""The errors a user can cause, and the one place that says which of them mean 'nothing was run'.

Every library layer raises its own error (a bad inventory, playbook, expectation, run reference,
evidence file or report); the CLI turns all of them into one line and exit status 2 through
`USAGE_ERRORS`, instead of each command catching and re-wrapping them.
"""

from __future__ import annotations

from orchestrator.api.playbook import PlaybookError
from orchestrator.facts.textparse.common import TextParseError
from orchestrator.inventory.model import InventoryError
from orchestrator.present.report.render import ReportError
from orchestrator.store.history import RunNotFound
from orchestrator.verdict.expectations import ExpectationError


class UsageError(Exception):
    """A user's mistake the API found itself (a flag, a combination, a missing file): one line, exit 2."""


class ResultsUnwritable(OSError):
    """The run directory could not take what the run learned (disk full, read-only, quota): the run
    was stopped; files already there are complete."""

    def __init__(self, run_dir: str, error: OSError) -> None:
        super().__init__(error.errno, error.strerror or str(error))
        self.run_dir = run_dir
        self.error = error


USAGE_ERRORS: tuple[type[Exception], ...] = (
    UsageError, InventoryError, PlaybookError, ExpectationError, RunNotFound, TextParseError, ReportError,
)


def usage_message(error: BaseException) -> str:
    """What the user reads for a usage error, one line of safe text.  A playbook's YAML error quotes
    the offending line with a caret underneath: its first line already names file and line."""
    from orchestrator.facts.textsafe import one_line
    from orchestrator.store.redaction import redact_message

    text = str(error).strip()
    if isinstance(error, PlaybookError) and text:
        text = text.splitlines()[0]
    # the text may quote what a host or a file handed over (a document's plan, a stored run's)
    return redact_message(one_line(text or type(error).__name__))
