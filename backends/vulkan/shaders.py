"""The shader tools, run as subprocesses: glslc (GLSL -> SPIR-V, in hal.disk_cache), spirv-val, spirv-link
and spirv-dis. Their messages come back verbatim in CompileError.log.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from hal.disk_cache import DiskCache
from hal.errors import CompileError, UnsupportedError

PACKAGES = {"glslc": "glslc", "spirv-val": "spirv-tools", "spirv-link": "spirv-tools", "spirv-dis": "spirv-tools"}
_glsl_cache = DiskCache("glsl")
T = TypeVar("T")


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        hint = ("; or set HAL_VULKAN_DISABLE_SHADER_VALIDATION=1 to skip the check" if name == "spirv-val" else "")
        raise UnsupportedError(f"{name} is not on PATH (Debian: apt-get install {PACKAGES[name]}){hint}")
    return path


def _run(args: list[str], what: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(args, input=stdin, capture_output=True, timeout=300)
    except subprocess.TimeoutExpired as e:
        raise CompileError(f"{what}: {Path(args[0]).name} ran for more than 300 s") from e


@functools.lru_cache(maxsize=1)
def glslc_version() -> str:
    return _run([tool("glslc"), "--version"], "glslc --version").stdout.decode(errors="replace")


def compile_glsl(code: str, target_env: str, name: str) -> bytes:
    """Valid SPIR-V for GLSL compute shader `code`, kept in the disk cache by content, target and compiler version
    (an entry spirv-val refuses is compiled again)."""
    key = hashlib.sha256("\0".join((code, target_env, glslc_version())).encode()).hexdigest() + ".spv"

    def valid(spirv: bytes) -> bytes:
        validate(spirv, target_env, f"export {name!r}")
        return spirv

    return _glsl_cache.load(key, lambda: _glslc(code, target_env, name), valid)


def _glslc(code: str, target_env: str, name: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="hal-glsl-") as tmp:
        src, out = Path(tmp) / f"{name}.comp", Path(tmp) / f"{name}.spv"
        src.write_text(code)
        done = _run([tool("glslc"), f"--target-env={target_env}", "-O", "-o", str(out), str(src)], f"glsl {name!r}")
        if done.returncode:
            raise CompileError(f"glslc rejected the GLSL of export {name!r}",
                               (done.stderr + done.stdout).decode(errors="replace").replace(str(src), f"{name}.comp"))
        return out.read_bytes()


def _with_files(modules: list[bytes], run: Callable[[list[str], str], T]) -> T:
    """`run(paths, directory)` with the modules written to a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="hal-spirv-") as tmp:
        paths = []
        for i, m in enumerate(modules):
            p = Path(tmp) / f"module{i}.spv"
            p.write_bytes(m)
            paths.append(str(p))
        return run(paths, tmp)


def validate(spirv: bytes, target_env: str, what: str) -> None:
    """Raise CompileError with spirv-val's message if the module is not valid for `target_env`."""
    if os.environ.get("HAL_VULKAN_DISABLE_SHADER_VALIDATION"):
        return
    done = _with_files([spirv], lambda p, _: _run([tool("spirv-val"), "--target-env", target_env, p[0]], what))
    if done.returncode:
        raise CompileError(f"{what}: spirv-val rejected the SPIR-V module",
                           (done.stdout + done.stderr).decode(errors="replace").strip())


def link(modules: list[bytes], target_env: str, what: str) -> bytes:
    """One module from a main module and the modules it imports functions from."""
    def run(paths: list[str], tmp: str) -> tuple[subprocess.CompletedProcess, bytes]:
        out = Path(tmp) / "linked.spv"
        done = _run([tool("spirv-link"), "--target-env", target_env, "-o", str(out)] + paths, what)
        return done, (b"" if done.returncode else out.read_bytes())

    done, linked = _with_files(modules, run)
    if done.returncode:
        raise CompileError(f"{what}: spirv-link could not link the module with its imports",
                           (done.stdout + done.stderr).decode(errors="replace").strip())
    return linked


def disassemble(spirv: bytes) -> str:
    done = _with_files([spirv], lambda p, _: _run([tool("spirv-dis"), p[0]], "spirv-dis"))
    return (done.stdout if not done.returncode else done.stderr).decode(errors="replace")


def save_for_debugging(stem: str, spirv: bytes) -> None:
    """With HAL_VULKAN_DEBUG_SHADER_SAVEPATH set, write the module and its disassembly there."""
    directory = os.environ.get("HAL_VULKAN_DEBUG_SHADER_SAVEPATH")
    if not directory:
        return
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    (path / f"{stem}.spv").write_bytes(spirv)
    try:
        (path / f"{stem}.spvasm").write_text(disassemble(spirv))
    except UnsupportedError as e:  # no spirv-dis: keep the binary, say why there is no text
        (path / f"{stem}.spvasm").write_text(f"; {e}\n")
