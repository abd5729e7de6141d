"""Ansible ``--limit`` host patterns.

A pattern is a list of terms separated by ``,`` or ``:`` (a colon inside ``[...]`` does not
separate). Terms: ``all``/``*``, a group name (all its hosts, sub-groups included), a host name, a
glob (``gpu0*``, applied to group and host names), a regex (``~gpu0[1-4]``, ``re.match`` on group
and host names), a subscript (``gpu[0]``, ``gpu[-1]``, ``gpu[0:3]`` inclusive, ``gpu[2:]``) of the
hosts a name matches in inventory order, a host range (``gpu[01:04]``, ``gpu[01-03,07]``) when the
part before the bracket matches nothing itself, and ``@file`` (the union of its lines, each a
pattern term such as a host name; blank lines and ``#`` comments skipped). ``&term`` intersects, ``!term`` excludes. As in Ansible the terms are
applied unions first, then intersections, then exclusions; a pattern of only ``&``/``!`` terms
starts from ``all``. The selected hosts come back in inventory order.
"""

from __future__ import annotations

import difflib
import fnmatch
import ipaddress
import os
import re

from orchestrator.files.bounded import UnreadableInput, read_regular
from orchestrator.inventory.model import Host, Inventory, InventoryError
from orchestrator.inventory.ranges import RangeError, expand_range, has_range, split_outside_brackets

_SUBSCRIPT = re.compile(r"^(.+)\[(?:(-?[0-9]+)|([0-9]+)[:-]([0-9]*))\]$")
_GLOB_CHARS = ("*", "?", "[", ".")


class PatternError(InventoryError):
    """A --limit pattern is malformed or selects no host."""


def _is_ipv6(text: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(text), ipaddress.IPv6Address)
    except ValueError:
        return False


def _split(pattern: str) -> list[str]:
    terms: list[str] = []
    for piece in split_outside_brackets(pattern, ","):
        piece = piece.strip()
        if not piece:
            continue
        bare = piece.lstrip("&!")
        # A regex keeps its colons; so does a bare IPv6 address.
        if bare.startswith("~") or _is_ipv6(bare):
            terms.append(piece)
        else:
            terms.extend(t.strip() for t in split_outside_brackets(piece, ":") if t.strip())
    return terms


# A --limit file names hosts and groups: 100,000 names are a few MB.  Bigger is not a list of
# names, and reading it whole would hold it several times over.
LIMIT_FILE_MAX = 16 << 20
_MAX_NESTING = 16  # @files naming @files


def _read_file(term: str, chain: tuple[str, ...]) -> tuple[str, list[str]]:
    """(the file's real path, its names) for `@path`; PatternError for a file that is missing, not
    a regular file (a FIFO would block for ever, a device never end), too big, not UTF-8 text, or
    already on the chain of @files that led to it."""
    path = term[1:]
    real = os.path.realpath(path)
    if real in chain:
        loop = " -> ".join([*(f"@{p}" for p in chain[chain.index(real):]), f"@{real}"])
        raise PatternError(f"--limit {term}: the file names itself ({loop}); remove the line that refers back")
    if len(chain) >= _MAX_NESTING:
        raise PatternError(f"--limit {term}: @files nested more than {_MAX_NESTING} deep")
    try:
        data = read_regular(path, LIMIT_FILE_MAX, "file of host names")
        text = data.decode("utf-8-sig")
    except UnreadableInput as exc:
        raise PatternError(f"--limit {term}: {exc.why}") from None
    except UnicodeDecodeError:
        raise PatternError(f"--limit {term}: not UTF-8 text; give a file of host and group names") from None
    return real, [s for s in (ln.strip() for ln in text.splitlines()) if s and not s.startswith("#")]


class _Matcher:
    def __init__(self, inv: Inventory) -> None:
        self.inv = inv
        self.order = {name: i for i, name in enumerate(inv.hosts)}
        self._members: dict[str, list[str]] = {}

    def group_hosts(self, group: str) -> list[str]:
        """Every host in a group or any group below it, in inventory order."""
        if group not in self._members:
            if group == "all":
                self._members[group] = list(self.inv.hosts)
            else:
                seen, found, todo = {group}, set(), [group]
                while todo:
                    g = self.inv.groups[todo.pop()]
                    found.update(g.hosts)
                    for child in g.children:
                        if child not in seen:
                            seen.add(child)
                            todo.append(child)
                self._members[group] = sorted(
                    (h for h in found if h in self.order), key=self.order.__getitem__
                )
        return self._members[group]

    def _by_regex(self, regex: re.Pattern[str], hosts_too: bool) -> list[str]:
        found: set[str] = set()
        groups = [g for g in self.inv.groups if regex.match(g)]
        for g in groups:
            found.update(self.group_hosts(g))
        if hosts_too or not groups:
            found.update(h for h in self.inv.hosts if regex.match(h))
        return sorted(found, key=self.order.__getitem__)

    def match(self, term: str, chain: tuple[str, ...] = ()) -> list[str]:
        if term.startswith("@"):  # a file of names: the union of its lines
            real, lines = _read_file(term, chain)
            found: set[str] = set()
            for line in lines:
                for t in _split(line):
                    found.update(self.match(t.lstrip("&!"), (*chain, real)))
            return sorted(found, key=self.order.__getitem__)
        if term.startswith("~"):
            try:
                regex = re.compile(term[1:])
            except re.error as exc:
                raise PatternError(f"--limit: invalid regular expression {term[1:]!r}: {exc}") from None
            return self._by_regex(regex, hosts_too=True)
        if term in self.inv.groups:
            return self.group_hosts(term)
        if term in self.inv.hosts:
            return [term]
        sub = _SUBSCRIPT.match(term)
        if sub:
            base = self.match_plain(sub.group(1))
            if base:
                if sub.group(2) is not None:
                    i = int(sub.group(2))
                    return [base[i]] if -len(base) <= i < len(base) else []
                start = int(sub.group(3))
                end = int(sub.group(4)) if sub.group(4) else len(base) - 1
                return base[start : end + 1]
        if has_range(term):
            try:
                names = expand_range(term)
            except RangeError:
                names = []
            hits = [n for n in names if n in self.order]
            if hits:
                return sorted(set(hits), key=self.order.__getitem__)
        return self.match_plain(term)

    def match_plain(self, term: str) -> list[str]:
        if term in self.inv.groups:
            return self.group_hosts(term)
        regex = re.compile(fnmatch.translate(term))
        return self._by_regex(regex, hosts_too=any(c in term for c in _GLOB_CHARS))


def _close_names(inv: Inventory, term: str) -> str:
    word = term.lstrip("&!~@")
    groups = [g for g in inv.groups if g not in ("all", "ungrouped")]
    close = difflib.get_close_matches(word, groups, n=5, cutoff=0.5)
    close += difflib.get_close_matches(word, list(inv.hosts), n=3, cutoff=0.7)
    if close:
        return "close names: " + ", ".join(close)
    shown = ", ".join(groups[:12]) + (", ..." if len(groups) > 12 else "")
    return f"groups are: {shown}" if groups else "the inventory has no groups besides all"


def select_hosts(inv: Inventory, pattern: str | None, warnings: list[str] | None = None) -> list[Host]:
    """The hosts a ``--limit`` pattern selects, in inventory order (all hosts for None).

    Raises PatternError when the result is empty (naming the term that emptied it and close
    group names). A term that matches nothing while others do is reported in ``warnings`` when a
    list is given (Ansible warns too) rather than failing the whole selection.
    """
    if pattern is None:
        return list(inv.hosts.values())
    if not pattern.strip():
        raise PatternError("--limit: the pattern is empty")
    terms = _split(pattern)
    unions = [t for t in terms if not t.startswith(("&", "!"))]
    inters = [t[1:] for t in terms if t.startswith("&")]
    excludes = [t[1:] for t in terms if t.startswith("!")]
    if not unions:
        unions = ["all"]

    m = _Matcher(inv)
    selected: dict[str, None] = {}
    unmatched: list[str] = []
    for t in unions:
        hits = m.match(t)
        if not hits:
            unmatched.append(t)
        selected.update(dict.fromkeys(hits))
    if not selected:
        hint = _close_names(inv, unmatched[0]) if unmatched else ""
        raise PatternError(
            f"--limit {pattern!r}: {', '.join(repr(u) for u in unmatched)} matches no host or group; {hint}"
        )
    for t in inters:
        hits = m.match(t)
        if not hits:
            raise PatternError(
                f"--limit {pattern!r}: '&{t}' matches no host or group; {_close_names(inv, t)}"
            )
        keep = set(hits)
        selected = {h: None for h in selected if h in keep}
        if not selected:
            raise PatternError(f"--limit {pattern!r}: no host is left after intersecting with '&{t}'")
    for t in excludes:
        hits = m.match(t)
        if not hits and warnings is not None:
            warnings.append(f"--limit: '!{t}' matches no host or group; {_close_names(inv, t)}")
        drop = set(hits)
        selected = {h: None for h in selected if h not in drop}
    if not selected:
        raise PatternError(f"--limit {pattern!r}: every selected host is excluded by the '!' terms")
    if warnings is not None:
        warnings.extend(f"--limit: {t!r} matches no host or group; {_close_names(inv, t)}" for t in unmatched)
    return [inv.hosts[h] for h in sorted(selected, key=m.order.__getitem__)]
