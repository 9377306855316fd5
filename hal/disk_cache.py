"""Compiled binaries on disk (SPIR-V from GLSL, cubins from CUDA C): a cache that can neither break a load nor run
someone else's code.

Where: `$HAL_CACHE_DIR`, else `$XDG_CACHE_HOME/hal` (`~/.cache/hal`); an empty HAL_CACHE_DIR disables it. One folder
per namespace and format version ("glsl-v1", "cuda-v1"), one file per entry, named by its key (a digest of the
source, the target and the compiler's identity).

- Integrity: an entry holds a header (a magic, the format version) and the SHA-256 of the format version, its key
  and its content, then the content. An entry that does not verify (damaged by a full disk, a crash, a stray tool,
  or copied from another key) is evicted with a warning naming the file, and the binary is built again; so is one
  that verifies but that the validator or the driver refuses (`load`).
- Ownership (POSIX): hal creates its folders 0700 and uses one only if the current user owns it and neither group
  nor others may write it, checking the cache's root too; otherwise it warns once and compiles without the disk
  cache. So another user cannot plant a binary that hal would run.
- Concurrency: entries are written 0600 to a temporary file and renamed into place, so processes filling one cache
  at once never see half an entry, and the digest catches anything else.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

MAGIC = b"HALCACHE"
FORMAT_VERSION = 1
HEADER = len(MAGIC) + 4 + 32  # magic, format version (little-endian), SHA-256
T = TypeVar("T")

_refused: set[Path] = set()  # folders warned about once
_lock = threading.Lock()


class CacheWarning(UserWarning):
    """The disk cache evicted a damaged or refused entry, or will not use a folder that others may write."""


def root() -> Path | None:
    """The cache's root folder, or None when HAL_CACHE_DIR is set empty (no disk cache)."""
    configured = os.environ.get("HAL_CACHE_DIR")
    if configured is not None:
        return Path(configured) if configured else None
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "hal"


def digest(key: str, content: bytes) -> bytes:
    return hashlib.sha256(FORMAT_VERSION.to_bytes(4, "little") + key.encode() + b"\0" + content).digest()


def usable(folder: Path) -> bool:
    """Whether hal may read and write `folder` (made 0700 if missing): owned by this user and writable by no one
    else (POSIX). Warns once per folder when not."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        found = os.stat(folder)
    except OSError as e:
        return _refuse(folder, f"it cannot be made or read ({e})")
    if not stat.S_ISDIR(found.st_mode):
        return _refuse(folder, "it is not a folder")
    if os.name != "posix":
        return True
    if found.st_uid != os.getuid():
        return _refuse(folder, f"it belongs to user {found.st_uid}, not to this user ({os.getuid()})")
    if found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return _refuse(folder, f"its group or others may write it (mode {stat.S_IMODE(found.st_mode):o})")
    return True


def _refuse(folder: Path, why: str) -> bool:
    with _lock:
        if folder not in _refused:
            _refused.add(folder)
            warnings.warn(f"hal: not using the cache folder {folder}: {why}; compiling without the disk cache (make "
                          f"it yours with mode 700, or set HAL_CACHE_DIR to a folder of your own)", CacheWarning,
                          stacklevel=4)
    return False


class DiskCache:
    """One namespace of the disk cache ("glsl", "cuda"); see the module's docstring."""

    __slots__ = ("namespace",)

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def folder(self) -> Path | None:
        """The namespace's folder if hal may use it now (HAL_CACHE_DIR is read at each use)."""
        top = root()
        if top is None:
            return None
        folder = top / f"{self.namespace}-v{FORMAT_VERSION}"  # (entries of another format are never read)
        return folder if usable(top) and usable(folder) else None

    def get(self, key: str) -> bytes | None:
        """The content of entry `key`, or None: no entry, no usable folder, or an entry that did not verify (evicted,
        with a warning)."""
        folder = self.folder()
        if folder is None:
            return None
        path = folder / key
        try:
            data = path.read_bytes()
        except OSError:
            return None
        content = data[HEADER:]
        if data[:len(MAGIC)] != MAGIC or int.from_bytes(data[len(MAGIC):len(MAGIC) + 4], "little") != \
                FORMAT_VERSION or data[len(MAGIC) + 4:HEADER] != digest(key, content):
            self.evict(key, "its digest does not match its key and content (a damaged or misplaced entry)")
            return None
        return content

    def put(self, key: str, content: bytes) -> None:
        """Write entry `key` (0600, atomically); a failure to write only loses the entry."""
        folder = self.folder()
        if folder is None:
            return
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")  # (mode 0600)
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + FORMAT_VERSION.to_bytes(4, "little") + digest(key, content) + content)
            os.replace(tmp, folder / key)
            tmp = None
        except OSError:
            pass
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)

    def evict(self, key: str, why: str) -> None:
        """Remove entry `key`, warning why and naming the file."""
        folder = self.folder()
        if folder is None:
            return
        path = folder / key
        with contextlib.suppress(OSError):
            path.unlink()
        warnings.warn(f"hal: evicted the cache entry {path}: {why}; building it again from source", CacheWarning,
                      stacklevel=3)

    def load(self, key: str, build: Callable[[], bytes], use: Callable[[bytes], T]) -> T:
        """`use(content)` of entry `key`, built by `build()` and stored when missing. A cached entry that `use`
        refuses (the validator, the driver) is evicted and built again, once; what `use` raises then is raised."""
        content = self.get(key)
        if content is not None:
            try:
                return use(content)
            except Exception as e:  # noqa: BLE001 - whatever refused it, the source builds it anew
                self.evict(key, f"it was refused: {type(e).__name__}: {e}")
        content = build()
        result = use(content)
        self.put(key, content)
        return result


def statistics() -> tuple[Path | None, int, int]:
    """(root, entries, bytes) of the disk cache; (None, 0, 0) when it is disabled."""
    top = root()
    if top is None or not top.is_dir():
        return top, 0, 0
    entries = size = 0
    for path in top.glob("*/*"):
        if path.is_file() and not path.name.startswith(".tmp-"):
            entries += 1
            size += path.stat().st_size
    return top, entries, size


def clear() -> int:
    """Remove every entry of the disk cache (its folders stay); returns how many were removed."""
    top = root()
    if top is None or not top.is_dir():
        return 0
    removed = 0
    for path in top.glob("*/*"):
        if path.is_file():
            with contextlib.suppress(OSError):
                path.unlink()
                removed += 1
    return removed
