"""Without any optional package (cuda-python, vulkan, cffi, torch, cupy, matplotlib, tqdm): every package,
benchmark and test module imports, the tests that need one skip naming it, and `python -m hal info` says
why each driver is unavailable. Each check runs in a fresh interpreter that refuses to import them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OPTIONAL = ("cuda", "vulkan", "cffi", "_cffi_backend", "torch", "cupy", "matplotlib", "tqdm")
# Prepended to each child's code: a finder that answers "No module named ..." for the optional packages,
# as on a machine where they are not installed.
WITHOUT_OPTIONAL = f"""
import importlib.abc, sys
OPTIONAL = {OPTIONAL!r}
class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in OPTIONAL:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
for module in [m for m in sys.modules if m.partition(".")[0] in OPTIONAL]:
    del sys.modules[module]
sys.meta_path.insert(0, NotInstalled())
"""
MODULES = ["hal", "hal.__main__", "backends", "backends.host", "backends.cuda_graph", "backends.vulkan",
           "bench", "bench.__main__", "bench.cuda", "bench.vulkan", "bench.record",
           "bench.scaling", "bench.plots", "tests.kernels"]


def without_optional(code: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HAL_REQUIRE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", WITHOUT_OPTIONAL + code, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_every_package_and_benchmark_module_imports():
    done = without_optional(f"import importlib\nfor m in {MODULES!r}: importlib.import_module(m)\n"
                            "try:\n    import cuda.bindings\nexcept ModuleNotFoundError:\n    print('refused')\n")
    assert (done.returncode, done.stdout) == (0, "refused\n"), done.stderr


def test_the_whole_suite_collects():
    done = without_optional("import pytest\nsys.exit(pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', "
                            "'tests']))")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "error" not in done.stdout.splitlines()[-1]


def test_backend_tests_skip_saying_which_package_is_missing():
    done = without_optional("import pytest\nsys.exit(pytest.main(['-q', '-rs', '-p', 'no:cacheprovider', "
                            "'tests/cuda_graph', 'tests/vulkan', 'tests/conformance/test_buffers.py', "
                            "'tests/bench/test_suite.py::test_cuda_figures_draw_from_a_result']))")
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" in done.stdout.splitlines()[-1]  # the host cases of test_buffers ran
    skips: dict[tuple[str, str], int] = {}  # (where, reason) -> how many
    for count, where, reason in re.findall(r"^SKIPPED \[(\d+)\] ([^:]+):\d+: (.*)$", done.stdout, re.M):
        skips[where, reason] = skips.get((where, reason), 0) + int(count)
    missing = {name: f"the {name} driver is unavailable: the Python package {name!r} is not installed: "
                     f"pip install 'hal-command-buffers[{name}]'" for name in ("cuda", "vulkan")}
    # Whole modules skip at import, before they import the backend; marked cases skip one by one. (A module that
    # needs no driver, such as the PTX reflection's, runs.)
    for name, folder in (("cuda", "cuda_graph"), ("vulkan", "vulkan")):
        modules = sum("backend_or_skip(" in p.read_text() for p in (ROOT / "tests" / folder).glob("test_*.py"))
        assert [n for (where, reason), n in skips.items() if where == "tests/conftest.py"
                and reason.startswith(missing[name])] == [modules], skips
    for _where, reason in skips:
        assert (missing["cuda"] in reason or missing["vulkan"] in reason
                or "the figures need matplotlib" in reason), reason


def test_info_says_why_each_driver_is_unavailable():
    done = without_optional("from hal.__main__ import main\nsys.exit(main(['info']))")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    lines = [line for line in lines if line.startswith(("cuda:", "vulkan:", "host:"))]
    assert lines[0] == ("cuda: the cuda driver is unavailable: the Python package 'cuda' is not installed: "
                        "pip install 'hal-command-buffers[cuda]' (cuda-bindings)")
    assert lines[1] == ("vulkan: the vulkan driver is unavailable: the Python package 'vulkan' is not installed: "
                        "pip install 'hal-command-buffers[vulkan]'")
    assert lines[2] == "host: 1 device(s)"


def test_bench_reports_progress_and_skips_figures_without_tqdm_and_matplotlib(monkeypatch, capsys):
    from bench import __main__ as suite
    from bench import plots

    monkeypatch.setitem(sys.modules, "tqdm", None)  # `import tqdm` raises ImportError
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with suite.progress_bar() as progress:
        progress("a step")
    assert "bench: a step" in capsys.readouterr().err
    assert not plots.available()


@pytest.mark.parametrize("spec", ["cuda", "vulkan"])
def test_creating_a_device_of_a_missing_backend_says_what_to_install(spec):
    done = without_optional(f"import hal\ntry:\n    hal.create_device({spec!r})\nexcept hal.UnsupportedError as e:\n"
                            "    print(e)\n")
    assert f"pip install 'hal-command-buffers[{spec}]'" in done.stdout, done.stdout + done.stderr
