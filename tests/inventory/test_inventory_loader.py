"""Inventory loading: Ansible's shape and precedence (checked against recorded ansible-inventory
output), group_vars/host_vars, sources (file, directory, comma list), and every refusal with its
file and line."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from orchestrator.inventory import inventory_graph, inventory_list, load_inventory
from orchestrator.inventory.model import Host, Inventory, InventoryError
from tests.support.skips import NOT_HERE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "inventories"
REFERENCE = FIXTURES / "ansible-reference"


def write(root: Path, files: dict[str, str]) -> Path:
    """Write {relative path: YAML text} under root; return the path of the first file."""
    first = None
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
        first = first or p
    assert first is not None
    return first


def load_text(tmp_path: Path, text: str, extra: dict[str, str] | None = None) -> tuple[Path, Inventory]:
    path = write(tmp_path, {"inv.yml": text, **(extra or {})})
    return path, load_inventory([str(path)])


def error_of(tmp_path: Path, text: str, extra: dict[str, str] | None = None) -> str:
    with pytest.raises(InventoryError) as err:
        load_text(tmp_path, text, extra)
    return str(err.value)


def line_of(path: Path, needle: str) -> int:
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if needle in line:
            return n
    raise AssertionError(f"{needle!r} not in {path}")


def as_json(data: object) -> object:
    return json.loads(json.dumps(data))


# --- compatibility with ansible-inventory -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "source"),
    [("cluster", "cluster/hosts.yml"), ("precedence", "precedence/inventory.yml"), ("multi", "multi")],
)
def test_same_as_ansible_inventory(name: str, source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The reference files are real `ansible-inventory --list/--graph` output (see their README),
    # produced from tests/fixtures/inventories with relative paths, so load from there too.
    monkeypatch.chdir(FIXTURES)
    inv = load_inventory([source])
    assert as_json(inventory_list(inv)) == json.loads((REFERENCE / f"{name}.list.json").read_text())
    assert inventory_graph(inv) == (REFERENCE / f"{name}.graph.txt").read_text().rstrip("\n")


def test_realistic_cluster_inventory_loads_unchanged() -> None:
    inv = load_inventory([str(FIXTURES / "cluster" / "hosts.yml")])
    assert inv.warnings == []
    assert list(inv.hosts) == [
        "h100-01", "h100-02", "h100-03", "h100-04", "h100-05",
        "a100-01", "a100-02", "a100-03", "a100-07",
        "login01", "login02.orion.example.net", "nfs01", "bastion", "controller",
    ]  # fmt: skip
    h1, h2, a7 = inv.hosts["h100-01"], inv.hosts["h100-02"], inv.hosts["a100-07"]
    # weakest first: all, then depth-1 groups by name, then the depth-2 group
    assert h1.groups == ["all", "gpu", "infiniband", "gpu_h100"]
    # group_vars/gpu_h100/ (a directory of files) beats the inventory's gpu vars ...
    assert h1.vars["nvidia_driver_branch"] == "560"
    assert h1.vars["probe_expect"] == {"nvlink_links_per_gpu": 18, "pcie": {"gen": 5, "width": 16}}
    assert h1.vars["mtu"] == 4096  # group_vars/gpu_h100/network.yml over infiniband's 4092
    # ... while for a100 the deeper inventory group beats its parent
    assert a7.vars["nvidia_driver_branch"] == "535"
    assert a7.vars["mtu"] == 4092
    # a child group's dict replaces the parent's whole (no deep merge, Ansible's default)
    assert h1.vars["site"] == {"name": "orion", "dc": "fra1", "tier": "gpu"}
    assert inv.hosts["login01"].vars["site"]["rack_layout"] == {"rows": 4, "per_row": 8}
    # group_vars/all beats the inventory's all vars
    assert h1.vars["ntp_servers"] == ["10.0.0.3"]
    # host_vars/ (yml and json)
    assert h2.vars["probe_expect_gpu_count"] == 7 and h1.vars["probe_expect_gpu_count"] == 8
    assert h2.address == "10.20.1.12" and h2.origins["ansible_host"].endswith("host_vars/h100-02.yml:1")
    assert a7.address == "10.20.2.17" and a7.vars["rack"] == "r3"
    assert h1.address == "h100-01"  # no ansible_host: the name is the address
    # connection keys through the Host accessors
    login = inv.hosts["login01"]
    assert (login.port, login.user, login.become) == (2222, "ops", False)
    assert login.key_file == "~/.ssh/orion_ed25519" and login.python == "/usr/bin/python3"
    assert inv.hosts["nfs01"].become is True  # ansible_become: "yes"
    assert h1.become is True and h1.connection == "ssh"
    assert inv.hosts["bastion"].python == "/usr/bin/python3.6"
    assert inv.hosts["bastion"].groups == ["all", "ungrouped"]
    assert inv.hosts["controller"].connection == "local"
    assert inv.hosts["controller"].python == sys.executable  # {{ ansible_playbook_python }}
    # origins say where each winning value was written
    assert login.origins["ansible_port"].endswith(
        f"hosts.yml:{line_of(FIXTURES / 'cluster' / 'hosts.yml', 'ansible_port: 2222')}"
    )
    assert inv.groups["gpu_h100"].depth == 2 and inv.groups["gpu"].children == ["gpu_h100", "gpu_a100"]
    assert inv.groups["infiniband"].vars == {"ib_subnet_manager": "ufm01", "mtu": 4092}


def test_precedence_rules() -> None:
    inv = load_inventory([str(FIXTURES / "precedence" / "inventory.yml")])
    v = {name: h.vars for name, h in inv.hosts.items()}
    assert [v[n]["who"] for n in ("node1", "node4")] == ["child", "host"]  # parent < child < host
    assert v["shared01"]["tie"] == "zeta"  # equal depth: the later name wins, not the file order
    assert v["node2"]["tie"] == "alpha"  # a depth-1 group beats all
    assert v["pnode"]["prio"] == "low_name_high_priority"  # ansible_group_priority before name
    assert "ansible_group_priority" not in v["pnode"]
    assert v["node2"]["level"] == "group_vars_all"  # group_vars/all beats even a child's inventory vars
    assert v["node1"]["level"] == "host_vars" and v["node4"]["level"] == "host"
    assert v["node1"]["parent_only"] == "p_gv"  # group_vars/parent beats the inventory's parent vars
    assert v["node1"]["nested"] == {"a": 10}  # replaced whole
    assert v["portnode"]["ansible_port"] == 2201 and inv.hosts["portnode"].port == 2201
    assert inv.groups["ungrouped"].hosts == ["lonely"]
    assert "ungrouped" not in inv.hosts["shared01"].groups
    assert inv.groups["all"].children[0] == "ungrouped" and "toplevel" in inv.groups["all"].children
    assert inv.hosts["tnode"].groups == ["all", "toplevel"]


# --- sources -----------------------------------------------------------------------------------


def test_directory_source_reads_yaml_and_json_in_order_and_skips_the_rest() -> None:
    inv = load_inventory([str(FIXTURES / "multi")])
    assert list(inv.hosts) == ["dgx01", "dgx02", "dgx03", "cpu01", "cpu02", "nas01"]
    assert "should_not_load" not in inv.hosts  # .hidden.yml
    assert inv.hosts["dgx01"].vars["driver"] == "550"  # 20-override.yaml read after 10-gpu.yml
    assert inv.hosts["dgx01"].vars["probe_expect_gpu_count"] == 8  # multi/group_vars
    assert inv.hosts["dgx03"].vars["probe_expect_gpu_count"] == 4  # multi/host_vars
    assert inv.hosts["cpu01"].address == "10.1.0.1"
    assert inv.warnings == []  # NOTES.md is documentation, not reported


def test_directory_reads_ini_and_extensionless_files_as_ansible_does(tmp_path: Path) -> None:
    # Ansible reads every file of an inventory directory but the extensions it ignores (.cfg, .md,
    # .txt ...); an extensionless `hosts` file and an .ini file are INI inventories.  (This test
    # used to expect them skipped with a warning, when only YAML was read.)
    write(tmp_path, {"a.yml": "all: {hosts: {h1: }}\n", "hosts": "[gpu]\nh2\n", "old.ini": "[x]\nh3\n",
                     "ansible.cfg": "[defaults]\nforks=5\n", "notes.txt": "[y]\n"})
    inv = load_inventory([str(tmp_path)])
    assert list(inv.hosts) == ["h1", "h2", "h3"]
    assert "defaults" not in inv.groups and "y" not in inv.groups
    assert inv.warnings == []


def test_later_source_overrides_earlier_without_conflict(tmp_path: Path) -> None:
    a = write(tmp_path / "a", {"inv.yml": "gpu: {vars: {x: 1}, hosts: {g1: {y: 1}}}\n"})
    b = write(tmp_path / "b", {"inv.yml": "gpu: {vars: {x: 2}, hosts: {g1: {y: 2}, g2: }}\n"})
    inv = load_inventory([str(a), str(b)])
    assert inv.hosts["g1"].vars == {"x": 2, "y": 2} and list(inv.hosts) == ["g1", "g2"]
    assert inv.sources == [str(a), str(b)]


def test_comma_list() -> None:
    inv = load_inventory(["gpu01, gpu02:2222,node[1-2,5],"])
    assert list(inv.hosts) == ["gpu01", "gpu02", "node1", "node2", "node5"]
    assert inv.hosts["gpu02"].port == 2222 and inv.hosts["gpu01"].port is None
    assert inv.groups["ungrouped"].hosts == list(inv.hosts)
    assert inv.hosts["gpu01"].groups == ["all", "ungrouped"] and inv.hosts["gpu01"].vars == {}
    single = load_inventory(["solo,"])
    assert list(single.hosts) == ["solo"]


def test_comma_list_with_group_vars_of_a_file_source(tmp_path: Path) -> None:
    path = write(tmp_path, {"inv.yml": "gpu: {hosts: {g1: }}\n", "group_vars/all.yml": "site: x\n"})
    inv = load_inventory([str(path), "extra,g1"])
    assert inv.hosts["extra"].vars == {"site": "x"}  # group_vars beside a file apply to every host
    assert inv.groups["ungrouped"].hosts == ["extra"]  # g1 is in gpu, so not ungrouped


def test_missing_source_and_no_source() -> None:
    with pytest.raises(InventoryError, match=r"'nope\.yml' not found"):
        load_inventory(["nope.yml"])
    with pytest.raises(InventoryError, match="no inventory given"):
        load_inventory([])


# --- group_vars / host_vars ---------------------------------------------------------------------


def test_group_vars_file_forms(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "inv.yml": "all: {children: {a: {hosts: {h1: }}, b: {hosts: {h1: }}, c: {hosts: {h1: }}}}\n",
            "group_vars/a": "from_a: plain file without extension\n",
            "group_vars/b.json": '{"from_b": "json"}\n',
            "group_vars/c/10-first.yml": "from_c: first\nc_one: 1\n",
            "group_vars/c/20-second.yaml": "from_c: second\n",
            "group_vars/c/.hidden.yml": "from_c: hidden\n",
            "group_vars/c.yml": "from_c: ignored because the directory c/ is found first\n",
        },
    )
    inv = load_inventory([str(path)])
    assert inv.hosts["h1"].vars == {
        "from_a": "plain file without extension",
        "from_b": "json",
        "from_c": "second",
        "c_one": 1,
    }
    assert inv.hosts["h1"].origins["from_c"].endswith("group_vars/c/20-second.yaml:1")


def test_host_vars_replacing_a_different_inline_value_is_a_warning(tmp_path: Path) -> None:
    path, inv = load_text(
        tmp_path,
        """\
        all:
          hosts:
            h1:
              ansible_host: 10.0.0.1
              same: 1
        """,
        {"host_vars/h1.yml": "ansible_host: 10.0.0.2\nsame: 1\n"},
    )
    host: Host = inv.hosts["h1"]
    assert host.address == "10.0.0.2"
    [warning] = inv.warnings
    assert "host_vars/h1.yml:1" in warning and f"{path}:4" in warning and "10.0.0.1" in warning


def test_vars_for_unknown_groups_and_hosts_are_reported(tmp_path: Path) -> None:
    _, inv = load_text(
        tmp_path, "gpu: {hosts: {g1: }}\n", {"group_vars/gpux.yml": "x: 1\n", "host_vars/g9.yml": "x: 1\n"}
    )
    warnings = "\n".join(inv.warnings)
    assert "no group 'gpux'" in warnings and "no host 'g9'" in warnings


def test_vars_file_must_be_a_mapping(tmp_path: Path) -> None:
    msg = error_of(tmp_path, "gpu: {hosts: {g1: }}\n", {"group_vars/gpu.yml": "- a\n- b\n"})
    assert msg.startswith(f"{tmp_path}/group_vars/gpu.yml:1: a vars file must be a mapping")


# --- YAML features and safety ------------------------------------------------------------------


def test_anchors_merge_keys_vault_and_unsafe_are_fine(tmp_path: Path) -> None:
    _, inv = load_text(
        tmp_path,
        """\
        all:
          vars:
            base: &base {user: ops, port: 22}
            secret: !vault |
              $ANSIBLE_VAULT;1.1;AES256
              3132
            raw: !unsafe "{{ not templated }}"
          hosts:
            h1:
              conn:
                <<: *base
                port: 2200
        """,
    )
    v = inv.hosts["h1"].vars
    assert v["conn"] == {"user": "ops", "port": 2200}
    assert v["secret"] == {"__ansible_vault": "$ANSIBLE_VAULT;1.1;AES256\n3132\n"}
    assert v["raw"] == "{{ not templated }}"


def test_unsafe_tag_is_refused_and_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    text = f"""\
    all:
      hosts:
        h1:
          x: !!python/object/apply:os.system ["touch {marker}"]
    """
    msg = error_of(tmp_path, text)
    assert msg.startswith(f"{tmp_path}/inv.yml:4: YAML tag '!!python/object/apply:os.system' is not allowed")
    assert not marker.exists()


def test_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, cur in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{cur}: &{cur} [{','.join(['*' + prev] * 9)}]")
    bomb = "all:\n  vars:\n" + "".join(f"    {ln}\n" for ln in lines) + "  hosts: {h1: }\n"
    start = time.monotonic()
    msg = error_of(tmp_path, bomb)
    assert time.monotonic() - start < 5
    assert "expand to more than" in msg and msg.startswith(f"{tmp_path}/inv.yml:")


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    msg = error_of(tmp_path, "all:\n  vars:\n    loop: &x [1, *x]\n")
    assert msg.startswith(f"{tmp_path}/inv.yml:3:") and "recursive" in msg


def test_a_large_honest_inventory_with_aliases_loads(tmp_path: Path) -> None:
    hosts = "".join(f"    gpu{i:04d}: *common\n" for i in range(2000))
    text = (
        "all:\n  vars:\n    x: 1\n  hosts:\n    gpu0000: &common {ansible_user: ops}\n"
        + hosts.split("\n", 1)[1]
    )
    _, inv = load_text(tmp_path, text)
    assert len(inv.hosts) == 2000
    assert inv.hosts["gpu1999"].user == "ops"


# --- errors name the file and line ---------------------------------------------------------------

ERROR_CASES = [
    ("bad_yaml", "all:\n  hosts:\n    h1: [unclosed\n  vars: {}\n", "inv.yml:4: bad YAML"),
    ("hosts_list", "all:\n  children:\n    gpu:\n      hosts:\n        - g1\n        - g2\n",
     "inv.yml:4: 'hosts' of group 'gpu' must be a mapping (host name: its variables, or empty), found a list"),
    ("vars_list", "gpu:\n  vars:\n    - x\n", "inv.yml:2: 'vars' of group 'gpu' must be a mapping"),
    ("children_list", "gpu:\n  children: [a, b]\n", "inv.yml:2: 'children' of group 'gpu' must be a mapping"),
    ("group_list", "all:\n  children:\n    gpu: [g1, g2]\n", "inv.yml:3: group 'gpu' must be a mapping"),
    ("host_vars_string", "gpu:\n  hosts:\n    g1: fast\n", "inv.yml:3: variables of host 'g1' must be a mapping"),
    ("bad_range", "gpu:\n  hosts:\n    g[1:2]:\n    g[09:01]:\n",
     "inv.yml:4: host range 'g[09:01]' does not expand: [09:01]: start 09 is greater than end 01"),
    ("mixed_range", "gpu:\n  hosts:\n    g[a:5]:\n", "inv.yml:3: host range 'g[a:5]' does not expand"),
    ("top_list", "- all\n", "inv.yml:1: an inventory must be a mapping of group names"),
    ("list_json", '{"_meta": {"hostvars": {}}, "all": {"children": ["ungrouped"]}}',
     "inv.yml:1: this is 'ansible-inventory --list' JSON output"),
    ("loop", "a:\n  children:\n    b:\n      children:\n        a:\n",
     "inv.yml:5: making 'a' a child of 'b' creates a loop"),
    ("self_loop", "a:\n  children:\n    a:\n", "inv.yml:3: making 'a' a child of 'a' creates a loop"),
    ("all_child", "a:\n  children:\n    all:\n", "inv.yml:3: 'all' cannot be a child"),
    ("null_group_name", "all:\n  children:\n    ~: {hosts: {h: }}\n", "inv.yml:3: a group name must be a name"),
    ("control_chars", 'all:\n  hosts:\n    "gpu\\e[31m01":\n', "inv.yml:3: a host name 'gpu\\x1b[31m01' contains control"),
    ("priority", "a:\n  vars:\n    ansible_group_priority: high\n", "inv.yml:3: ansible_group_priority must be a whole number"),
    ("connection", "all:\n  vars:\n    ansible_connection: winrm\n  hosts:\n    h1:\n",
     "inv.yml:3: host 'h1': ansible_connection 'winrm' is not supported"),
    ("port", "all:\n  hosts:\n    h1:\n      ansible_port: ssh\n", "inv.yml:4: host 'h1': ansible_port must be a port number"),
    ("port_range", "all:\n  hosts:\n    h1:\n      ansible_port: 70000\n", "inv.yml:4: host 'h1': ansible_port"),
    # conflicts: one file, one entity, one variable, two values
    ("dup_host_key", "gpu:\n  hosts:\n    g1: {x: 1}\n    g1: {x: 2}\n",
     "inv.yml:4: key 'g1' appears twice in one mapping (first at line 3)"),
    ("range_overlap", "gpu:\n  hosts:\n    g[1:3]:\n      ansible_host: 10.0.0.1\n    g2:\n      ansible_host: 10.0.0.2\n",
     "inv.yml:6: host 'g2' gets ansible_host='10.0.0.2' here but ansible_host='10.0.0.1' at "),
    ("two_groups_inline", "a:\n  hosts:\n    g1: {rack: r1}\nb:\n  hosts:\n    g1: {rack: r2}\n",
     "inv.yml:6: host 'g1' gets rack='r2' here but rack='r1' at "),
    ("group_twice", "all:\n  children:\n    p1:\n      children:\n        gpu: {vars: {d: 1}}\n"
     "    p2:\n      children:\n        gpu: {vars: {d: 2}}\n", "inv.yml:8: group 'gpu' gets d=2 here but d=1 at "),
    ("dup_var_key", "all:\n  vars:\n    x: 1\n    x: 2\n", "inv.yml:4: key 'x' appears twice"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "text", "expected"), ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_errors_name_file_and_line(tmp_path: Path, case: str, text: str, expected: str) -> None:
    msg = error_of(tmp_path, text)
    assert msg.startswith(f"{tmp_path}/{expected}"), msg
    assert "\n" not in msg and "Traceback" not in msg


def test_conflict_message_names_both_places(tmp_path: Path) -> None:
    msg = error_of(tmp_path, "a:\n  hosts:\n    g1: {rack: r1}\nb:\n  hosts:\n    g1: {rack: r2}\n")
    assert msg.endswith("Keep one of them.") and f"{tmp_path}/inv.yml:3" in msg


def test_repeats_with_equal_values_are_not_conflicts(tmp_path: Path) -> None:
    _, inv = load_text(
        tmp_path,
        """\
        all:
          vars: {x: 1, x: 1}
          children:
            a:
              vars: {d: 1}
              hosts:
                g[1:2]: {rack: r1}
                g1: {rack: r1}
            b:
              vars: {d: 2}        # same depth as a, different value: normal Ansible, b wins by name
              hosts:
                g1:
            p:
              children:
                a:
                  vars: {d: 1}
        """,
    )
    g1 = inv.hosts["g1"]
    # a is also under p, so it is deeper than b (depth 2 vs 1) and its d wins
    assert g1.vars == {"x": 1, "d": 1, "rack": "r1"} and g1.groups == ["all", "b", "p", "a"]


def test_ipv6_hosts(tmp_path: Path) -> None:
    _, inv = load_text(
        tmp_path, "all:\n  hosts:\n    fe80::1:\n    '[fe80::2]:2222':\n    '[2001:db8::3]':\n"
    )
    assert list(inv.hosts) == ["fe80::1", "fe80::2", "2001:db8::3"]
    assert [h.port for h in inv.hosts.values()] == [None, 2222, None]


def test_templates_are_not_evaluated_and_say_so(tmp_path: Path) -> None:
    path, inv = load_text(
        tmp_path,
        """\
        all:
          vars:
            ansible_host: "{{ inventory_hostname }}.mgmt"
            ansible_python_interpreter: auto_silent
          hosts:
            h1:
            h2:
        """,
    )
    assert inv.hosts["h1"].address == "{{ inventory_hostname }}.mgmt" and inv.hosts["h1"].python == "python3"
    assert inv.warnings == [  # once per place, not once per host
        f"{path}:3: ansible_host='{{{{ inventory_hostname }}}}.mgmt' is a Jinja2 template; templates are not "
        "evaluated, the text is used as written"
    ]
    msg = error_of(tmp_path / "p", "all:\n  hosts:\n    h1: {ansible_port: '{{ p }}'}\n")
    assert "ansible_port must be a port number" in msg and "templates are not evaluated" in msg


def test_ssh_aliases_and_replay_connection(tmp_path: Path) -> None:
    _, inv = load_text(
        tmp_path,
        """\
        all:
          hosts:
            old: {ansible_ssh_host: 10.0.0.9, ansible_ssh_port: 2022, ansible_ssh_user: root, ansible_connection: paramiko}
            smart: {ansible_connection: smart, ansible_become: "no"}
            rec: {ansible_connection: replay}
        """,
    )
    old, smart, rec = (inv.hosts[n] for n in ("old", "smart", "rec"))
    assert (old.address, old.port, old.user, old.connection) == ("10.0.0.9", 2022, "root", "ssh")
    assert smart.connection == "ssh" and smart.become is False and rec.connection == "replay"


def test_unexpected_group_key_and_empty_file_warn(tmp_path: Path) -> None:
    _, inv = load_text(tmp_path, "gpu:\n  host:\n    g1:\n  hosts:\n    g2:\n")
    assert list(inv.hosts) == ["g2"]
    assert inv.warnings == [
        f"{tmp_path}/inv.yml:2: group 'gpu': key 'host' (did you mean 'hosts'?) ignored; only hosts, children and vars are read (Ansible ignores it too)"
    ]
    empty = write(tmp_path / "e", {"empty.yml": "# nothing yet\n"})
    inv2 = load_inventory([str(empty)])
    assert inv2.hosts == {} and "empty inventory file" in inv2.warnings[0]


def test_ini_inventory_loads(tmp_path: Path) -> None:
    # INI inventories load (tests/inventory/test_inventory_ini.py); this used to be a refusal
    # with a hint to convert the file.
    _, inv = load_text(tmp_path, "[gpu]\ngpu01 ansible_host=10.0.0.1\n\n[gpu:vars]\nx=1\n")
    assert inv.hosts["gpu01"].vars == {"ansible_host": "10.0.0.1", "x": 1}


def test_deep_group_chain_does_not_recurse(tmp_path: Path) -> None:
    n = 1500  # past the default recursion limit of 1000
    text = "".join(f"g{i}:\n  children:\n    g{i + 1}:\n" for i in range(n)) + f"g{n}:\n  hosts:\n    leaf:\n"
    _, inv = load_text(tmp_path, text)
    leaf = inv.hosts["leaf"]
    assert len(leaf.groups) == n + 2 and inv.groups[f"g{n}"].depth == n + 1
    assert inventory_graph(inv).count("@") == n + 3


def test_not_utf8(tmp_path: Path) -> None:
    p = tmp_path / "bin.yml"
    p.write_bytes(b"all:\n  hosts:\n    h\xff1:\n")
    with pytest.raises(InventoryError, match="not UTF-8"):
        load_inventory([str(p)])


@pytest.mark.skipif(os.geteuid() == 0, reason=NOT_HERE + "root reads any file")
def test_unreadable_file(tmp_path: Path) -> None:
    p = write(tmp_path, {"inv.yml": "all: {}\n"})
    p.chmod(0)
    with pytest.raises(InventoryError, match="cannot read"):
        load_inventory([str(p)])
