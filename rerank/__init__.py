"""ragline rerank package: cross-encoder scoring, dynamic batching and reranker training.

Importing the package is cheap; torch and sentence-transformers load on first use.
"""

from rerank.batching import BatchingReranker, RerankTimeout
from rerank.cross_encoder import BACKENDS, load_reranker, resolve_backend
from rerank.data import BeirCollection, TrainingPair, load_beir, pairs_from_corpus, pairs_from_qrels
from rerank.onnx_backend import OnnxCrossEncoderReranker
from rerank.scoring import BatchedCrossEncoder, Pair, PairScorer, Reranker, token_batches
from rerank.torch_backend import CrossEncoderReranker
from rerank.training import TrainReport, default_base, train_reranker, write_model_card

__all__ = [
    "BACKENDS",
    "BatchedCrossEncoder",
    "BatchingReranker",
    "BeirCollection",
    "CrossEncoderReranker",
    "OnnxCrossEncoderReranker",
    "Pair",
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
    "resolve_backend",
    "token_batches",
    "train_reranker",
    "write_model_card",
]
