"""Companion package of the book *The Transformer, Built Up*: the models, and what trains, runs and
loads them.

``import transformer_book`` gives the model API: every class and function a program builds, trains
and runs the book's models with (the names of :mod:`transformer_book.models`), and the device and
parameter-count helpers::

    import transformer_book as tb

    model = tb.make_transformer(100, 100, tb.SMALL_CONFIG, pad_id=0)

Two sides, one rule. The *library* (models, data, training, generation, loaders; each module but the
hand-written :mod:`transformer_book.helpers`, :mod:`transformer_book.progress`,
:mod:`transformer_book.validation` and the façades :mod:`transformer_book.models` and
:mod:`transformer_book.utils` is generated from the chapter of the same name, ``scaled_dot_product.py``
from ``book/scaled-dot-product.md``, out of its cells tagged ``export``) never imports the *book's*
side: :mod:`transformer_book.runtime` (seeds, claims, ``glue``, figure style), the figures
(``figures_*``), :mod:`transformer_book.quiz`, :mod:`transformer_book.explorables` and the graders
(``exercises*``), nor matplotlib or pandas. ``tests/test_package_layers.py`` enforces it. The chapters
import the runtime by name::

    from transformer_book.runtime import check, glue, seed_everything
"""

from transformer_book.helpers import count_parameters, device, on_accelerator, seconds_per_call
from transformer_book.models import (
    BASE_CONFIG,
    BIG_CONFIG,
    END_ID,
    PAD_ID,
    SMALL_CONFIG,
    START_ID,
    Batch,
    BytePairTokenizer,
    Decoder,
    DecoderLayer,
    DecoderOnlyTransformer,
    Encoder,
    EncoderClassifier,
    EncoderLayer,
    EncoderOnlyModel,
    Generator,
    IncrementalDecoder,
    KneserNey,
    LabelledBatch,
    LabelSmoothingLoss,
    LanguageModelBatch,
    LayerNorm,
    MaskedLanguageModel,
    MaskedLanguageModelHead,
    MultiHeadAttention,
    PatchEmbedding,
    PositionalEncoding,
    PositionwiseFeedForward,
    SublayerConnection,
    TokenEmbedding,
    Transformer,
    TransformerConfig,
    VisionTransformer,
    beam_search,
    cached_greedy_decode,
    causal_mask,
    check_attention_mask,
    generate,
    greedy_decode,
    load_checkpoint,
    make_batch,
    make_optimizer,
    make_transformer,
    pad_sequences,
    padding_mask,
    sample_decode,
    save_checkpoint,
    scaled_dot_product_attention,
    shift_right,
    train,
    transformer_learning_rate,
)

__all__ = [
    "BASE_CONFIG",
    "BIG_CONFIG",
    "Batch",
    "BytePairTokenizer",
    "Decoder",
    "DecoderLayer",
    "DecoderOnlyTransformer",
    "END_ID",
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
    "PAD_ID",
    "PatchEmbedding",
    "PositionalEncoding",
    "PositionwiseFeedForward",
    "SMALL_CONFIG",
    "START_ID",
    "SublayerConnection",
    "TokenEmbedding",
    "Transformer",
    "TransformerConfig",
    "VisionTransformer",
    "beam_search",
    "cached_greedy_decode",
    "causal_mask",
    "check_attention_mask",
    "count_parameters",
    "device",
    "generate",
    "greedy_decode",
    "load_checkpoint",
    "make_batch",
    "make_optimizer",
    "make_transformer",
    "on_accelerator",
    "pad_sequences",
    "padding_mask",
    "sample_decode",
    "save_checkpoint",
    "scaled_dot_product_attention",
    "seconds_per_call",
    "shift_right",
    "train",
    "transformer_learning_rate",
]
__version__ = "0.1.0"
