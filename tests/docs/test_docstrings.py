"""The API's docstrings (issue 45, item 3): Google style, every argument of every public function and method of
`hal` named under `Args:`, and every example (`>>>`) runs as written on the host device."""

from __future__ import annotations

import doctest
import enum
import inspect
import re

import numpy as np
import pytest

import hal
import hal.tracing

# Public methods that backends and hal's own modules call, not users: the backend contract (hal.Device's
# docstring lists it), documented in prose.
CONTRACT = {
    "Device": {"fail_signals", "pass_failure_on", "check_open", "wait_for_queue", "order_host_access", "waiting",
               "buffer_released", "executable_released", "new_communicator"},
    "CommandBuffer": {"accepts", "submitted", "prepare_submit", "prepare_constants"},
    "Semaphore": {"fail", "raise_failure", "check_queue_signal"},
    "Communicator": {"check_open", "order_ref", "release_tokens"},
    "ExecutableSource": {"for_driver"},
    "Capabilities": {"check_within", "with_overrides"},
    "Executable": {"export"},
    "Driver": {"devices", "create_device"},
}
KERNELS = hal.ExecutableSource.python(
    {"add": lambda ctx: None, "countdown": lambda ctx: ctx.binding(0, np.uint32).__setitem__(0, 0)},
    [hal.Export("add", bindings=3, constants=1, workgroup_size=64), hal.Export("countdown", bindings=2)])


def public_callables():
    """(qualified name, object) of every public function of hal and public method of its public classes."""
    for name in hal.__all__:
        obj = getattr(hal, name)
        if not inspect.isclass(obj):
            yield f"hal.{name}", obj
            continue
        if issubclass(obj, (BaseException, enum.Enum)):
            continue
        for klass in obj.__mro__:
            if not klass.__module__.startswith("hal"):
                continue
            for attr, value in vars(klass).items():
                if attr.startswith("_") or attr in CONTRACT.get(name, ()):
                    continue
                if isinstance(value, (classmethod, staticmethod)):
                    value = value.__func__
                if callable(value) and not isinstance(value, type):
                    yield f"hal.{name}.{attr}", value
    for name in ("trace", "trace_recording", "draw_program"):
        yield f"hal.tracing.{name}", getattr(hal.tracing, name)


def parameters(fn) -> list[str]:
    """Its parameters but self: from its signature, or from the one Cython embeds as the docstring's first line."""
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        first = (fn.__doc__ or "").splitlines()[0] if fn.__doc__ else ""
        found = re.match(r"\w+\((.*)\)", first)
        names = [re.split(r"[:=]", p)[0].strip(" *") for p in found.group(1).split(",")] if found else []
    return [n for n in names if n and n not in ("self", "cls")]


CALLABLES = dict(public_callables())


@pytest.mark.parametrize("name", sorted(CALLABLES))
def test_every_argument_is_documented(name):
    fn = CALLABLES[name]
    doc = inspect.getdoc(fn) or ""
    assert doc.strip(), f"{name} has no docstring"
    wanted = parameters(fn)
    if not wanted:
        return
    assert "\nArgs:\n" in doc, f"{name}: no Args: section for {wanted}"
    args = doc.split("\nArgs:\n", 1)[1].split("\n\n", 1)[0]
    documented = set()
    for line in args.splitlines():
        found = re.match(r"\s{4}([\w, *]+?):", line)
        if found:
            documented |= {n.strip(" *") for n in found.group(1).split(",")}
    missing = [n for n in wanted if n not in documented]
    assert not missing, f"{name}: Args: does not name {missing}"


def example_namespace() -> dict:
    dev = hal.create_device("host")
    exe = dev.load_executable(KERNELS)
    return {"hal": hal, "np": np, "dev": dev, "exe": exe, "buf": dev.allocate(16),
            "a": dev.allocate(4096), "b": dev.allocate(4096), "out": dev.allocate(4096),
            "flag": dev.upload(np.array([1], np.uint32)), "count": dev.allocate(4),
            "cb": dev.create_command_buffer(mode="reusable")}


EXAMPLES = sorted({name for name, fn in CALLABLES.items() if ">>>" in (fn.__doc__ or "")} |
                  {f"hal.{n}" for n in hal.__all__ if ">>>" in (getattr(hal, n).__doc__ or "")})


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_example_runs(name):
    obj = CALLABLES.get(name) or getattr(hal, name.split(".", 1)[1])
    scope = example_namespace()
    try:
        for test in doctest.DocTestFinder(recurse=False).find(obj, name, globs=scope):
            result = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE).run(test)
            assert result.failed == 0, f"{name}'s example failed (its output is above)"
    finally:
        scope["dev"].close()


def test_there_are_examples():
    assert len(EXAMPLES) >= 10, EXAMPLES
