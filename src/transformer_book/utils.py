"""The generic utilities of the book, in one place (written by hand, like ``models``).

Each is taught, or first needed, in a chapter, and lives in that chapter's module; a program that
uses the book's models imports them from here instead of remembering which chapter that was::

    from transformer_book.utils import eval_mode, peak_memory_bytes, seconds_per_call

Nothing here is new code: ``utils.eval_mode is training.eval_mode``. It imports no plotting.
"""

from transformer_book.checks import check_decoding_inputs
from transformer_book.decoder_only import warmup_cosine
from transformer_book.helpers import count_parameters, device, seconds_per_call
from transformer_book.learning_rate import transformer_learning_rate
from transformer_book.self_attention import peak_memory_bytes
from transformer_book.training import eval_mode, exact_match, fused_attention, strip_after_end

__all__ = [
    "check_decoding_inputs",
    "count_parameters",
    "device",
    "eval_mode",
    "exact_match",
    "fused_attention",
    "peak_memory_bytes",
    "seconds_per_call",
    "strip_after_end",
    "transformer_learning_rate",
    "warmup_cosine",
]
