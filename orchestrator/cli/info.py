"""`probe probes` and `probe hosts`: what exists, before anything runs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tabulate import tabulate

from orchestrator.api.plan import load_inventory
from orchestrator.engine import payload as probes
from orchestrator.files import jsontext


def list_probes(args: argparse.Namespace) -> int:
    rows = [[s.name, s.version, "passive" if s.passive else "active", s.description] for s in probes.catalog().values()]
    print(tabulate(rows, headers=["probe", "version", "kind", "what it reads"]))
    return 0


def list_hosts(args: argparse.Namespace) -> int:
    from orchestrator.inventory.render import inventory_graph, inventory_list

    inv, hosts, warnings = load_inventory(tuple(args.inventory or ()), args.limit)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    limited = hosts if args.limit else None  # -l narrows every view, as ansible-inventory --limit does
    if args.graph:
        print(inventory_graph(inv, hosts=limited))
    elif args.list:
        print(jsontext.dumps(inventory_list(inv, hosts=limited), indent=2, default=str))
    else:
        rows = [[h.name, h.address, h.port or "", h.user or "", h.connection, ",".join(g for g in h.groups if g != "all")]
                for h in hosts]
        print(tabulate(rows, headers=["host", "address", "port", "user", "connection", "groups"]))
    return 0


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("probes", help="list the shipped probes")
    p.set_defaults(func=list_probes)
    h = sub.add_parser("hosts", help="resolve the inventory: hosts, groups, merged variables")
    h.add_argument("-i", "--inventory", action="append", metavar="INV", help="inventory (repeatable; default: demo)")
    h.add_argument("-l", "--limit", metavar="PATTERN", help="host pattern as Ansible's --limit")
    g = h.add_mutually_exclusive_group()
    g.add_argument("--list", action="store_true", help="JSON like ansible-inventory --list")
    g.add_argument("--graph", action="store_true", help="group tree like ansible-inventory --graph")
    h.set_defaults(func=list_hosts)
