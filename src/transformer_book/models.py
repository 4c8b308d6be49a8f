"""The classes and functions a reader builds models with, in one place (written by hand).

Each chapter's module holds the code that chapter teaches, so the decoder-only model alone spans a
dozen modules. This façade names what a program that uses the book's models would import, each
from the chapter that builds it::

    from transformer_book.models import make_transformer, generate, padding_mask

Nothing here is new code: every name is the chapter's own object, so ``models.Transformer is
full_model.Transformer``. It imports no plotting.
"""

from transformer_book.batching import END_ID, PAD_ID, START_ID, Batch, LabelledBatch, make_batch, pad_sequences
from transformer_book.block_anatomy import LayerNorm, PositionwiseFeedForward, SublayerConnection
from transformer_book.checks import check_attention_mask
from transformer_book.decoder import Decoder, DecoderLayer, shift_right
from transformer_book.decoder_only import DecoderOnlyTransformer, KneserNey, LanguageModelBatch
from transformer_book.decoding import IncrementalDecoder, beam_search, cached_greedy_decode, generate, sample_decode
from transformer_book.encoder import Encoder, EncoderLayer
from transformer_book.encoder_only import (
    EncoderClassifier,
    EncoderOnlyModel,
    MaskedLanguageModel,
    MaskedLanguageModelHead,
)
from transformer_book.full_model import (
    BASE_CONFIG,
    BIG_CONFIG,
    SMALL_CONFIG,
    Generator,
    TokenEmbedding,
    Transformer,
    TransformerConfig,
    make_transformer,
)
from transformer_book.label_smoothing import LabelSmoothingLoss
from transformer_book.learning_rate import make_optimizer, transformer_learning_rate
from transformer_book.multi_head_attention import MultiHeadAttention
from transformer_book.positional_encoding import PositionalEncoding
from transformer_book.scaled_dot_product import causal_mask, padding_mask, scaled_dot_product_attention
from transformer_book.tokenization import BytePairTokenizer
from transformer_book.training import greedy_decode, load_checkpoint, save_checkpoint, train
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
