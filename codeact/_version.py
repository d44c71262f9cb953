"""The package's version, below every floor: what the CLI prints and a run's fingerprint records
(``codeact/__init__`` re-exports it; nothing below the root imports from the root)."""

__version__ = "0.1.0"
