"""What drives the sandbox: tools and their sources, the one call pipeline, sessions.

``Toolset`` and ``@tool`` (the tool model in ``_tool.py``; the sources in ``sources/``: python
modules, HTTP, OpenAPI, MCP build ``Tool``s, and ``Toolset.from_*`` calls them), the tool
host (bound → lookup → validate → permit → admit → execute → record → reply), the ledger,
data-flow policies (:mod:`.flow`: labels, ``FlowPolicy``, the one judgement of a call),
``Runtime``/``Session`` (runs, live events, snapshots, restore, fork, suspension), batches
(:mod:`.batch`: ``map_code``, one code action per input over warm sessions).

Floor 3 of the layers (docs/architecture.md): imports ``sandbox``, ``tool_stubs`` and below, never a higher floor.
"""

from ._state import Lifecycle
from .flow import SECRET, UNTRUSTED, FlowCall, FlowPolicy, FlowRule
from .limits import CallLimits
from .session import Runtime, Session
from .snapshot import Snapshot
from .toolset import Tool, ToolPolicy, Toolset, tool

__all__ = ["SECRET", "UNTRUSTED", "CallLimits", "FlowCall", "FlowPolicy", "FlowRule", "Lifecycle", "Runtime",
           "Session", "Snapshot", "Tool", "ToolPolicy", "Toolset", "tool"]
