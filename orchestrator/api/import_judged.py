"""Judge each bundle document's host in the worker process that read it (`probe import` of many).

Right after a worker classifies a document's answers it holds the host's envelope data, which is
what judging starts from.  Judged later, every envelope is read back from the run's raw files and
parsed and budget-checked again, in a second pass over all the hosts.  But the plan a host is
judged under is only known once every document is read (the first document's plan, over every
document's host), and a host's final name only once the documents before it are named (a second
document of one host is kept as name#2).

So the worker judges each host under the first document's plan (the parent reads that document
before the workers start), as if the host were the run's only one (`plan.expectations_alone`),
and its verdict and record go to a spool part of its own.  The parent checks each host as it
names it: the host it names must equal the host the worker judged, apart from the envelope data.
Once the plan is built, it checks each host's expectations. The run keeps the workers' verdicts
only when every host of the run passes both checks. Otherwise every host is judged again from the
raw files, as without this, so the verdict never rests on a guess.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.api.errors import UsageError
from orchestrator.api.plan import PlanInputs, RunPlan, expectations_alone, load_references
from orchestrator.engine.results import HostInput
from orchestrator.store.spool import SpooledRecords
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.judge import HostVerdict, judge_host
from orchestrator.verdict.parallel import PartWriter
from orchestrator.verdict.streaming import spooled_in_order


@dataclass
class JudgedAs:
    """What a worker judged one host as: the host without its envelope data, and its expectations."""

    host: HostInput
    expect: Expectations


def _without_data(h: HostInput) -> HostInput:
    return replace(h, data={}, load_data=None)


class JudgeWhereRead:
    """The reading workers' judge (`judge`, in a worker) and the parent's checks (`named` as each
    host is named, `vouched` once the plan is known).  `close` removes what was not taken."""

    def __init__(self, inputs: PlanInputs, root: Path) -> None:
        """Raises UsageError where the plan's playbook or reference files cannot be read (the
        caller then judges after reading, which says so in its own words)."""
        self.inputs = inputs
        self._expect_of = expectations_alone(inputs)
        self._refs = load_references(inputs)
        self._root = root
        self._dir: Path | None = None
        self._parts = 0
        # host -> which distinct expectations it was judged with (10,000 hosts share a few)
        self._judged: dict[str, int] = {}
        self._distinct: dict[str, int] = {}
        self._expects: list[Expectations] = []
        self._broken = False

    def parts(self, n: int) -> list[Path]:
        """The spool parts of `n` workers, in a new directory beside the run (its records outlive
        the run's staging directory, as a live run's spool does)."""
        self._root.mkdir(parents=True, exist_ok=True)
        self._dir = Path(tempfile.mkdtemp(prefix=".verdict-", dir=self._root))
        self._parts = n
        return [self._dir / f"part{i}" for i in range(n)]

    def judge(self, h: HostInput, out: PartWriter) -> JudgedAs | None:
        """In a worker: judge `h` (its envelope data held) into `out`, and say what it was judged
        as; None where its expectations cannot be had (its inventory's `probe_expect` is wrong:
        the run's plan will say so)."""
        try:
            expect = self._expect_of(h)
        except UsageError:
            return None
        out.judge(h, lambda host: judge_host(host, expect, None, self._refs))
        return JudgedAs(_without_data(h), expect)

    def named(self, judged: JudgedAs | None, final: HostInput) -> None:
        """In the parent: the host `final` as the run keeps it; `judged`: what its worker judged."""
        if self._broken:
            return
        if judged is None or final.name in self._judged or _without_data(final) != judged.host:
            self._broken = True
            return
        key = repr(judged.expect)  # equal reprs: equal expectations (the converse is not needed)
        if key not in self._distinct:
            self._distinct[key] = len(self._expects)
            self._expects.append(judged.expect)
        self._judged[final.name] = self._distinct[key]

    def vouched(self, plan: RunPlan, inputs: Sequence[HostInput]) -> Vouched | None:
        """The verdicts to keep, when every host of `inputs` was judged as the plan judges it."""
        if self._broken or self._dir is None or plan.inputs != self.inputs or len(inputs) != len(self._judged):
            return None
        for h in inputs:
            at = self._judged.get(h.name)
            if at is None or plan.expectations_for(h.name, h.vars) != self._expects[at]:
                return None
        return Vouched(self)

    def take(self, names: Sequence[str]) -> tuple[SpooledRecords, list[HostVerdict]] | None:
        if self._dir is None:
            return None
        judged = spooled_in_order(self._dir, self._parts, names)
        if judged is not None:
            self._dir = None  # the records own the spool now
        return judged

    def close(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


class Vouched:
    """The workers' verdicts handed to the fleet as a judging pool's are (verdict.judge.build_fleet)."""

    def __init__(self, where: JudgeWhereRead) -> None:
        self._where = where

    def finish(self, inputs: Sequence[HostInput]) -> tuple[SpooledRecords, list[HostVerdict]] | None:
        return self._where.take([h.name for h in inputs])
