"""The composition root: the one place where ``Settings`` become typed configs and objects.

``api/``, ``cli/`` and ``evaluation/`` (and the benchmarks) call these factories; nothing below
this package reads ``Settings`` to build a collaborator except ``catalog.connect``, which
finds the catalog (the configured URL or the local cluster) before anything else can be
built. Library constructors take explicit typed parameters.
"""

from wiring.audit import audit_writer
from wiring.embedding import embedding_spec
from wiring.index import dense_params, lexical_tokenizer, rebuild_config
from wiring.ingest import make_runner, queue_policy
from wiring.maintenance import maintenance_scheduler
from wiring.oidc import jwt_authenticator
from wiring.search import build_reranker, build_search_service
from wiring.status import deployment_status

__all__ = [
    "audit_writer",
    "build_reranker",
    "build_search_service",
    "dense_params",
    "jwt_authenticator",
    "deployment_status",
    "lexical_tokenizer",
    "embedding_spec",
    "maintenance_scheduler",
    "make_runner",
    "queue_policy",
    "rebuild_config",
]
