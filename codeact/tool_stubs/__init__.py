"""codeact.tool_stubs."""
