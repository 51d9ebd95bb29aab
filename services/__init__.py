"""The use-case layer: one function (or small class) per business operation.

Routes (``api``), CLI commands (``cli``) and console routes are thin adapters over these: they
parse the request, authenticate the caller and render the answer; the operation itself (its
tenant checks, its transaction, its audit entry, its job submission) lives here once, so a
push through the API and the same ingest through ``ragline ingest`` do and record the same.

Each operation takes the caller's connection (or pool) and a :class:`~services.caller.Caller`
(who asks, through which path); collaborators with a life of their own (the ingestion runner,
the search service, the migration worker) come in as arguments typed by the protocols in
:mod:`services.caller`, built by ``wiring`` and handed over by the adapter.

Layer: below ``api``, ``cli``, ``evaluation`` and ``wiring``, above ``jobs`` and the domain
packages (pyproject's import contract, which also forbids ``api`` and ``cli`` to import the
catalog's write modules: they come here). A new operation goes in the module of its subject:

- ``ingest``: push, upload, delete, set an ACL, ingest a path (``ragline ingest``);
- ``jobs``: follow, cancel, resume jobs; ``connectors``: a connector's recorded state;
- ``access``: keys, principals, groups, ACL-checked reads of chunks and documents;
- ``tenants``: fusion defaults, feedback, erasure (``ragline purge``), the audit listing;
  ``pinned_versions``: the index versions aliases pin that an erasure must move off;
- ``index``: rebuild, swap, rollback, GC, quality, the overview; ``migration``: start a
  re-embed; ``schedules``: cron schedules; ``maintenance``: the scheduled tick (retention,
  rebuild, GC) and its thread;
- ``search``: retrieve as a principal and the retrieve audit's shape; ``explain``: the
  console's search-as and explain; ``status``: the deployment status and its records.
"""
