"""codeact.evals."""
