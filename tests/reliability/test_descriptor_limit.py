"""Out of file descriptors on the controller: `os.pipe()`/`fork` raising EMFILE inside a worker
used to propagate through the pool and end the run (exit 70, no fleet.json).  It is that host's
failure now, with the reason, and every other host is judged."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

from tests.support.hostile import ROOT_DIR, cli_env, interpreter, inventory, load_fleet, only_run_dir

HOSTS = 40


def test_emfile_in_a_worker_fails_that_host_and_the_run_goes_on(tmp_path: Path) -> None:
    # every host holds its pipes for a moment, so 40 at once need ~40 x 6 descriptors
    slow = interpreter(tmp_path / "bin", "slow", "import time; time.sleep(1.5)\n"
                       "print(json.dumps({'envelope_version': 1, 'probe': 'host', 'probe_version': '1',"
                       " 'status': 'ok', 'data': {}, 'errors': [], 'warnings': [], 'duration_s': 0.1}))")
    inv = inventory(tmp_path / "inv.yml", {f"h{i:02d}": {"ansible_python_interpreter": str(slow)}
                                           for i in range(HOSTS)})
    results = tmp_path / "results"
    limit = 96

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    proc = subprocess.run([sys.executable, "-m", "orchestrator", "run", "-i", str(inv), "--probe", "host",
                           "--results", str(results), "-f", str(HOSTS), "-t", "20"],
                          capture_output=True, text=True, env=cli_env(), cwd=str(ROOT_DIR),
                          preexec_fn=low_limit, timeout=120)
    assert proc.returncode in (0, 4), (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    fleet = load_fleet(only_run_dir(results))
    assert len(fleet["hosts"]) == HOSTS
    outcomes = {h["name"]: (h["outcome"], h["reason"]) for h in fleet["hosts"]}
    starved = {n: r for n, (o, r) in outcomes.items() if o == "failed"}
    assert starved, "the limit did not bite; lower it"
    assert all("Too many open files" in r for r in starved.values()), starved
    assert all(o in ("ok", "failed") for o, _ in outcomes.values()), outcomes
    assert any(o == "ok" for o, _ in outcomes.values())
