"""Tools, judge and rewards as a Ray Serve service (``shopcomp serve``) and its HTTP client
(docs/cluster.md). :mod:`~shopping_companion.serve.api` is the wire format both sides share.

Nothing here imports Ray at module import time: the client side (remote tool box, judge and
rubric) needs only ``httpx``; the service needs the ``serve`` extra (``ray[serve]``).
"""
