"""codeact.runtime."""
