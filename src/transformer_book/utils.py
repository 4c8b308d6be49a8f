"""The generic utilities of the book, in one place (written by hand, like ``models``).

Each is taught, or first needed, in a chapter, and lives in the module that chapter exports to; a
program that uses the book's models imports them from here instead of remembering which that was::

    from transformer_book.utils import eval_mode, peak_memory_bytes, seconds_per_call

Nothing here is new code: ``utils.eval_mode is model.eval_mode``. It imports no plotting.
"""

from transformer_book.checks import check_decoding_inputs
from transformer_book.helpers import count_parameters, device, seconds_per_call
from transformer_book.model import eval_mode, fused_attention
from transformer_book.self_attention import peak_memory_bytes
from transformer_book.training import exact_match, strip_after_end, transformer_learning_rate, warmup_cosine

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
