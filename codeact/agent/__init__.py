"""codeact.agent."""
