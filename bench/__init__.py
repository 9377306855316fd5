"""Side-by-side benchmarks; each reports ratios between competitors measured in one process."""

from __future__ import annotations

import json
from pathlib import Path


def emit(result: dict, report: str, json_path: str | None) -> int:
    """Print a benchmark's report and, when asked, write its result as JSON; the exit status."""
    print(report)
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=1))
    return 0
