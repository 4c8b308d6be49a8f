"""The classes and functions a reader builds models with, in one place (written by hand).

The models live in ``model``, their data in ``data``, their training in ``training``, generation in
``decoding``. This façade names, from one place, what a program that uses the book's models would
import, and ``import transformer_book`` gives the same names::

    from transformer_book.models import make_transformer, generate, padding_mask

Nothing here is new code: every name is the exported object itself, so ``models.Transformer is
model.Transformer``. It imports no plotting.
"""

from transformer_book.checks import check_attention_mask
from transformer_book.data import (
    END_ID,
    PAD_ID,
    START_ID,
    Batch,
    LabelledBatch,
    LanguageModelBatch,
    make_batch,
    pad_sequences,
)
from transformer_book.decoding import IncrementalDecoder, beam_search, cached_greedy_decode, generate, sample_decode
from transformer_book.model import (
    BASE_CONFIG,
    BIG_CONFIG,
    SMALL_CONFIG,
    Decoder,
    DecoderLayer,
    DecoderOnlyTransformer,
    Encoder,
    EncoderClassifier,
    EncoderLayer,
    EncoderOnlyModel,
    Generator,
    LayerNorm,
    MaskedLanguageModel,
    MaskedLanguageModelHead,
    MultiHeadAttention,
    PositionalEncoding,
    PositionwiseFeedForward,
    SublayerConnection,
    TokenEmbedding,
    Transformer,
    TransformerConfig,
    causal_mask,
    make_transformer,
    padding_mask,
    scaled_dot_product_attention,
    shift_right,
)
from transformer_book.ngram import KneserNey
from transformer_book.tokenization import BytePairTokenizer
from transformer_book.training import (
    LabelSmoothingLoss,
    greedy_decode,
    load_checkpoint,
    make_optimizer,
    save_checkpoint,
    train,
    transformer_learning_rate,
)
from transformer_book.vision_transformer import PatchEmbedding, VisionTransformer

__all__ = [
    "BASE_CONFIG",
    "BIG_CONFIG",
    "SMALL_CONFIG",
    "END_ID",
    "PAD_ID",
    "START_ID",
    "Batch",
    "BytePairTokenizer",
    "Decoder",
    "DecoderLayer",
    "DecoderOnlyTransformer",
    "Encoder",
    "EncoderClassifier",
    "EncoderLayer",
    "EncoderOnlyModel",
    "Generator",
    "IncrementalDecoder",
    "KneserNey",
    "LabelSmoothingLoss",
    "LabelledBatch",
    "LanguageModelBatch",
    "LayerNorm",
    "MaskedLanguageModel",
    "MaskedLanguageModelHead",
    "MultiHeadAttention",
    "PatchEmbedding",
    "PositionalEncoding",
    "PositionwiseFeedForward",
    "SublayerConnection",
    "TokenEmbedding",
    "Transformer",
    "TransformerConfig",
    "VisionTransformer",
    "beam_search",
    "cached_greedy_decode",
    "causal_mask",
    "check_attention_mask",
    "generate",
    "greedy_decode",
    "load_checkpoint",
    "make_batch",
    "make_optimizer",
    "make_transformer",
    "pad_sequences",
    "padding_mask",
    "sample_decode",
    "save_checkpoint",
    "scaled_dot_product_attention",
    "shift_right",
    "train",
    "transformer_learning_rate",
]
