"""Privilege escalation: `sudo -n`, which fails at once where sudo would ask for a password.

A fleet run is unattended; a prompt nobody answers would hold the host until its deadline, so we
ask sudo never to prompt and turn its refusal into a one-line reason.
"""

from __future__ import annotations

import shlex


def wrap_command(command: str, become: bool, become_user: str | None = None) -> str:
    """`command` as root (or `become_user`) via `sudo -n`, quoted so the shell sees it unchanged."""
    if not become:
        return command
    parts = ["sudo", "-n"]
    if become_user:
        parts += ["-u", shlex.quote(become_user)]
    parts += ["--", "/bin/sh", "-c", shlex.quote(command)]
    return " ".join(parts)


_PASSWORD_MARKERS = ("a password is required", "a terminal is required", "no tty present", "askpass")


def become_failure(exit_code: int | None, stderr: bytes) -> str | None:
    """Why `sudo -n` refused, as a one-line reason with what to do, or None if sudo was not the problem."""
    if exit_code in (0, None):
        return None
    lines = [ln.strip().lower() for ln in stderr.decode("utf-8", "replace").splitlines()]
    sudo_lines = [ln for ln in lines if ln.startswith("sudo:")]
    if exit_code == 127 and any("sudo" in ln and "not found" in ln for ln in lines):
        return "sudo is not installed on the host; install it or run without become"
    if any(m in ln for ln in sudo_lines for m in _PASSWORD_MARKERS):
        return (
            "sudo wants a password on the host (sudo -n does not prompt); allow this user passwordless "
            "sudo (NOPASSWD) or run without become"
        )
    if any("not in the sudoers file" in ln or "not allowed to" in ln for ln in sudo_lines):
        return "the user may not use sudo on the host; add it to sudoers or run without become"
    return None
