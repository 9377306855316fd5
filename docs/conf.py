"""Sphinx configuration of hal's documentation (built with warnings as errors: `python -m sphinx -W docs OUT`).

Sphinx, not MkDocs: autodoc imports the compiled modules and reads the signatures Cython's `embedsignature` writes
into their docstrings, where mkdocstrings' static reader does not parse .pyx files. Pages are Markdown (MyST);
docstrings are Google style (napoleon).
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # an uninstalled source tree (built in place) documents itself

project = "hal"
author = "hal's developers"
copyright = "2026, hal's developers"  # noqa: A001 - Sphinx's name
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
autodoc_member_order = "bysource"
autodoc_docstring_signature = True  # a Cython function's signature is the first line of its docstring
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "signature"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
html_theme = "furo"
html_title = "hal"
