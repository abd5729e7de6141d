"""The pcie probe on a real GPU host's sysfs: a capture taken on the device machine lent to this task.

The capture (below, a gzipped tar of the real attribute files, binary config spaces, the driver /
iommu / class symlinks, /proc/driver/nvidia and the /dev/nvidia* names) was taken on 2026-11-30 on a
KVM guest with one NVIDIA H200, by copying what the probe reads; nothing was edited.  On the same
machine at the same time:
* `nvidia-smi --query-gpu=pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,
  pcie.link.width.max`: `00000000:00:06.0, 5, 5, 16, 16`;
* `nvidia-smi topo -m`: one GPU, CPU affinity 0-15, NUMA affinity 0 (sysfs numa_node says -1);
* `/sys/bus/pci/devices/0000:00:06.0/config` read 4096 bytes as root and 64 bytes as uid 65534.
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

from orchestrator.engine.payload import build_script
from orchestrator.facts.normalize.pcie import normalize
from orchestrator.present.terminal.pcie import render_levels, render_tree
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.checks.pcie import CHECKS

CAPTURE_TGZ_B64 = """
H4sIAAAAAAAAA+2dTW8bxx3Gh7LsWGqD0LULCOpljTptkpbU7Mvs0j4UlqzYFlo5jh07PVWmyJWzCEUKfFHoXioVRVH0E+SQQ/sN
ck0vbb9IP4WOBdzZJSlLNE3OLsn/OJ3nZ0viy4q74sNnZzjzzJ/FNTZ3uCQQIvkpGf6ZXLaFy13bc2zhyNuDgAtmifkfGmOdVrvc
tCzWbDTa47abdP/3lOLaQbNRme+LILX+NvcFh/4U9PWvNqPDsDmnl0F6/R3bc6E/Bef1rx9G1ag865dBev1dz8b5n4SR+suLrahR
n9U+YoF9z3uj/o49rL/gts8sPqsDGIfh+j94+mjb6ut9y3rwdGtza9168mDrt9YnB2Hd+nXYrIc1a7tR7dRCa6/RtLolf8f3LEuU
eNEWN4tcXn4U1sJyK7Q2OlGtalkf1KPubq16+0PLWr53586rh7eeVyqDa5Ytim6RWx/ILT60lnU/D6Yy0v/PDzqtGTYC6c//nhug
/SfhzfrHstyK//tFPt2LIb3+wucO9KdAUf+oLs/9++V2pl7BpPbfc5zz+jucx+//0P7PH9myh7Vb1tLSoO2/L5/85a1Hn8rWOr7V
s5fvPXxiPXmytSm3suTlgh36nnCrYcHz94JCxd91C07ZqRRKdikMXMet2MHN5adRNWxYG1ufPI5/7aZ8DfFiWcTf7fLyRqdlffbi
IIzvenhnK1ze3F63Hke/T24QjrUbtVvJbdvl1pfxbby7d5bkAX7TqCSvx+T+M6/V5c3wMKqE1nZUbzSTO5O/4G7U3P+q3Ozt4rTv
ktz1cbdS61TD6i35JDQM64kU16rh4ZzHANOf/7nno/0noad/77xf6BzuF9qNRq01231MOv+PeP/v2zbO/xSc1X9ez3d6/e3Awft/
Es7qX2nX5rKP9Po7roD/SRg+/89jHxn0lx1M6E9Bca31YpZjPaPI0P8TDvp/JPT0353peN8w6fW35UXoT8Er/Q8q0dsz/8v9APpT
cF7/3jDgrM8F6fV3hYf5XxJG638YNdtRozCjU0J6/YXvYvyfhNH6zzYHkkF/buP8T8KQ/snQ+dtw/o/H/6D//BmtfyzJYD5l+n0k
+geBuv7yuy/P/06xuNb7PzgueYz9Q5vZIUL/cfrbuvSP53/V9J/yEKH/OP09bfr7qvpPeYjQf5z+XJf+nrL+Ux4i9B+nv9DW/iuf
/6c8ROg/Tn9X2/nfU9V/ykOE/uP0d7Tpr9z/n/IQob/Uv1Irt+Y3A5Ton27+x3ex/o+Es/rXw/ZcXgPp9Xe8eP0P9J8/w/qH7S+m
TPu/Tnr9XUdAfxJG6t9rbme2j/TtvxOot/+y/9efr3KyHBz0l/rPZ9x/QIbzv435XxrO63/GXzPcR4bzvycw/0vCG/U/Pb9Ovfwv
y/pP38f8Hwlq+jfl/dkrAsQPNT7/K4b09z1XIP9LAe+WbcOWvIEzqPm/1qiUazuVg04taqV3QXr/B57rwf8U8IIt4H9zUfN/pVHf
i55n3cd4/9sj+n8+97D+n4T/5MVP717Ms7+zhQvx9R8ytnA7n/xkrP8zvt7b9p8r8c/b/d99mWMsd/8quywvX3z2lwujHj//7QK7
fvTLK96ncpsXH8dbXhne5urld5J9/Iod5S6y34093ivs8hFj38lL/0j9t47mXz+Kv393VX7rjv+3wtav9n7n+CeD377B/n2N/fcP
7Pq7L1++z45/LJ+So/jrZ+x4ZbDNe/LL6l8e/Dwa4iP5mLlcf/uF149yePsc++ON3j0r0kd3T7f7W8q//ufs+Ea829I3033JV8L7
vUdc/yjlIUzkB+z4Fzm2nltgudPbFlkueVd6/fgdFj9dRXl98MK6NOaxLsjHuP9t4a/vff3NxqyPEwAAAAAAAADeZtTGf3rrQrPu
I5n/S5X/cO3z+d/R61Nn8gQYPv6jpn+9s1/eqTeq2TJBk8f/3eHxP+E5GP+joIDZP6NRHP/vNJthvb1Ti+pf7rQOwrCaZh8T/W8H
w/V/PR/130hwnSK37n221uoV4tV9OICYDP7/Kqq2v0izj9Ttv/R/gPp/JNg+PG8yiv6P1wdk3sfk9t8erv8TcLT/JPAud+PPW8BZ
wEzU/N/q7MrN2uH+TpalQZPb/9f6/7ZA/W8SeNcu7e7B/aai5v/9cjfje/+Y1O//7UD4yP+SgPf/ZpO2/T8M69VGypmgDO2/Y8P/
JMj2n1fhe2NR838W178itf9tnwfo/5MA/5uNYv5jqoIgWfyP9T808K7julgBaCwp3/+nnvuLmez/4fxPIND+04D5P7OZ7H9bS/0X
gc//IkFNfw31X9D/I4F3ORKgBqPmf/r6L04A/1OA+i9mo+b/edZ/4dwbUf/Fxfs/Ek5WN/KXFvMsl5QtietqvKrvMmpbNnT/0sP8
aVGOUnz9Wb5XB8ZiSbWOpYP8Ihv8kvztpT9d61U3eda7Ht+59PW1i8P7usJyR+xIXjhazPaHASXU/E++/i84//lvb/580qmfAMP9
r6Y//fo/1P+kAev/zEax/0ed//cD5H9IiMd/Shz5f1NR87+G/D/W/5AQ5388B+43lbT+p8r/coz/kiD9X97z4H9TUfO/hvwv2n8S
4H+zURz/Jc//uqj/QQL6/2Yz2f+envxfgPwfBWr6a8j/4fxPAvJ/ZqPmfw2f/4b6ryQg/2c2av6nz/95GP8h4WT1cT//9/JlfH2R
rYzJ/z0mzP9dQP6PADX/a8j/CeT/KFDTX0P9f6z/IgH5P7NR7P/R5/8w/08C7+5JkP8zFTX/a8j/If9LQjz/J1y431TS+p+s/ifG
f0lA/sds1PyvIf+H9p8E+N9sFMd/6fN/qP9AAvr/ZjPZ/1xP/s9F/o8CNf3p83+o/0UD72Ls12TU/K+h/h/6fyQg/2c2av6fZ/7P
HtH/k+//MP5Lwp+PPn+3f/GS1gMBAAAAAAAAAADA3FAb/9FQ/xv5HxKw/sdsFMd/6df/oP4LCbzL/VgCnAXMRM3/Gtb/YP0vCXH+
A+43l7T+J6v/jfwHCfC/2aj5X8P6H7T/JPBuiZd8+N9U1PyvYf0P8l8kyPa/KgL431Qm+19oWf/jc6z/oUBNfw31vzH/QwLqf5uN
mv811P/G/A8JWP9jNmr+11D/G+//SDhZ3Ryq/22Nqf+9SVj/O4f63wSo+V9D/W8f9b8pUNNfQ/1vfP4DCcj/mY1i/486/xdwzP+R
gPrfZqPmfw35PwH/U5B8/i/qfxpLWv+T1f/G+C8JqP9rNmr+15D/Q/tPAvxvNorjv/T5P9R/JQH9f7OZ7H9XT/1vH/k/CtT015D/
w/w/Ccj/mY2a/zXk/zD/SwLyf2aj5n8N+T/M/5Jwsrrez/+xJJe3yPJj8n/rhPm/BeT/CFDzv4b8n4f8HwVq+muo/4fxPxKQ/zMb
xf4fff0/1P8hgXe5E0uAs4CZqPlfQ/4P+R8Skvk/9AGMJa3/yfJ/GP8lAfkfs1Hzv4b8H9p/EuB/s1Ec/6XP/yH/SwL6/2aj2P4n
8y1Oxhxg4vBU+T/fER7yfxRM1t/Rk/8U0J8CNf015D/x/p8E5D/NRs3/GvKfyH+RgPyn2aj5nz7/ifwPDSerG/3851GS41xkl8fk
PzdQ//H/DDX/a8h/ush/UqCmv4b8J/JfJCD/aTaK/T/6/Cfmf0iIx39KHPlPU1Hzv4b8J9b/k5DM/zpwv6mk9T9Z/hPjvyQg/2U2
av7XkP9E+08C/G82iuO/9PlPfP4nCej/AwAAAObxP+21HW4AkAEA
"""


def _extract(dest: Path) -> Path:
    data = base64.b64decode("".join(CAPTURE_TGZ_B64.split()))
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # pragma: no cover - Python without extraction filters
            tar.extractall(dest)  # our own embedded archive
    return dest


def test_probe_on_the_captured_h200_guest(tmp_path: Path) -> None:
    root = _extract(tmp_path / "h200")
    r = subprocess.run([sys.executable, "-"], input=build_script("pcie", {"root": str(root)}),
                       capture_output=True, timeout=60)
    env = json.loads(r.stdout)
    assert env["status"] == "ok" and env["errors"] == []
    facts = normalize(env["data"])
    # what nvidia-smi said on the same machine
    assert facts["gpus"] == ["0000:00:06.0"]
    gpu = next(d for d in facts["devices"] if d["bdf"] == "0000:00:06.0")
    assert gpu["model"] == "NVIDIA H200" and gpu["driver"] == "nvidia"
    assert (gpu["link"]["gen_current"], gpu["link"]["gen_max"], gpu["link"]["width_current"], gpu["link"]["width_max"]) == (5, 5, 16, 16)
    assert gpu["local_cpulist"] == "0-15" and gpu["numa"] is None
    assert gpu["port_type"] == "endpoint" and gpu["acs"] is None and gpu["acs_unknown"] is None  # no ACS on an endpoint
    assert facts["gpu_counts"] == {"pci": 1, "proc": 1, "dev": 1, "driver_loaded": True, "missing_from_proc": [],
                                   "missing_from_dev": [], "proc_not_on_pci": [], "passthrough": []}
    # a flat virtio guest: detected as virtual, the virtio NIC found through its virtioN child
    assert facts["virtual_platform"]["detected"] and facts["switches"] == []
    nic = next(d for d in facts["devices"] if d["kind"] == "nic")
    assert nic["bdf"] == "0000:00:03.0" and nic["label"] == "eth0"
    assert facts["levels"]["matrix"] == [["X", "PHB"], ["PHB", "X"]]
    assert "[GPU0]  NVIDIA H200  Gen5 x16" in render_tree(facts) and "NIC0: eth0" in render_levels(facts)
    view = HostView(name="h200", facts={"pcie": facts}, outcomes={"pcie": "ok"})
    assert [f.to_dict() for c in CHECKS for f in c(view)] == []


def test_the_vm_1xh200_fixture_reads_like_the_capture(tmp_path: Path) -> None:
    from orchestrator.simulate import build_machine

    def facts(root: Path) -> dict:
        r = subprocess.run([sys.executable, "-"], input=build_script("pcie", {"root": str(root)}),
                           capture_output=True, timeout=60)
        return normalize(json.loads(r.stdout)["data"])

    real = facts(_extract(tmp_path / "real"))
    fixture = facts(build_machine("vm-1xh200", tmp_path / "fixture"))
    keys = ("vendor", "device", "subsystem_vendor", "subsystem_device", "class", "kind", "driver", "numa",
            "local_cpulist", "host_bridge", "chain", "link", "label", "model")

    def summary(f: dict) -> dict:
        return {d["bdf"]: {k: d.get(k) for k in keys} for d in f["devices"]}

    assert summary(fixture) == summary(real)
    for k in ("gpus", "nics", "levels", "gpu_counts", "switches", "uplinks"):
        assert fixture[k] == real[k], k
