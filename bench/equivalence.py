#!/usr/bin/env python3
"""Differential equivalence check for speed changes: every normalizer's output, the topology merge
and every host check's findings, for the demo recordings, each simulated machine's pcie data
(root, 256- and 64-byte config space) and seeded random mutations of all of them, computed by
this checkout and by another one (e.g. `git worktree add /tmp/base <commit>`), must be identical.

    python bench/equivalence.py /tmp/base            # prints "identical" or every differing case

Exceptions count as output (type and message), so a change must also fail the same way on bad
input.  The corpus of simulated pcie data is built once with this checkout's probe and simulator.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))
# The corpus and the cases live with the tests (tests/facts/test_normalize_differential.py runs
# them against stored digests); imported before another checkout's orchestrator goes on sys.path.
from tests.support.normalize_corpus import (  # noqa: E402
    build_corpus,
    corpus_data,
    differential_cases,
    differential_hosts,
    recorded_data,
)


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        corpus.mkdir()
        build_corpus(corpus)
        outs: list[dict[str, Any]] = []
        for repo in (HERE, Path(sys.argv[1]).resolve()):
            out = Path(tmp) / f"out-{len(outs)}.json"
            subprocess.run([sys.executable, __file__, "--child", str(repo), str(corpus), str(out)], check=True)
            outs.append(json.loads(out.read_text()))
    mine, theirs = outs
    different = 0
    for case in sorted(set(mine) | set(theirs)):
        if mine.get(case) != theirs.get(case):
            a, b = mine.get(case) or {}, theirs.get(case) or {}
            parts = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
            print(f"DIFFERENT: {case}: {', '.join(parts)}")  # every one: a change may move several
            different += 1
    print(f"{different} of {len(mine)} cases different" if different else f"identical: {len(mine)} cases")
    return 1 if different else 0


def child(repo: Path, corpus: Path, dest: Path) -> None:
    sys.path.insert(0, str(repo))
    hosts = differential_hosts(recorded_data(HERE / "orchestrator" / "demo" / "recordings"), corpus_data(corpus))
    dest.write_text(json.dumps(dict(differential_cases(hosts)), sort_keys=True))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
        sys.exit(0)
    sys.exit(main())
