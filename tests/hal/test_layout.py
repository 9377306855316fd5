"""The layout rules of DESIGN.md that code can check: hal/ imports neither examples/ nor a backend (the CLI finds
demos through the `hal.demos` entry points and drivers through `hal.drivers`, or from a source tree by module
path, never by an import statement)."""

import re
from pathlib import Path

import hal

IMPORT = re.compile(r"\s*(?:from|c?import)\s+(examples|backends)\b")


def test_hal_imports_no_example_and_no_backend():
    sources = [p for p in Path(hal.__file__).parent.iterdir() if p.suffix in (".py", ".pyx", ".pxd")]
    assert len(sources) > 10
    for path in sources:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            assert not IMPORT.match(line), f"hal/{path.name}:{number} imports outside hal: {line.strip()}"
