"""What runs inside the sandbox: the kernel, the frame codec, the tool client and the restricted policy.

Standard library only (``tests/test_architecture.py`` checks it): the image ships these files flat,
and they import each other by bare name there; on the host they are this package and import each
other relatively. Nothing here may import the rest of ``codeact``.
"""

#: Nothing is re-exported: each file is a module of its own (flat, by bare name, in the sandbox).
__all__: list[str] = []
