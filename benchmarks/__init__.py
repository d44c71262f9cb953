"""`make bench`: codeact measured against its floor and its peers, side by side, in one run.

``python -m benchmarks.run`` runs every measure (one small module each), prints a table, writes
``benchmarks/results/*.json`` and rewrites the table in ``docs/benchmarks.md`` from that JSON.
Peers (smolagents, ipykernel + jupyter_client, pydantic-monty) come from the ``bench`` extra and are imported only
inside the measures that use them.
"""
