#!/usr/bin/env python3
"""Where a judging worker's CPU goes, host by host, without a profiler.

    python bench/worker_phases.py [--hosts 500]

Judges N demo-derived hosts (bench/controller_bench.py's inputs) as `probe run`'s workers judge
them, and prints the CPU (time.process_time) each step costs a host: reading the envelopes back
(each host's probe envelopes as the run's raw files hold them, their text made beforehand and not
counted, parsed within the budget by store/rundir.read_envelope_data's parser; bench/controller_bench.py
and `stream_bench controller` hand the judge parsed data instead, so this step is not in their
figures), then the steps `verdict/parallel.PartWriter.judge` takes: judging (normalizers, host
checks, coverage, figures), the stored text (store/fleet_file.stored_record:
the record's JSON text, then its gzip member as fleet.json schema 3 holds it), the drift digest and
the verdict's pickle.  cProfile
inflates the normalizers' many small calls several times over (about 90 ms a host under it against
about 4 on a quiet machine), so its shares mislead; these do not.  The first 25 hosts warm the
codec's column memo and are not counted.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import io
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

import controller_bench as cb  # noqa: E402

from orchestrator.engine.envelope import STORED_MAX_VALUES, Envelope, loads_bounded  # noqa: E402
from orchestrator.facts.normalize import WHOLE_STRINGS  # noqa: E402
from orchestrator.store import members  # noqa: E402
from orchestrator.store.atomic import encode_json  # noqa: E402
from orchestrator.store.fleet_file import stored_record  # noqa: E402
from orchestrator.verdict import handoff  # noqa: E402
from orchestrator.verdict.judge import host_judge  # noqa: E402
from orchestrator.verdict.parallel import Spooled, drift_digest  # noqa: E402

WARM = 25
STEPS = ("envelopes read back", "judge", "stored text and its gzip member", "drift digest", "verdict pickle")


def phases(n: int) -> dict[str, float]:
    """CPU seconds of each step over hosts WARM..n."""
    inputs, expect = cb.make_inputs(n, held=False)
    judge = host_judge(lambda h: expect[h.name], lambda host: {})
    spent = dict.fromkeys(STEPS, 0.0)
    sink = io.BytesIO()
    clock = time.process_time
    for i, h in enumerate(inputs):
        assert h.load_data is not None
        texts = {p: encode_json(Envelope(p, "1", "ok", d).to_dict()) for p, d in h.load_data().items()}
        cr = clock()
        held = {p: loads_bounded(t, STORED_MAX_VALUES, WHOLE_STRINGS.get(p, ()))["data"] for p, t in texts.items()}
        c0 = clock()
        rec, verdict = judge(dataclasses.replace(h, load_data=functools.partial(dict, held)))
        c1 = clock()
        del rec["fingerprint"], rec["class"]
        parts: dict[str, str] = {}
        stored = stored_record(rec, parts)
        data = members.pack(stored.text[:-1])
        c2 = clock()
        digest = drift_digest(rec, parts)
        c3 = clock()
        handoff.dump(Spooled(0, len(data), verdict, digest, stored.layout), sink)
        c4 = clock()
        sink.seek(0)
        sink.truncate()
        if i >= WARM:
            for step, dt in zip(STEPS, (c0 - cr, c1 - c0, c2 - c1, c3 - c2, c4 - c3)):
                spent[step] += dt
    return spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=500)
    args = ap.parse_args()
    spent: dict[str, Any] = phases(args.hosts + WARM)
    total = sum(spent.values())
    print(f"{args.hosts} demo-derived hosts judged as a worker judges them; Python {sys.version.split()[0]}")
    print()
    print("| step | ms CPU a host | share |")
    print("|---|---:|---:|")
    for step, s in spent.items():
        print(f"| {step} | {s / args.hosts * 1e3:.2f} | {s / total * 100:.0f} % |")
    print(f"| all | {total / args.hosts * 1e3:.2f} | |")


if __name__ == "__main__":
    main()
