"""The door to real models: loaders that copy another library's weights into the book's classes,
and the tokenizers that go with them. Each is taught in a chapter of Part VII; ``transformers`` and
``tiktoken`` are needed only by the code that calls them, not to import this module."""

from transformer_book.gpt2 import (
    GPT2_PATTERN,
    RankedBytePairTokenizer,
    gpt2_byte_order,
    gpt2_from_huggingface,
    merge_ranks,
    recover_merges,
)

__all__ = [
    "GPT2_PATTERN",
    "RankedBytePairTokenizer",
    "gpt2_byte_order",
    "gpt2_from_huggingface",
    "merge_ranks",
    "recover_merges",
]
