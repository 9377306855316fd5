"""Builds hal's compiled core (Cython 3) at install time: `pip install .` or `pip install -e .`.

Always: the recording, planning and Program modules of `hal` (no vendor headers needed). Where the
headers are found at build time, also each GPU backend's command-buffer module:
- backends.vulkan.command_buffer (with driver_calls and recording): the Khronos Vulkan headers and the loader
  to link (Debian: libvulkan-dev; or $VULKAN_SDK/include and $VULKAN_SDK/lib);
- backends.cuda_graph.command_buffer: cuda-bindings' cydriver.pxd and cuda.h (the build requirements bring
  both on Linux: cuda-bindings and nvidia-cuda-runtime; or $CUDA_HOME/include).
A backend module that cannot be built is left out with a warning, and that backend says so at run time
(`python -m hal info`). Nothing is compiled at import or first use.

A build in the source tree (`pip install -e .`, `python setup.py build_ext --inplace`) also builds the
benchmarks' compiled references (bench/native), which the wheel does not ship.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

CORE = ["hal.buffer", "hal.commands", "hal.program", "hal.accesses", "hal.hazards", "hal.races", "hal.dependencies",
        "hal.argument_checks", "hal.submit_checks", "hal.recorder", "hal.command_buffer", "hal.resubmission"]
SDK = os.environ.get("VULKAN_SDK")  # a Vulkan SDK's root: include/ and lib/ (libvulkan.so)
DIRECTIVES = {"language_level": 3, "cdivision": True, "annotation_typing": False,
              "embedsignature": True}


def extension(name: str, include_dirs: list[str] = (), libraries: list[str] = (),
              library_dirs: list[str] = ()) -> Extension:
    return Extension(name, [name.replace(".", "/") + ".pyx"], include_dirs=list(include_dirs), language="c++",
                     libraries=list(libraries), library_dirs=list(library_dirs),
                     # -O3, as CPython's own build: at -O2, hazards-mode end() runs 8% more instructions, a record 2%.
                     extra_compile_args=["-O3", "-std=c++17"])


def warn(message: str) -> None:
    print(f"hal build: {message}", file=sys.stderr)


def vulkan_headers() -> list[str] | None:
    candidates = [os.path.join(SDK, "include")] if SDK else []
    candidates += ["/usr/include", "/usr/local/include"]
    found = [d for d in candidates if os.path.exists(os.path.join(d, "vulkan", "vulkan_core.h"))]
    return found[:1] or None


def cuda_headers() -> list[str] | None:
    if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.bindings") is None:
        return None  # (find_spec of a submodule raises when its parent package is missing)
    bindings = Path(importlib.util.find_spec("cuda.bindings").origin).parent
    if not (bindings / "cydriver.pxd").exists():
        return None
    # cydriver.pxd declares every type of its CUDA release, so cuda.h must be at least as new: the newest found
    # first (nvidia-cuda-runtime brings one beside cuda-bindings; a toolkit has one).
    candidates = [Path(os.environ[v]) / "include" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    candidates.append(Path("/usr/local/cuda/include"))
    nvidia = importlib.util.find_spec("nvidia")
    for root in (nvidia.submodule_search_locations or []) if nvidia is not None else []:
        candidates += [p.parent for p in Path(root).glob("*/include/cuda.h")]
    found = sorted({(_cuda_version(d / "cuda.h"), str(d)) for d in candidates if (d / "cuda.h").exists()},
                   reverse=True)
    return [d for _, d in found] or None  # the others after: headers a package lacks (cudaProfiler.h) from a toolkit


def _cuda_version(header: Path) -> int:
    match = re.search(r"#define CUDA_VERSION (\d+)", header.read_text(errors="replace"))
    return int(match.group(1)) if match else 0


def compiled(extensions: list[Extension]) -> list[Extension]:
    return cythonize(extensions, compiler_directives=DIRECTIVES, include_path=["."], nthreads=os.cpu_count() or 1)


extensions = [extension(name) for name in CORE]
references = []  # the benchmarks' compiled references
vulkan = vulkan_headers()
vulkan_lib = [os.path.join(SDK, "lib")] if SDK else []
if vulkan is None:
    warn("no Vulkan headers (vulkan/vulkan_core.h): the Vulkan backend is left out; install libvulkan-dev "
         "(or set VULKAN_SDK) and reinstall to build it")
else:
    extensions += [extension(f"backends.vulkan.{name}", vulkan, ["vulkan"], vulkan_lib)
                   for name in ("driver_calls", "calls", "call_stream", "recording", "submitter", "command_buffer")]
    references.append(extension("bench.native.vulkan_reference", vulkan, ["vulkan"], vulkan_lib))
cuda = cuda_headers()
if cuda is None:
    warn("no cuda-bindings with cydriver.pxd, or no cuda.h: the CUDA backend is left out; install cuda-bindings "
         "and the CUDA headers (nvidia-cuda-runtime, or set CUDA_HOME) and reinstall to build it")
else:
    extensions += [extension(f"backends.cuda_graph.{name}", cuda)
                   for name in ("resubmission", "nodes", "graph_builder", "command_buffer")]
    references.append(extension("bench.native.cuda_reference", cuda))


class BuildInTree(build_ext):
    """build_ext that, building in the source tree, also builds the benchmarks' compiled references."""

    def finalize_options(self) -> None:
        in_tree = self.inplace or getattr(self, "editable_mode", False)
        if in_tree and (Path(__file__).parent / "bench" / "native").is_dir() and \
                not any(e.name.startswith("bench.") for e in self.distribution.ext_modules):
            self.distribution.ext_modules = self.distribution.ext_modules + compiled(references)
        super().finalize_options()


setup(ext_modules=compiled(extensions), cmdclass={"build_ext": BuildInTree})
