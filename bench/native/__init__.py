"""The benchmarks' compiled references: the same driver calls hal makes, with nothing of hal's in between.

Built with the source tree (`pip install -e .` or `python setup.py build_ext --inplace`), never shipped in the
wheel. A benchmark whose reference is not built leaves that competitor out and says so.
"""

import importlib
from types import ModuleType


def reference(name: str) -> ModuleType | None:
    """The compiled reference module `name` (cuda_reference, vulkan_reference), or None if it is not built."""
    try:
        return importlib.import_module(f"bench.native.{name}")
    except ImportError:
        return None
