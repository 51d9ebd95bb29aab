"""ragline rerank package: cross-encoder scoring, dynamic batching and reranker training.

Importing the package is cheap; torch and sentence-transformers load on first use.
"""

from rerank.batching import BatchingReranker, RerankTimeout
from rerank.cross_encoder import (
    BatchedCrossEncoder,
    CrossEncoderReranker,
    PairScorer,
    Reranker,
    load_reranker,
    resolve_device,
    token_batches,
)
from rerank.data import BeirCollection, TrainingPair, load_beir, pairs_from_corpus, pairs_from_qrels
from rerank.training import TrainReport, default_base, train_reranker, write_model_card

__all__ = [
    "BatchedCrossEncoder",
    "BatchingReranker",
    "BeirCollection",
    "CrossEncoderReranker",
    "PairScorer",
    "Reranker",
    "RerankTimeout",
    "TrainReport",
    "TrainingPair",
    "default_base",
    "load_beir",
    "load_reranker",
    "pairs_from_corpus",
    "pairs_from_qrels",
    "resolve_device",
    "token_batches",
    "train_reranker",
    "write_model_card",
]
