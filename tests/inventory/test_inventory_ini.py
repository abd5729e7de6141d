"""Ansible INI inventories load unchanged (issue 16, item 8): checked against real
`ansible-inventory --list/--graph` output (recorded beside the fixtures, and live with the
ansible-core of the test extra), plus every refusal with its file and line, inventory scripts and
plugin configurations through ansible-inventory, and `probe hosts -l`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orchestrator.inventory import external, inventory_graph, inventory_list, load_inventory
from orchestrator.inventory.ini import literal, parse_ini
from orchestrator.inventory.model import InventoryError
from tests.support.ansible import ANSIBLE_INVENTORY, SKIP_REASON, ansible_list

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "inventories"
REFERENCE = FIXTURES / "ansible-reference"
CASES = [("hosts", "ini/hosts"), ("children", "ini/children.ini"), ("quoting", "ini/quoting.ini"), ("dir", "ini/dir")]


def as_json(data: object) -> object:
    return json.loads(json.dumps(data))


@pytest.mark.parametrize(("name", "source"), CASES)
def test_same_as_recorded_ansible_inventory(name: str, source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(FIXTURES)
    inv = load_inventory([source])
    assert as_json(inventory_list(inv)) == json.loads((REFERENCE / f"ini-{name}.list.json").read_text())
    assert inventory_graph(inv) == (REFERENCE / f"ini-{name}.graph.txt").read_text().rstrip("\n")
    assert inv.warnings == []


@pytest.mark.skipif(not ANSIBLE_INVENTORY, reason=SKIP_REASON)
@pytest.mark.parametrize(("name", "source"), CASES)
def test_same_as_live_ansible_inventory(name: str, source: str, tmp_path: Path) -> None:
    theirs = ansible_list(FIXTURES / source, cwd=tmp_path)
    theirs["_meta"].pop("profile", None)
    ours = as_json(inventory_list(load_inventory([str(FIXTURES / source)])))
    assert ours == theirs


def test_the_classic_hosts_file() -> None:
    inv = load_inventory([str(FIXTURES / "ini" / "hosts")])
    assert list(inv.hosts) == ["login01", "gpu01", "gpu02", "gpu03", "gpu04", "gpu05", "nas01"]
    g5 = inv.hosts["gpu05"]
    assert g5.port == 2222 and g5.address == "10.0.1.5" and g5.user is None
    assert g5.vars["rack"] == "r 12" and g5.vars["flag"] is True and g5.vars["count"] == 8
    assert g5.vars["listy"] == [1, 2]
    assert inv.hosts["gpu01"].vars["probe_expect"] == {"gpu_count": 8, "gpu_model": "H100"}
    assert inv.hosts["gpu01"].vars["note"] == "some text # not a comment"  # :vars lines are not shell-split
    assert inv.hosts["nas01"].connection == "local"
    assert inv.hosts["login01"].groups == ["all", "ungrouped"]
    assert "gpu" in inv.hosts["gpu01"].groups and "h100" in inv.hosts["gpu01"].groups


def test_values_are_python_literals_or_text() -> None:
    assert literal("8") == 8 and literal("08") == "08" and literal("True") is True and literal("yes") == "yes"
    assert literal("(1, 2)") == [1, 2] and literal("{'a': [None]}") == {"a": [None]} and literal("1j") == "1j"
    assert literal("'quoted'") == "quoted" and literal("a b") == "a b" and literal("") == ""


@pytest.mark.parametrize(("text", "line", "words"), [
    ("[gpu:vars]\nx=1\n", 1, "never defines"),
    ("[top:children]\nmissing\n", 2, "names group 'missing'"),
    ("[gpu:extra]\nh1\n", 1, "unknown type 'extra'"),
    ("[gpu servers]\nh1\n", 1, "no spaces"),
    ("[gpu]\nh1 ansible_port\n", 2, "expected key=value"),
    ("[gpu]\nh1 label=\"open\n", 2, "cannot parse host line"),
    ("[gpu]\nh1:\n", 2, "ends in ':'"),
    ("[gpu:vars]\njust-a-word\n[gpu]\n", 2, "expected key=value"),
])
def test_refusals_name_file_and_line(tmp_path: Path, text: str, line: int, words: str) -> None:
    path = tmp_path / "hosts"
    path.write_text(text)
    with pytest.raises(InventoryError) as err:
        load_inventory([str(path)])
    assert str(err.value).startswith(f"{path}:{line}: ") and words in str(err.value), str(err.value)


def test_ini_in_a_yml_file_and_a_bare_host_list_load_as_ansible_does(tmp_path: Path) -> None:
    (tmp_path / "inv.yml").write_text("[gpu]\ngpu01 ansible_host=10.0.0.1\n\n[gpu:vars]\nx=1\n")
    inv = load_inventory([str(tmp_path / "inv.yml")])
    assert inv.hosts["gpu01"].vars == {"ansible_host": "10.0.0.1", "x": 1}
    (tmp_path / "plain").write_text("gpu01\ngpu02\n")
    assert list(load_inventory([str(tmp_path / "plain")]).hosts) == ["gpu01", "gpu02"]


def test_statements_keep_ansibles_child_order() -> None:
    text = "[top:children]\nb\na\n[a]\nh1\n[b]\nh2\n"
    children = [(s.parent, s.child) for s in parse_ini(text, "x") if type(s).__name__ == "IniChild"]
    assert children == [("top", "a"), ("top", "b")]  # attached when each group's section appears


SCRIPT = """#!{python}
import json, sys
if "--host" in sys.argv:
    print("{{}}")
else:
    print(json.dumps({{"gpu": {{"hosts": ["s1", "s2"], "vars": {{"rack": "r9"}}}},
                      "_meta": {{"hostvars": {{"s1": {{"ansible_host": "10.9.0.1"}}}}}}}}))
"""


@pytest.mark.skipif(not ANSIBLE_INVENTORY, reason=SKIP_REASON)
def test_executable_script_runs_through_ansible_inventory(tmp_path: Path) -> None:
    script = tmp_path / "inventory.py"
    script.write_text(SCRIPT.format(python=sys.executable))
    script.chmod(0o755)
    inv = load_inventory([str(script)])
    assert list(inv.hosts) == ["s1", "s2"]
    assert inv.hosts["s1"].address == "10.9.0.1" and inv.hosts["s2"].vars["rack"] == "r9"
    assert "gpu" in inv.hosts["s2"].groups


@pytest.mark.skipif(not ANSIBLE_INVENTORY, reason=SKIP_REASON)
def test_plugin_config_runs_through_ansible_inventory(tmp_path: Path) -> None:
    cfg = tmp_path / "fleet.generator.yml"
    cfg.write_text(textwrap.dedent("""\
        plugin: ansible.builtin.generator
        hosts:
          name: "{{ role }}-{{ rack }}"
          parents:
            - name: "{{ role }}"
        layers:
          role: [gpu, cpu]
          rack: [r1, r2]
        """))
    inv = load_inventory([str(cfg)])
    assert sorted(inv.hosts) == ["cpu-r1", "cpu-r2", "gpu-r1", "gpu-r2"]
    assert inv.groups["gpu"].hosts == ["gpu-r1", "gpu-r2"]


def test_without_ansible_inventory_one_clear_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(external, "ansible_inventory_binary", lambda: None)
    script = tmp_path / "inventory.sh"
    script.write_text("#!/bin/sh\necho '{}'\n")
    script.chmod(0o755)
    cfg = tmp_path / "aws_ec2.yml"
    cfg.write_text("plugin: amazon.aws.aws_ec2\nregions: [eu-central-1]\n")
    for source, what in ((script, "executable inventory script"), (cfg, "plugin: amazon.aws.aws_ec2")):
        with pytest.raises(InventoryError) as err:
            load_inventory([str(source)])
        msg = str(err.value)
        assert what in msg and "not installed" in msg and "pip install ansible-core" in msg, msg


def _hosts(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "orchestrator", "hosts", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)


def test_probe_hosts_honours_limit_in_every_view() -> None:
    src = str(FIXTURES / "ini" / "hosts")
    table = _hosts("-i", src, "-l", "gpu0[1:2]").stdout
    assert "gpu01" in table and "gpu02" in table and "gpu03" not in table and "login01" not in table
    listed = json.loads(_hosts("-i", src, "-l", "storage", "--list").stdout)
    assert list(listed["_meta"]["hostvars"]) == ["nas01"]
    assert all(set(g.get("hosts", [])) <= {"nas01"} for k, g in listed.items() if k != "_meta")
    graph = _hosts("-i", src, "-l", "login01", "--graph").stdout
    assert "login01" in graph and "gpu01" not in graph
