"""Safe YAML loading that remembers line numbers, refuses duplicate keys and alias bombs.

Inventory errors must name a file and a line, but plain ``yaml.safe_load`` throws the marks away.
This loader is a ``SafeLoader`` (never the full loader: no Python object tags) whose mappings are
``LineMap`` dicts that remember the line of every key.
"""

from __future__ import annotations

import os
import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from orchestrator.inventory.model import InventoryError

# A billion-laughs document is a few hundred bytes whose aliases expand to billions of nodes.
# PyYAML shares aliased objects, so the blow-up happens later, when something walks the data
# (merging, JSON output). We count the *expanded* size on the node graph before constructing.
MAX_EXPANDED_NODES = 1_000_000
MAX_FILE_BYTES = 64 * 1024 * 1024

_MERGE_TAG = "tag:yaml.org,2002:merge"
_MAP_TAG = "tag:yaml.org,2002:map"


class LineMap(dict):
    """A mapping from a YAML file: ``line`` is where it starts, ``key_lines[key]`` where each key is."""

    line: int
    key_lines: dict[Any, int]


class _LineLoader(yaml.SafeLoader):
    """SafeLoader + line-tracking mappings + duplicate-key detection + Ansible's harmless tags."""

    def __init__(self, stream: Any, filename: str) -> None:
        super().__init__(stream)
        self.filename = filename


def _construct_linemap(loader: _LineLoader, node: MappingNode) -> LineMap:
    # Keys written in this mapping itself (not pulled in by a "<<" merge): only two of those with
    # the same name are a real duplicate; a merged key overridden by an own key is the point of "<<".
    own_keys = {id(k) for k, _ in node.value if k.tag != _MERGE_TAG}
    loader.flatten_mapping(node)
    result = LineMap()
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    own_seen: dict[Any, tuple[int, Any]] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                "found an unhashable key",
                key_node.start_mark,
            ) from None
        value = loader.construct_object(value_node, deep=True)
        line = key_node.start_mark.line + 1
        if id(key_node) in own_keys:
            if key in own_seen and own_seen[key][1] != value:
                first_line = own_seen[key][0]
                raise InventoryError(
                    f"{loader.filename}:{line}: key {key!r} appears twice in one mapping (first at line "
                    f"{first_line}) with different values; YAML would silently keep only the last one. "
                    "Remove one of them."
                )
            own_seen[key] = (line, value)
        result[key] = value
        result.key_lines[key] = line
    return result


def _construct_vault(loader: _LineLoader, node: Node) -> dict[str, str]:
    # Ansible Vault values cannot be decrypted here; keep them opaque, the way
    # `ansible-inventory --list` prints them, so an inventory that uses them still loads.
    assert isinstance(node, ScalarNode)
    return {"__ansible_vault": str(loader.construct_scalar(node))}


def _construct_unsafe(loader: _LineLoader, node: Node) -> Any:
    # Ansible's !unsafe only means "do not template this"; we never template, so it is plain data.
    if isinstance(node, ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, SequenceNode):
        return loader.construct_sequence(node, deep=True)
    assert isinstance(node, MappingNode)
    return _construct_linemap(loader, node)


_LineLoader.add_constructor(_MAP_TAG, _construct_linemap)
_LineLoader.add_constructor("!vault", _construct_vault)
_LineLoader.add_constructor("!unsafe", _construct_unsafe)


def _check_expanded_size(node: Node, filename: str) -> None:
    """Refuse documents whose aliases expand past MAX_EXPANDED_NODES, or that contain themselves."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(n: Node) -> int:
        key = id(n)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise InventoryError(
                f"{filename}:{n.start_mark.line + 1}: a YAML alias refers to a node that contains it "
                "(a recursive structure); inventories cannot be recursive"
            )
        active.add(key)
        total = 1
        if isinstance(n, SequenceNode):
            for child in n.value:
                total += size(child)
                if total > MAX_EXPANDED_NODES:
                    break
        elif isinstance(n, MappingNode):
            for k, v in n.value:
                total += size(k) + size(v)
                if total > MAX_EXPANDED_NODES:
                    break
        active.discard(key)
        if total > MAX_EXPANDED_NODES:
            raise InventoryError(
                f"{filename}:{n.start_mark.line + 1}: YAML anchors and aliases here expand to more than "
                f"{MAX_EXPANDED_NODES:,} nodes (an alias bomb?); refusing to load it"
            )
        sizes[key] = total
        return total

    size(node)


def _marked_error(filename: str, exc: yaml.YAMLError) -> InventoryError:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        line = f"{mark.line + 1}" if mark is not None else "?"
        problem = exc.problem or "invalid YAML"
        if "could not determine a constructor for the tag" in problem:
            tag = problem.split("tag", 1)[1].strip().strip("'").replace("tag:yaml.org,2002:", "!!")
            return InventoryError(
                f"{filename}:{line}: YAML tag {tag!r} is not allowed; inventories are loaded with safe "
                "YAML only (plain mappings, lists, strings, numbers, booleans)"
            )
        context = f" ({exc.context})" if exc.context else ""
        return InventoryError(f"{filename}:{line}: bad YAML: {problem}{context}")
    return InventoryError(f"{filename}: bad YAML: {exc}")


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_text(root: yaml.Node, filename: str) -> None:
    """A `"\\ud800"` escape gives a lone UTF-16 surrogate, which no terminal, file or YAML writer
    can encode: refused here, naming its line, rather than crashing the table after the run."""
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:  # aliases share nodes
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            if isinstance(node.value, str) and _SURROGATE.search(node.value):
                raise InventoryError(f"{filename}:{node.start_mark.line + 1}: {node.value.encode('unicode_escape').decode()[:60]!r} "
                                     "holds a lone UTF-16 surrogate, which is not text; fix the escape")
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            stack.extend(n for pair in node.value for n in pair)


def load_yaml_text(text: str, filename: str) -> Any:
    """Parse one YAML document (JSON is YAML too). Every failure is an InventoryError naming the file."""
    loader = _LineLoader(text, filename)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expanded_size(node, filename)
        _check_text(node, filename)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise _marked_error(filename, exc) from None
    except RecursionError:
        raise InventoryError(f"{filename}: YAML is nested too deeply") from None
    finally:
        loader.dispose()


def load_yaml_file(path: str) -> Any:
    try:
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            raise InventoryError(
                f"{path}: file is {size:,} bytes; inventories over {MAX_FILE_BYTES:,} are refused"
            )
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except UnicodeDecodeError as exc:
        raise InventoryError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise InventoryError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return load_yaml_text(text, path)
