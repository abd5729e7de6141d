"""ssh_config files and private keys, each read and parsed once per process while unchanged.

A fleet run opens thousands of connections; re-reading ~/.ssh/config and re-parsing a key for
each costs more than the connection's own crypto. Every cache entry is keyed by the file's
(mtime, size), so an edited file is read again.
"""

from __future__ import annotations

import os
import threading

import paramiko
from fabric import Config

from orchestrator.transport.base import FailureKind, TransportError
from orchestrator.transport.ssh_errors import one_line

_config_lock = threading.Lock()
# config file paths -> (their (mtime, size) when parsed, the parsed ssh_config)
_config_cache: dict[tuple[str, ...], tuple[tuple[tuple[int, int] | None, ...], paramiko.SSHConfig]] = {}


def _stat_sig(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def fabric_config(ssh_config: str | None) -> Config:
    """A Fabric Config of its own over an ssh_config parsed once per process.

    Like `ssh -F`, an explicit file replaces ~/.ssh/config and /etc/ssh/ssh_config; without one
    both are read (user first, so its settings win). Giving Fabric the parsed object also keeps it
    from re-reading the files every time a ProxyJump hop clones the config.

    The Config itself is never shared between connections: Fabric's Connection() stores a setting
    into its Config (inline_ssh_env), and invoke rebuilds the whole Config on every store, so a
    shared one is briefly empty while another thread reads it (seen as "No attribute or config key
    found for 'gateway'" at 500 hosts). A fresh lazy Config costs ~0.1 ms; the parse is what is shared.
    """
    return Config(ssh_config=parsed_ssh_config(ssh_config), lazy=True)


def parsed_ssh_config(ssh_config: str | None) -> paramiko.SSHConfig:
    """The ssh_config files, parsed once per process while they are unchanged (read-only after)."""
    if ssh_config is not None:
        paths: tuple[str, ...] = (os.path.expanduser(ssh_config),)
        if not os.path.exists(paths[0]):  # `-F /dev/null` is the usual way to read no config
            raise TransportError(FailureKind.CONFIG, f"ssh config file {ssh_config} does not exist; fix --ssh-config")
    else:
        paths = (os.path.expanduser("~/.ssh/config"), "/etc/ssh/ssh_config")
    sigs = tuple(_stat_sig(p) for p in paths)
    with _config_lock:
        cached = _config_cache.get(paths)
        if cached is not None and cached[0] == sigs:
            return cached[1]
        parsed = paramiko.SSHConfig()
        for path, sig in zip(paths, sigs):
            if sig is None:
                continue
            try:
                with open(path) as f:
                    parsed.parse(f)
            except (OSError, UnicodeDecodeError, ValueError) as e:
                raise TransportError(
                    FailureKind.CONFIG, f"cannot read ssh config {path}: {one_line(e)}; fix or remove it"
                ) from e
        _config_cache[paths] = (sigs, parsed)
        return parsed


_key_lock = threading.Lock()
# private key path -> ((mtime, size) when loaded, the key or None when Paramiko must load it itself)
_key_cache: dict[str, tuple[tuple[int, int] | None, paramiko.PKey | None]] = {}


def loaded_key(path: str) -> paramiko.PKey | None:
    """The private key at `path`, read and parsed once per process while the file is unchanged.

    Given only key_filename, Paramiko re-reads the file for every connection and tries RSA, then
    ECDSA, then Ed25519 parsing on it (an ed25519 key costs two failed parses each time). None when
    Paramiko's own loading must run instead, so its behaviour and errors stay exactly as before:
    a passphrase-protected key (it raises PasswordRequiredException, classified as auth), an
    unreadable or unknown key, or a key with a `-cert.pub` certificate beside it (Paramiko pairs them).
    """
    sig = _stat_sig(path)
    with _key_lock:
        cached = _key_cache.get(path)
        if cached is not None and cached[0] == sig:
            return cached[1]
    key: paramiko.PKey | None = None
    if sig is not None and not os.path.exists(path + "-cert.pub"):
        try:
            key = paramiko.PKey.from_path(path)
        except Exception:  # any failure: leave it to Paramiko's path, which reports it properly
            key = None
    with _key_lock:
        _key_cache[path] = (sig, key)
    return key
