"""What the code sees: tool specs, and the typed Python stubs rendered from them.

Floor 1 of the layers (docs/architecture.md): imports ``errors``, ``results``, never a higher floor.
"""

from codeact.tool_stubs.render import render_stubs
from codeact.tool_stubs.spec import ToolSpec, python_names

__all__ = ["ToolSpec", "python_names", "render_stubs"]
