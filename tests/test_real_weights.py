"""The chapters' ``USE_REAL_*`` switches, flipped: the code a reader with a network runs, offline.

The book is built with ``USE_REAL_GPT2 = False`` and ``USE_REAL_LLAMA = False``, so without this
file the branches that load released checkpoints would run in no test. Here each chapter is read
with jupytext, its switch is set to ``True`` in memory, and it executes in a fresh kernel whose
``HF_HOME`` holds a Hugging Face hub cache laid out as a download leaves it
(``hub/models--<org>--<name>/snapshots/<revision>/`` and ``refs/main``) and whose
``HF_HUB_OFFLINE=1``: the chapters' ``from_pretrained("gpt2")`` and
``from_pretrained("HuggingFaceTB/SmolLM2-135M")`` calls are unchanged and read the stand-ins.
Only the download is replaced.

The stand-ins, built here in ``tmp_path`` and never committed:

- the weights are ``save_pretrained`` checkpoints with random weights, of GPT-2's architecture
  (``GPT2LMHeadModel``, GPT-2's context, a vocabulary that ends with the end-of-text token as GPT-2's
  does; two narrow layers to keep CI short) and of SmolLM2-135M's (``LlamaForCausalLM`` with its tied embeddings, three query
  heads per key-value head, RoPE base 100,000 and no RoPE scaling, as its released config has;
  small). A Llama 3.1 checkpoint, whose config has ``rope_scaling`` of type ``llama3``, is not what
  that checkpoint holds; a unit test below saves a small random one and reads it back with
  ``from_pretrained``, as a download would be read, and the book's loader keeps its scaling;
- the tokenizers are GPT-2-format ``vocab.json`` and ``merges.txt`` files written from the book's
  own 500 merges, in GPT-2's byte order and byte alphabet, which is how both GPT-2 and SmolLM2 ship
  their byte-level BPE. tiktoken's own GPT-2 files cannot be stood in for: tiktoken checks the
  SHA-256 of what it caches against the published files and downloads again on a mismatch, so the
  gpt2 chapter reads GPT-2's table from the tokenizer files that come with the weights.

gpt2 runs every cell. Its page says the continuation is GPT-2's own only where the loaded weights
predict the documentation's next token far better than chance; on the random stand-in it must say
that they do not. modern-decoder runs every cell except its ablation, "Which change matters" (most of
its five minutes on one thread): the cells before it, which read ``USE_REAL_LLAMA`` to load the
checkpoint and compare it, then "With a real Llama" to the end, whose cell reads it last. The
ablation neither reads the switch nor defines a name that the later cells read.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import cast

import jupytext
import nbformat
import pytest
import torch

from chapters import BOOK, execute_notebook
from transformer_book.data import documentation_split
from transformer_book.model import DecoderLayer
from transformer_book.modern_decoder import Llama3Theta
from transformer_book.pretrained import gpt2_byte_order, llama_from_huggingface, merge_ranks
from transformer_book.tokenization import BytePairTokenizer

with warnings.catch_warnings():  # transformers imports tqdm.auto, which warns where ipywidgets is missing
    warnings.simplefilter("ignore")
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    from transformers.utils import logging as transformers_logging

transformers_logging.set_verbosity_error()

REVISION = "0" * 40  # any commit hash: refs/main names the snapshot folder
END_OF_TEXT = "<|endoftext|>"


def hub_snapshot(hf_home: Path, repo_id: str) -> Path:
    """The snapshot folder of ``repo_id`` in a hub cache under ``hf_home``, as a download lays it out."""
    repo = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(REVISION)
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    return snapshot


def write_gpt2_tokenizer_files(folder: Path, extra_config: dict[str, object]) -> int:
    """GPT-2-format tokenizer files (vocab.json, merges.txt) from the book's 500 merges, learned as the
    gpt2 chapter learns them; returns the end-of-text id, the token after the table."""
    training_texts, _ = documentation_split()
    book_tokenizer = BytePairTokenizer.learn(training_texts, num_merges=500)
    ranks = merge_ranks(book_tokenizer, gpt2_byte_order())
    spell = bytes_to_unicode()  # GPT-2's files write every byte as one printable character

    def spelled(piece: bytes) -> str:
        return "".join(spell[byte] for byte in piece)

    vocabulary = {spelled(piece): rank for piece, rank in ranks.items()}
    end_of_text = len(vocabulary)
    vocabulary[END_OF_TEXT] = end_of_text
    pieces = book_tokenizer.pieces
    merges = [f"{spelled(pieces[left])} {spelled(pieces[right])}" for left, right in book_tokenizer.merges]
    (folder / "vocab.json").write_text(json.dumps(vocabulary, ensure_ascii=False))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    config = {
        "tokenizer_class": "GPT2Tokenizer",
        "bos_token": END_OF_TEXT,
        "eos_token": END_OF_TEXT,
        "unk_token": END_OF_TEXT,
        "add_prefix_space": False,
        **extra_config,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return end_of_text


def gpt2_stand_in(hf_home: Path) -> None:
    """``gpt2`` in the hub cache: random weights of GPT-2's architecture, with the book's tokenizer files."""
    snapshot = hub_snapshot(hf_home, "gpt2")
    end_of_text = write_gpt2_tokenizer_files(snapshot, {"model_max_length": 1024})
    torch.manual_seed(0)
    # GPT-2 small's context and layout, its vocabulary ending with the end-of-text token as GPT-2's
    # does (50,256 merges and bytes, then id 50,256), from the book's table; 2 layers of width 128.
    config = GPT2Config(
        vocab_size=end_of_text + 1, bos_token_id=end_of_text, eos_token_id=end_of_text, n_layer=2, n_embd=128, n_head=4
    )
    assert config.n_positions == 1_024
    GPT2LMHeadModel(config).save_pretrained(snapshot)


SMOLLM = "HuggingFaceTB/SmolLM2-135M"


def smollm_stand_in(hf_home: Path) -> None:
    """SmolLM2-135M in the hub cache: random weights of its architecture, small, with the book's tokenizer."""
    snapshot = hub_snapshot(hf_home, SMOLLM)
    end_of_text = write_gpt2_tokenizer_files(snapshot, {"model_max_length": 8192})
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=end_of_text + 1,  # SmolLM2's is 49,152, its tokenizer's size
        hidden_size=96,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=6,  # SmolLM2: 9 query heads, 3 key-value heads, 64 features each
        num_key_value_heads=2,
        max_position_embeddings=8192,
        rms_norm_eps=1e-5,
        rope_theta=100_000.0,  # SmolLM2's base, and no rope_scaling, as its config.json has
        tie_word_embeddings=True,
        bos_token_id=end_of_text,
        eos_token_id=end_of_text,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # gains of 1 would hide a gain copied to the wrong place
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                parameter.uniform_(0.5, 1.5)
    model.save_pretrained(snapshot)


def flipped(chapter: Path, switch: str) -> nbformat.NotebookNode:
    """The chapter as a notebook, with ``<switch> = False`` set to True in its one cell that says so."""
    notebook: nbformat.NotebookNode = jupytext.read(chapter)
    line = f"{switch} = False"
    holders = [cell for cell in notebook.cells if cell.cell_type == "code" and line in cell.source]
    assert len(holders) == 1 and holders[0].source.count(line) == 1, f"{chapter.name}: '{line}' is not set once"
    holders[0].source = holders[0].source.replace(line, f"{switch} = True")
    return notebook


def offline_env(hf_home: Path) -> dict[str, str]:
    """The kernel's environment: the stand-in cache, and no network for the hub or transformers."""
    return {
        **os.environ,
        "HF_HOME": str(hf_home),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }


def outputs_text(notebook: nbformat.NotebookNode) -> str:
    """Everything the executed cells printed or displayed as text."""
    texts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            texts.append(output.get("text", ""))
            texts.append(output.get("data", {}).get("text/plain", ""))
    return "\n".join(texts)


@pytest.mark.chapter
def test_gpt2_chapter_runs_with_use_real_gpt2(tmp_path: Path) -> None:
    """book/gpt2.md, every cell, with USE_REAL_GPT2 = True against the stand-in checkpoint."""
    gpt2_stand_in(tmp_path / "hf")
    chapter = BOOK / "gpt2.md"
    execution = execute_notebook(
        flipped(chapter, "USE_REAL_GPT2"), chapter, cwd=BOOK, timeout=600, env=offline_env(tmp_path / "hf")
    )
    printed = outputs_text(execution.notebook)
    assert "real GPT-2 weights: True" in printed
    assert "in transformers'" in printed  # the loader's cell ran on the checkpoint
    assert "identical: True" in printed  # the tokenizer comparison, on the table read from vocab.json
    glued = json.dumps([cell.get("outputs", []) for cell in execution.notebook.cells])  # glue keeps values there
    assert "they are not GPT-2's trained weights" in glued and "GPT-2's own" not in glued


@pytest.mark.chapter
def test_modern_decoder_runs_with_use_real_llama(tmp_path: Path) -> None:
    """book/modern-decoder.md with USE_REAL_LLAMA = True against the stand-in checkpoint: the cells up to
    the ablation ("Which change matters"), which does not read the switch, then from "With a real
    Llama" on."""
    smollm_stand_in(tmp_path / "hf")
    chapter = BOOK / "modern-decoder.md"
    notebook = flipped(chapter, "USE_REAL_LLAMA")
    start, end = (
        next(i for i, cell in enumerate(notebook.cells) if heading in cell.source.splitlines())
        for heading in ("## Which change matters", "## With a real Llama")
    )
    skipped = notebook.cells[start:end]
    assert not any("USE_REAL_LLAMA" in cell.source for cell in skipped)
    notebook.cells = notebook.cells[:start] + notebook.cells[end:]
    execution = execute_notebook(notebook, chapter, cwd=BOOK, timeout=600, env=offline_env(tmp_path / "hf"))
    printed = outputs_text(execution.notebook)
    assert "real Llama-architecture weights: True" in printed
    assert "The Transformer is a model architecture that" in printed  # the real branch's prompt, decoded


def test_a_llama3_checkpoint_loads_with_its_rope_scaling(tmp_path: Path) -> None:
    """Llama 3.1's RoPE scaling (type llama3), saved in a checkpoint's config.json and read back with
    from_pretrained, reaches the book's model: the logits agree past the original context, where the
    scaled and the plain frequencies differ most. Another rope type is refused by name."""
    scaling = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rope_theta=10_000.0,
        rope_scaling={"rope_type": "llama3", **scaling},
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    theirs = LlamaForCausalLM.from_pretrained(tmp_path).eval()
    ours = llama_from_huggingface(theirs)
    rope_theta = cast(DecoderLayer, ours.decoder.layers[0]).self_attention.rope_theta
    assert isinstance(rope_theta, Llama3Theta) and rope_theta.scaling == scaling
    ids = torch.randint(0, 64, (2, 96), generator=torch.Generator().manual_seed(1))  # three times the original
    with torch.no_grad():
        their_logits, our_logits = theirs(ids).logits, ours(ids)
    assert ((our_logits - their_logits).norm() / their_logits.norm()).item() < 1e-5  # float32 rounding
    config.rope_parameters = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10_000.0}
    with torch.device("meta"), pytest.raises(ValueError, match="rope scaling of type 'yarn'"):
        llama_from_huggingface(LlamaForCausalLM(config))
