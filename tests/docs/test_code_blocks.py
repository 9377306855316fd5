"""Every Python block of the documentation runs as written (issue 45): a page's blocks in order, in one namespace,
on the host device and, where present, on Vulkan and CUDA (HAL_DEVICE picks what `hal.create_device()` returns)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import hal

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(DOCS.rglob("*.md")) if DOCS.is_dir() else []
pytestmark = pytest.mark.skipif(not PAGES, reason="docs/ is not beside the tests (they run outside the source tree, "
                                                  "on an installed wheel)")


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M)


@pytest.fixture(params=[pytest.param("host", id="host"), pytest.param("vulkan", id="vulkan", marks=pytest.mark.vulkan),
                        pytest.param("cuda", id="cuda", marks=pytest.mark.cuda)])
def device_name(request, monkeypatch):
    monkeypatch.setenv("HAL_DEVICE", request.param)
    return request.param


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=lambda p: str(p.relative_to(DOCS)))
def test_the_page_runs(page, device_name):
    scope: dict = {"__name__": f"docs/{page.relative_to(DOCS)}"}
    for i, block in enumerate(python_blocks(page)):
        exec(compile(block, f"{page.relative_to(DOCS)} (block {i})", "exec"), scope)  # noqa: S102 - the docs' code
    assert os.environ["HAL_DEVICE"] == device_name


def test_every_page_is_in_the_table_of_contents():
    index = (DOCS / "index.md").read_text()
    for page in PAGES:
        name = str(page.relative_to(DOCS).with_suffix(""))
        assert name == "index" or name in index, f"{name} is not in docs/index.md's toctree"


def test_every_public_name_is_in_the_api_reference():
    api = (DOCS / "api.md").read_text()
    documented = set(re.findall(r"^\.\. auto(?:class|function|exception|data):: hal\.(\w+)", api, re.M))
    missing = sorted(set(hal.__all__) - documented)
    assert not missing, f"docs/api.md lacks {missing}"
