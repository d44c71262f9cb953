"""codeact.runtime.

Floor 3 of the layers (docs/architecture.md): imports ``sandbox``, ``tool_stubs`` and below, never a higher floor.
"""
