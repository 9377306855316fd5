"""The disk cache can neither break a load nor run someone else's code (issue 51): entries verify against their key
and content, damaged or refused ones are evicted with a warning and built again, folders others may write (or that
belong to someone else) are not used, and processes filling one cache at once never see a damaged entry."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from hal import disk_cache
from hal.disk_cache import CacheWarning, DiskCache

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("HAL_CACHE_DIR", str(folder))
    monkeypatch.setattr(disk_cache, "_refused", set())
    return folder


def test_round_trip_modes_and_location(cache_dir, tmp_path, monkeypatch):
    cache = DiskCache("nvrtc")
    assert cache.get("abc") is None
    cache.put("abc", b"binary")
    assert cache.get("abc") == b"binary"
    entry = cache_dir / "nvrtc-v1" / "abc"
    assert entry.read_bytes().endswith(b"binary") and entry.read_bytes().startswith(disk_cache.MAGIC)
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert stat.S_IMODE((cache_dir / "nvrtc-v1").stat().st_mode) == 0o700
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700
    assert not [p for p in os.listdir(cache_dir / "nvrtc-v1") if p.startswith(".tmp")]
    monkeypatch.delenv("HAL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert DiskCache("glsl").folder() == tmp_path / "xdg" / "hal" / "glsl-v1"
    monkeypatch.setenv("HAL_CACHE_DIR", "")
    off = DiskCache("glsl")
    off.put("k", b"x")
    assert off.folder() is None and off.get("k") is None


def _damages(cache: DiskCache, folder: Path) -> dict[str, bytes]:
    """What a full disk, a crash mid-copy, a stray tool or a misplaced copy leave under key "k"."""
    cache.put("other", b"a valid entry of another kernel")
    good = (folder / "k").read_bytes()
    return {"random bytes": os.urandom(100), "truncated": good[:len(good) // 2], "empty": b"",
            "another key's entry": (folder / "other").read_bytes(), "content changed": good[:-1] + b"X"}


def test_a_damaged_entry_is_evicted_with_a_warning_and_built_again(cache_dir):
    cache = DiskCache("glsl")
    cache.put("k", b"the compiled kernel")
    folder = cache_dir / "glsl-v1"
    for what, damaged in _damages(cache, folder).items():
        (folder / "k").write_bytes(damaged)
        builds: list[int] = []

        def build(builds: list[int] = builds) -> bytes:
            builds.append(1)
            return b"the compiled kernel"

        with pytest.warns(CacheWarning, match=f"evicted the cache entry {folder / 'k'}: its digest does not match"):
            got = cache.load("k", build, lambda data: data)
        assert got == b"the compiled kernel" and builds == [1], what
        assert cache.get("k") == b"the compiled kernel", what  # stored anew, and verifies


def test_an_entry_the_validator_or_driver_refuses_is_built_again_once(cache_dir):
    cache = DiskCache("cuda")
    cache.put("k", b"stale binary")

    def use(data: bytes) -> str:
        if data == b"stale binary":
            raise RuntimeError("the driver refused it")
        return data.decode()

    with pytest.warns(CacheWarning, match="it was refused: RuntimeError: the driver refused it"):
        assert cache.load("k", lambda: b"fresh binary", use) == "fresh binary"
    assert cache.get("k") == b"fresh binary"
    with pytest.raises(RuntimeError, match="refused"):  # a fresh build the driver refuses: raised, not stored
        cache.load("j", lambda: b"stale binary", use)
    assert cache.get("j") is None


@pytest.mark.skipif(os.name != "posix", reason="folder ownership and modes are POSIX's")
def test_a_folder_others_may_write_is_not_used(cache_dir):
    cache_dir.mkdir(mode=0o700)
    os.chmod(cache_dir, 0o777)
    cache = DiskCache("glsl")
    with pytest.warns(CacheWarning, match=f"not using the cache folder {cache_dir}: its group or others may write "
                                          f"it \\(mode 777\\)"):
        cache.put("k", b"x")
    assert not (cache_dir / "glsl-v1" / "k").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once
        assert cache.get("k") is None and cache.load("k", lambda: b"built", lambda d: d) == b"built"
    os.chmod(cache_dir, 0o700)
    (cache_dir / "glsl-v1").mkdir(exist_ok=True)
    os.chmod(cache_dir / "glsl-v1", 0o770)  # the namespace's folder counts too
    with pytest.warns(CacheWarning, match="its group or others may write it"):
        assert DiskCache("glsl").folder() is None


@pytest.mark.skipif(os.name != "posix", reason="folder ownership is POSIX's")
def test_a_folder_of_another_user_is_not_used(cache_dir, monkeypatch):
    cache_dir.mkdir(mode=0o700)
    me = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: me + 1)  # the folder now belongs to someone else, as hal sees it
    with pytest.warns(CacheWarning, match=f"it belongs to user {me}, not to this user \\({me + 1}\\)"):
        assert DiskCache("cuda").folder() is None


RACE = """
import sys, hashlib, warnings
from hal.disk_cache import CacheWarning, DiskCache
warnings.simplefilter("error", CacheWarning)  # an evicted entry would mean one was seen damaged
cache = DiskCache("race")
for i in range(50):
    key = f"k{(i * 7 + int(sys.argv[1])) % 10}"
    want = hashlib.sha256(key.encode()).digest() * 2000
    got = cache.load(key, lambda: want, lambda data: data)
    assert got == want, (key, len(got))
print("ok")
"""


def test_processes_filling_one_cache_at_once_never_see_a_damaged_entry(cache_dir):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    runs = [subprocess.Popen([sys.executable, "-c", RACE, str(n)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for n in range(4)]
    for run in runs:
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0 and out.strip() == "ok", err
    assert sorted(p.name for p in (cache_dir / "race-v1").iterdir()) == [f"k{i}" for i in range(10)]
    for i in range(10):
        assert DiskCache("race").get(f"k{i}") is not None


def test_statistics_and_clear(cache_dir):
    DiskCache("glsl").put("a", b"12345")
    DiskCache("cuda").put("b", b"123")
    top, entries, size = disk_cache.statistics()
    assert (top, entries) == (cache_dir, 2) and size == 8 + 2 * disk_cache.HEADER
    assert disk_cache.clear() == 2
    assert disk_cache.statistics()[1:] == (0, 0)
