"""The kernel package. Floor 0: what runs inside the sandbox (the kernel, the frame codec, the tool
client, the restricted policy) and the list of those files (``files.py``, host side only).

The in-sandbox files are standard library only (``tests/test_architecture.py`` checks it): the image
ships them flat, and they import each other by bare name there; on the host they are this package
and import each other relatively. Nothing here but ``files.py`` may import the rest of ``codeact``,
and that only from floor 0. Both sides import these modules from here.
"""

#: Nothing is re-exported: each file is a module of its own (flat, by bare name, in the sandbox).
__all__: list[str] = []
