"""Native helpers: a C file of a backend, compiled with the system C compiler on first use, cached on
disk by content, and loaded with cffi's ABI mode.

A cffi call from Python costs about 0.7 µs on a small CPU, more than a driver spends on most command
calls; a backend that crosses into C once per batch of commands removes that cost. The libraries are
plain shared objects (no Python headers, no vendor headers), so any C compiler builds them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from hal.executable import DiskCache

log = logging.getLogger("hal.native")


class NativeLibrary:
    """A loaded library and the cffi instance that calls it (`lib.<function>`)."""

    __slots__ = ("ffi", "lib", "path")

    def __init__(self, path: str, declarations: str) -> None:
        import cffi

        self.ffi = cffi.FFI()
        self.ffi.cdef(declarations)
        self.lib: Any = self.ffi.dlopen(path)
        self.path = path


def load(source: Path, declarations: str, what: str) -> NativeLibrary | None:
    """`source` built and loaded, or None (and why, logged) when no C compiler or no cffi is here."""
    if importlib.util.find_spec("cffi") is None:
        log.warning("cffi is not installed: %s falls back to Python (slower)", what)
        return None
    compiler = shlex.split(os.environ.get("CC", "")) or [c for c in (shutil.which("cc") or shutil.which("gcc"),) if c]
    if not compiler:
        log.warning("no C compiler found: %s falls back to Python (slower)", what)
        return None
    key = hashlib.sha256(source.read_bytes() + " ".join(compiler).encode()).hexdigest()[:32] + ".so"
    cache = DiskCache("native")
    cached = None if cache.directory is None else cache.directory / key
    try:
        if cached is not None and cached.exists():
            return NativeLibrary(str(cached), declarations)
        with tempfile.TemporaryDirectory(prefix="hal-native-") as tmp:
            out = Path(tmp) / key
            done = subprocess.run(compiler + ["-O2", "-shared", "-fPIC", "-o", str(out), str(source)],
                                  capture_output=True, text=True)
            if done.returncode:
                log.warning("%s did not compile; falling back to Python:\n%s", what, done.stderr)
                return None
            if cached is not None:
                cache.put(key, out.read_bytes())
                if cached.exists():
                    return NativeLibrary(str(cached), declarations)
            return NativeLibrary(str(out), declarations)  # loaded before the directory goes: Linux keeps it
    except OSError as e:  # no such compiler, or a library the loader refuses (a noexec directory, say)
        log.warning("%s cannot be built or loaded (%s); falling back to Python", what, e)
        return None
