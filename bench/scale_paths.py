"""The roads past one controller, measured on the same simulated hosts behind the loopback sshd.

    PYTHONPATH=. python bench/scale_paths.py [--hosts 20] [--slurm-nodes 4] [--repeat 1]

Builds N simulated machines (tests/support: sysfs trees + compiled fake libnvidia-ml, the demo's
machines in turn, then copies of them seeded by their own names), reached over a private loopback
sshd, and runs the audit playbook (playbooks/audit.yml) on them by:

* `probe run`                                      (fleetprobe's own engine, Paramiko)
* `ansible-playbook fleetprobe.gpu.audit -f N`     (the generated collection + its callback, OpenSSH)
* `probe bundle --host` per host, delivered by N parallel plain `ssh host python3 -I -S - < bundle`,
  then `probe import DIR`                          (what srun / cron / any other carrier does)
* `probe run --shard K/4` x 4, then `probe merge`  (several controllers)
* `--merge-only`: `probe run --shard K/10` x 10 and `probe merge` over 100 hosts replayed from the
  demo recordings (the controller's cost of merging, without SSH)

and, when Slurm is installed and we are root, `srun -N <nodes>` of one bundle on emulated slurmd
nodes (tests/support/slurm.py) + `probe import`.  Each controller command runs under GNU time:
wall, user+sys CPU of the controller's process tree (ssh clients and Ansible's forks included;
the sshd side is the "hosts" and is not counted), and the peak RSS of its largest process.
Every road must judge the same findings as `probe run`, else its figures are not printed as a
success.  Not a test: the figures depend on the machine and its load (printed with them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.simulate.record import demo_hosts  # noqa: E402
from tests.support.collected import finding_keys  # noqa: E402
from tests.support.fleet import build_simulated_host, ssh_hosts  # noqa: E402
from tests.support.sshd import SshKeys, start_sshd  # noqa: E402

BIN = Path(sys.executable).parent


@dataclass
class Timed:
    wall_s: float
    cpu_s: float
    maxrss_mib: float
    stdout: str
    stderr: str
    rc: int


def timed(argv: list[str], env: dict[str, str], stdin: Path | None = None, cwd: Path | None = None) -> Timed:
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        with open(stdin or os.devnull, "rb") as f:
            t0 = time.monotonic()
            proc = subprocess.run(["/usr/bin/time", "-o", tf.name, "-f", "%e %U %S %M", *argv], stdin=f,
                                  capture_output=True, text=True, env=env, cwd=cwd, check=False)
            wall = time.monotonic() - t0
        fields = tf.read().split()[-4:]
    _e, user, sys_, rss = fields
    return Timed(wall, float(user) + float(sys_), int(rss) / 1024, proc.stdout, proc.stderr, proc.returncode)


def line(label: str, t: Timed, same: bool | None) -> str:
    verdict = "" if same is None else ("  same findings as probe run" if same else "  FINDINGS DIFFER")
    return f"{label:<44} wall {t.wall_s:6.2f} s  CPU {t.cpu_s:6.2f} s  peak RSS {t.maxrss_mib:6.1f} MiB{verdict}"


def merge_figures(n_hosts: int, n_shards: int) -> list[str]:
    """`probe run --shard K/N` x N and `probe merge` over replayed demo recordings (no SSH: the
    controller's own cost), checked against one `probe run` of the whole inventory."""
    work = Path(tempfile.mkdtemp(prefix="fp-merge-"))
    try:
        names = list(demo_hosts())
        lines = ["all:", "  hosts:"]
        for i in range(n_hosts):
            src = names[i % len(names)]
            lines += [f"    r{i:04d}-{src}:", "      ansible_connection: replay", f"      probe_replay: {json.dumps(src)}"]
        inv = work / "replay.yml"
        inv.write_text("\n".join(lines) + "\n")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(work)}
        probe = [sys.executable, "-m", "orchestrator"]
        res = work / "runs"
        # in a results directory of its own: the parts' previous run must not be the whole one
        full = timed([*probe, "run", "-i", str(inv), "--results", str(work / "whole"), "--format", "json"], env)
        want = finding_keys(json.loads(full.stdout)["findings"])
        parts = []
        for k in range(1, n_shards + 1):
            t = timed([*probe, "run", "-i", str(inv), "--shard", f"{k}/{n_shards}", "-o", str(res / f"s{k}"), "-q"], env)
            if t.rc != 2:
                parts.append(str(res / f"s{k}"))
        merge = timed([*probe, "merge", *parts, "--results", str(res), "--format", "json"], env)
        same = finding_keys(json.loads(merge.stdout)["findings"]) == want
        return [line(f"probe run, {n_hosts} replayed hosts (one run)", full, None),
                line(f"probe merge of {len(parts)} shards of those", merge, same)]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--slurm-nodes", type=int, default=4)
    ap.add_argument("--merge-only", action="store_true", help="only the merge figures (replayed hosts)")
    ap.add_argument("--merge-hosts", type=int, default=100)
    ap.add_argument("--merge-shards", type=int, default=10)
    args = ap.parse_args()
    if args.merge_only:
        print("\n".join(merge_figures(args.merge_hosts, args.merge_shards)))
        return 0
    names = list(demo_hosts())
    # past the demo's machines, copies of them: "<demo host>-c<k>" is built from the same simulated
    # machine, seeded by its own name (its own serials and GPU UUIDs), with its group's expectations
    hosts_names = [names[i] if i < len(names) else f"{names[i % len(names)]}-c{i // len(names)}"
                   for i in range(args.hosts)]
    machines = {n: demo_hosts()[n if n in names else n.rsplit("-c", 1)[0]] for n in hosts_names}
    work = Path(tempfile.mkdtemp(prefix="fp-scale-"))
    keys = SshKeys.generate(work / "keys")
    sshd = start_sshd(work / "sshd", keys)
    out: list[str] = []
    try:
        sims = [build_simulated_host(n, machines[n], work / "sim") for n in hosts_names]
        hosts = ssh_hosts(sshd, sims)
        common = f"-F {sshd.ssh_config} -o UserKnownHostsFile={sshd.known_hosts} -o StrictHostKeyChecking=yes"
        for h in hosts:
            h.vars.update(ansible_python_interpreter=sys.executable, ansible_ssh_common_args=common)
        inv = work / "fleet.yml"
        inv.write_text(sshd.inventory_yaml(hosts))
        home = work / "home"
        (home / ".ssh").mkdir(parents=True)
        env = {**{k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "XDG_STATE_HOME")},
               "HOME": str(home), "PYTHONPATH": str(ROOT), "PATH": f"{BIN}:{os.environ['PATH']}",
               "ANSIBLE_LOCAL_TEMP": str(home / ".ansible-tmp"), "ANSIBLE_NOCOLOR": "1"}
        probe = [sys.executable, "-m", "orchestrator"]
        res = work / "runs"
        out.append(f"{args.hosts} simulated hosts over loopback sshd; audit playbook; "
                   f"load {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")

        live = timed([*probe, "run", "-i", str(inv), "--results", str(res), "--ssh-config", str(sshd.ssh_config),
                      "--format", "json"], env)
        want = finding_keys(json.loads(live.stdout)["findings"])
        out.append(line("probe run", live, None))

        cols = work / "collections"
        subprocess.run([*probe, "ansible-collection", str(cols)], env=env, check=True, capture_output=True)
        cb = work / "cb-runs"
        aenv = {**env, "ANSIBLE_COLLECTIONS_PATH": str(cols), "ANSIBLE_CALLBACKS_ENABLED": "fleetprobe.gpu.fleetprobe",
                "FLEETPROBE_RESULTS": str(cb)}
        ans = timed([str(BIN / "ansible-playbook"), "-i", str(inv), "-f", str(args.hosts), "fleetprobe.gpu.audit"],
                    aenv)
        cb_run = sorted(cb.iterdir())[-1]
        out.append(line(f"ansible-playbook -f {args.hosts} + callback", ans,
                        finding_keys(json.loads((cb_run / "findings.json").read_text())) == want))

        bdir, odir = work / "bundles", work / "outputs"
        bdir.mkdir()
        odir.mkdir()
        t0 = time.monotonic()
        for h in hosts:
            subprocess.run([*probe, "bundle", "-i", str(inv), "--host", h.name, "-o", str(bdir / f"{h.name}.py")],
                           env=env, check=True, capture_output=True)
        per_bundle = (time.monotonic() - t0) / len(hosts)

        def deliver(h: object) -> None:
            name = h.name  # type: ignore[attr-defined]
            vars = h.vars  # type: ignore[attr-defined]
            with open(bdir / f"{name}.py", "rb") as f, open(odir / f"{name}.out", "wb") as o:
                subprocess.run(["ssh", "-F", str(sshd.ssh_config), "-o", f"UserKnownHostsFile={sshd.known_hosts}",
                                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-i", str(keys.user_key),
                                "-p", str(sshd.port), f"{vars['ansible_user']}@{vars['ansible_host']}",
                                f"{sys.executable} -I -S -"], stdin=f, stdout=o, check=True, env=env)

        t0 = time.monotonic()
        with ThreadPoolExecutor(len(hosts)) as pool:
            list(pool.map(deliver, hosts))
        delivery = time.monotonic() - t0
        imp = timed([*probe, "import", str(odir), "-i", str(inv), "--results", str(res), "--format", "json"], env)
        out.append(f"{'probe bundle --host (per host)':<44} {per_bundle:6.2f} s each (a cluster needs one bundle "
                   "when no host has probe_root/probe_args)")
        out.append(f"{'  delivery: ' + str(len(hosts)) + ' parallel plain ssh':<44} wall {delivery:6.2f} s "
                   "(not fleetprobe: srun/cron/Ansible's part)")
        out.append(line(f"  probe import of {len(hosts)} documents", imp,
                        finding_keys(json.loads(imp.stdout)["findings"]) == want))

        shard_dirs = []
        shard_wall = 0.0
        for k in range(1, 5):
            d = res / f"shard{k}"
            t = timed([*probe, "run", "-i", str(inv), "--shard", f"{k}/4", "-o", str(d), "--ssh-config",
                       str(sshd.ssh_config), "-q"], env)
            if t.rc == 2:
                continue  # an empty part of a small fleet
            shard_wall = max(shard_wall, t.wall_s)
            shard_dirs.append(str(d))
        merge = timed([*probe, "merge", *shard_dirs, "--results", str(res), "--format", "json"], env)
        out.append(f"{'probe run --shard K/4 (the slowest part)':<44} wall {shard_wall:6.2f} s "
                   f"({len(shard_dirs)} parts, run one after the other here)")
        out.append(line(f"probe merge of {len(shard_dirs)} parts", merge,
                        finding_keys(json.loads(merge.stdout)["findings"]) == want))

        if shutil.which("slurmd") and os.geteuid() == 0:
            from tests.support.slurm import start_cluster

            cluster = start_cluster(work / "slurm", args.slurm_nodes)
            try:
                b = work / "any.py"
                subprocess.run([*probe, "bundle", "-o", str(b)], env=env, check=True, capture_output=True)
                sdir = work / "srun"
                sdir.mkdir()
                t = timed(["srun", "-N", str(args.slurm_nodes), "--ntasks-per-node=1", "--input=all", "-o",
                           f"{sdir}/%j.%t.json", shutil.which("python3") or sys.executable, "-I", "-S", "-"],
                          {**env, "SLURM_CONF": str(cluster.conf)}, stdin=b)
                imp2 = timed([*probe, "import", str(sdir), "--results", str(res), "-q"], env)
                out.append(line(f"srun -N {args.slurm_nodes} of one bundle (this machine's /sys)", t, None))
                out.append(line(f"  probe import of {args.slurm_nodes} documents", imp2, None))
            finally:
                cluster.stop()
    finally:
        sshd.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
