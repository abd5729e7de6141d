"""Stand-in for the pip bootstrap script `ansible-test --requirements` downloads from
ci-files.testing.ansible.com (not a package index, so not reachable where only the index is):
the same command line, `[pip options] pip==X [packages] [--no-setuptools] [--no-wheel]`, served by
the interpreter's own ensurepip, then pip from the configured package index.

ansible-test runs it from ~/.ansible/test/cache/get_pip_<version>.py when that file exists;
tests/api/test_ansible_sanity.py puts it there (under its own HOME)."""

import subprocess
import sys

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", *args])
