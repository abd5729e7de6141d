"""Write what the demo fleet shows, with the volatile parts taken out, into one folder.

A refactoring that must not change behaviour is checked by running this before and after and
comparing the two folders (`diff -r`): fleet.json of every shipped playbook, the terminal tables
with every detail view, and the findings after `probe rejudge`.  Run ids, clocks and durations are
replaced by fixed strings; the simulated hosts replay recordings, so everything else is stable.

    python tools/demo_snapshot.py OUT_DIR
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.store.compact import read_plain

PLAYBOOKS = ("audit", "premigration", "quick")
VOLATILE_KEYS = {"id", "started", "finished", "user", "duration_s", "rejudged_from"}
_RUN_ID = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]+")
_SECONDS = re.compile(r"\b\d+\.\ds\b")  # the hosts table's duration column


REPO = str(Path.cwd().resolve())  # run from the checkout being snapshotted


def _scrub(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("<volatile>" if k in VOLATILE_KEYS else _scrub(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, str):
        return _RUN_ID.sub("<run-id>", value).replace(REPO, "<repo>")
    return value


def _probe(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, timeout=300)


def snapshot(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "runs"
        for book in PLAYBOOKS:
            run_dir = Path(tmp) / book
            cp = _probe(["run", "-l", "demo", "-p", book, "--results", str(results), "-o", str(run_dir),
                         "--format", "table", "--show", "topo,gpus,pcie,p2p"])
            text = _SECONDS.sub("<s>", _RUN_ID.sub("<run-id>", cp.stdout)).replace(tmp, "<tmp>").replace(REPO, "<repo>")
            (out / f"{book}.table.txt").write_text(f"exit {cp.returncode}\n{text}")
            fleet = read_plain(run_dir / "fleet.json")  # any schema (3: gzip members)
            (out / f"{book}.fleet.json").write_text(json.dumps(_scrub(fleet), indent=1, sort_keys=True))
            cp = _probe(["rejudge", str(run_dir), "--results", str(results), "--format", "json"])
            rejudged = json.loads(cp.stdout) if cp.stdout.strip() else {"error": cp.stderr}
            (out / f"{book}.rejudge.findings.json").write_text(
                f"exit {cp.returncode}\n" + json.dumps(_scrub(rejudged.get("findings", rejudged)), indent=1, sort_keys=True))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    snapshot(Path(sys.argv[1]))
