"""Which `ansible_connection` values this process can run, as the transport registry says.

The transports sit a layer above the inventory, so the inventory cannot import them; the
transport registry (orchestrator/transport/factory.py) installs itself here instead, and the
package root imports it, so every user of the inventory sees the registered transports.
"""

from __future__ import annotations

from typing import Protocol


class ConnectionBook(Protocol):
    def canonical(self, name: str) -> str | None:
        """The transport's own name for `name` (an alias such as paramiko -> ssh); None: unknown."""

    def known(self) -> list[str]:
        """Every accepted name, aliases included, in registration order."""


_book: ConnectionBook | None = None


def install(book: ConnectionBook) -> None:
    global _book
    _book = book


def canonical(name: str) -> str | None:
    return _book.canonical(name) if _book is not None else None


def known() -> list[str]:
    return _book.known() if _book is not None else []
