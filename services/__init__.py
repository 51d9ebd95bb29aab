"""The use-case layer: one function (or small class) per business operation.

Routes (``api``), CLI commands (``cli``) and console routes are thin adapters over these: they
parse the request, authenticate the caller and render the answer; the operation itself (its
tenant checks, its transaction, its audit entry, its job submission) lives here once, so a
push through the API and the same ingest through ``ragline ingest`` do and record the same.

Each operation takes the caller's connection (or pool) and a :class:`~services.caller.Caller`
(who asks, through which path); collaborators with a life of their own (the ingestion runner,
the search service, the migration worker) come in as arguments typed by the protocols in
:mod:`services.caller`, built by ``wiring`` and handed over by the adapter.

Layer: below ``api``, ``cli`` and ``wiring``, above ``jobs`` and the domain packages
(pyproject's import contract). A new operation goes in the module of its subject:
``ingest`` (push, upload, delete, ACL, ingest a path), ``jobs`` (follow, cancel, resume),
``access`` (keys, principals, groups), ``tenants`` (fusion, feedback, purge), ``index``
(rebuild, swap, rollback, GC, migration, schedules), ``explain`` and ``status``.
"""
