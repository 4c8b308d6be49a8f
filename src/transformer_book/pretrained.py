"""The door to real models: loaders that copy another library's weights into the book's classes,
and the tokenizers that go with them. GPT-2's and Llama's are taught in Part VII, BERT's and ViT's at the end of their Part V chapters; ``transformers`` and
``tiktoken`` are needed only by the code that calls them, not to import this module."""

from transformer_book.interop import BertEncoder, bert_from_huggingface, gpt2_from_huggingface
from transformer_book.modern_decoder import llama_from_huggingface
from transformer_book.tokenization import (
    GPT2_PATTERN,
    RankedBytePairTokenizer,
    gpt2_byte_order,
    merge_ranks,
    recover_merges,
)
from transformer_book.vision_transformer import vit_from_huggingface

__all__ = [
    "BertEncoder",
    "bert_from_huggingface",
    "GPT2_PATTERN",
    "RankedBytePairTokenizer",
    "gpt2_byte_order",
    "gpt2_from_huggingface",
    "llama_from_huggingface",
    "merge_ranks",
    "recover_merges",
    "vit_from_huggingface",
]
