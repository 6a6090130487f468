"""A virtual environment with HuggingFace's libraries from PyPI, made once and reused by the golden tests
that check Strata against them (as bench/train_throughput.py does for current PyTorch).

`reexec_in_venv(directory, packages, probe)` returns when the running Python already imports what `probe`
imports; otherwise it makes the venv (under a lock, since CTest runs tests side by side), installs the
packages and runs the calling script again under the venv's Python. With `system_site_packages` the venv
also sees the running Python's packages (Debian's python3-torch for transformers). When the venv cannot be
made (no python3-venv, no network) the test exits with SKIP_RETURN_CODE, saying why.
"""

import fcntl
import os
import subprocess
import sys

SKIP_RETURN_CODE = 77
DEFAULT_VENV = "/var/tmp/strata-test-hf"


def _imports(python, probe):
    return subprocess.run([python, "-c", probe], capture_output=True).returncode == 0


def _skip(reason):
    print(f"SKIPPED: {reason}", flush=True)
    sys.exit(SKIP_RETURN_CODE)


def reexec_in_venv(directory, packages, probe, system_site_packages=False):
    try:
        exec(probe, {})
        return
    except ImportError:
        pass
    python = os.path.join(directory, "bin", "python")
    os.makedirs(os.path.dirname(directory) or ".", exist_ok=True)
    with open(directory + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (os.path.exists(python) and _imports(python, probe)):
            print(f"making {directory}: python3 -m venv, pip install {' '.join(packages)}", flush=True)
            options = ["--system-site-packages"] if system_site_packages else []
            made = subprocess.run([sys.executable, "-m", "venv", *options, directory], capture_output=True, text=True)
            if made.returncode != 0:
                _skip(f"python3 -m venv {directory} failed (apt-get install python3-venv): {made.stderr.strip()}")
            installed = subprocess.run([python, "-m", "pip", "install", "-q", *packages], capture_output=True, text=True)
            if installed.returncode != 0 or not _imports(python, probe):
                _skip(f"pip install {' '.join(packages)} into {directory} failed (no PyPI?): "
                      f"{installed.stderr.strip()[-2000:]}")
    os.execv(python, [python, *sys.argv])
