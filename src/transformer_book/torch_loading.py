"""Copy PyTorch's weights into the book's modules, for the agreement checks (written by hand, not exported).

The chapters compare their modules with PyTorch's (``nn.MultiheadAttention``,
``nn.TransformerEncoderLayer``, ``nn.TransformerDecoder``, ...): each loader below copies PyTorch's
weights into the book's module in place, after checking that the two have the same sizes and
structure, and raises a ValueError naming the difference otherwise.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from transformer_book.model import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    LayerNorm,
    MultiHeadAttention,
    PositionwiseFeedForward,
)


def load_torch_weights(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """Copy the weights of PyTorch's nn.MultiheadAttention into the book's module, in place.

    ``theirs.in_proj_weight`` is [W_q; W_k; W_v] stacked along the rows, each block in
    nn.Linear's (out, in) layout, and ``in_proj_bias`` the three biases likewise;
    ``theirs.out_proj`` is W^O.

    Raises:
        ValueError: if the two modules differ in d_model (embed_dim), num_heads or bias, or if
            ``theirs`` has features the book's module lacks (kdim or vdim != embed_dim,
            add_bias_kv, add_zero_attn).
    """
    if theirs.kdim != theirs.embed_dim or theirs.vdim != theirs.embed_dim:
        raise ValueError(
            f"theirs has separate key/value widths (kdim={theirs.kdim}, vdim={theirs.vdim}, "
            f"embed_dim={theirs.embed_dim}); the book's module has one width d_model"
        )
    if theirs.bias_k is not None or theirs.add_zero_attn:
        raise ValueError("theirs uses add_bias_kv or add_zero_attn, which the book's module does not have")
    if ours.num_kv_heads != ours.num_heads or ours.rope_theta is not None:
        raise ValueError("ours has grouped key-value heads or RoPE, which nn.MultiheadAttention does not have")
    their_bias, our_bias = theirs.in_proj_bias is not None, ours.w_q.bias is not None
    if (theirs.embed_dim, theirs.num_heads, their_bias) != (ours.d_model, ours.num_heads, our_bias):
        raise ValueError(
            f"sizes differ: theirs has embed_dim={theirs.embed_dim}, num_heads={theirs.num_heads}, "
            f"bias={their_bias}; ours has d_model={ours.d_model}, num_heads={ours.num_heads}, "
            f"bias={our_bias}"
        )
    assert theirs.in_proj_weight is not None  # guaranteed by kdim == vdim == embed_dim
    with torch.no_grad():
        for layer, weight in zip([ours.w_q, ours.w_k, ours.w_v], theirs.in_proj_weight.chunk(3)):
            layer.weight.copy_(weight)
        ours.w_o.weight.copy_(theirs.out_proj.weight)
        if theirs.in_proj_bias is not None:
            for layer, bias in zip([ours.w_q, ours.w_k, ours.w_v], theirs.in_proj_bias.chunk(3)):
                layer.bias.copy_(bias)
            ours.w_o.bias.copy_(theirs.out_proj.bias)


def load_torch_feed_forward(
    ours: PositionwiseFeedForward, theirs: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer
) -> None:
    """Copy the feed-forward network of PyTorch's encoder or decoder layer into ours, in place.

    PyTorch keeps it as ``theirs.linear1`` (d_model -> d_ff), ``theirs.activation`` and
    ``theirs.linear2`` (d_ff -> d_model).

    Raises:
        ValueError: if the sizes or the activation differ.
    """
    linear_1, linear_2 = theirs.linear1, theirs.linear2
    expected = (ours.d_model, ours.d_ff, ours.d_model)
    found = (linear_1.in_features, linear_1.out_features, linear_2.out_features)
    if found != expected or linear_2.in_features != ours.d_ff:
        raise ValueError(
            f"sizes differ: theirs maps {found[0]} -> {found[1]} -> {found[2]}, "
            f"ours maps {expected[0]} -> {expected[1]} -> {expected[2]}"
        )
    # PyTorch stores the activation as a function (F.relu) or a module (nn.GELU()): compare names.
    their_activation = getattr(theirs.activation, "__name__", type(theirs.activation).__name__).lower()
    if their_activation != ours.activation_name:
        raise ValueError(f"theirs uses activation {their_activation!r}, ours uses {ours.activation_name!r}")
    if ours.linear_1.bias is None:
        raise ValueError("ours was built with bias=False; PyTorch's layers have biases")
    with torch.no_grad():
        for our_layer, their_layer in [(ours.linear_1, linear_1), (ours.linear_2, linear_2)]:
            our_layer.weight.copy_(their_layer.weight)
            our_layer.bias.copy_(their_layer.bias)


def load_torch_layer_norm(ours: nn.Module, theirs: nn.LayerNorm) -> None:
    """Copy nn.LayerNorm's gain and shift into the book's LayerNorm, in place.

    Raises:
        ValueError: if ours is not a LayerNorm (an RMSNorm), the widths or eps differ, or theirs has
            no learned gain and shift.
    """
    if not isinstance(ours, LayerNorm):
        raise ValueError(f"ours is a {type(ours).__name__}, not a LayerNorm: there is no nn.LayerNorm to copy into it")
    if theirs.weight is None or theirs.bias is None:
        raise ValueError(
            "theirs was built with elementwise_affine=False or bias=False; "
            "the book's LayerNorm always has a gain and a shift"
        )
    if tuple(theirs.normalized_shape) != (ours.d_model,) or theirs.eps != ours.eps:
        raise ValueError(
            f"sizes differ: theirs normalises {tuple(theirs.normalized_shape)} with "
            f"eps={theirs.eps}; ours normalises ({ours.d_model},) with eps={ours.eps}"
        )
    with torch.no_grad():
        ours.weight.copy_(theirs.weight)
        ours.bias.copy_(theirs.bias)


def load_torch_encoder_layer(ours: EncoderLayer, theirs: nn.TransformerEncoderLayer) -> None:
    """Copy nn.TransformerEncoderLayer's weights into the book's EncoderLayer, in place.

    theirs.self_attn -> self_attention, linear1/linear2 -> feed_forward, norm1 -> the
    attention sub-layer's LayerNorm, norm2 -> the feed-forward sub-layer's.

    Raises:
        ValueError: if the layers differ in size, in the order of LayerNorm (norm_first) or
            in the activation.
    """
    if theirs.norm_first != ours.attention_sublayer.norm_first:
        raise ValueError(
            f"theirs has norm_first={theirs.norm_first}, ours has norm_first={ours.attention_sublayer.norm_first}"
        )
    load_torch_weights(ours.self_attention, theirs.self_attn)
    load_torch_feed_forward(ours.feed_forward, theirs)
    load_torch_layer_norm(ours.attention_sublayer.norm, theirs.norm1)
    load_torch_layer_norm(ours.feed_forward_sublayer.norm, theirs.norm2)


def load_torch_final_norm(ours: nn.Module, theirs: nn.Module | None, stack: str) -> None:
    """Copy a stack's final LayerNorm, or check that neither stack has one.

    ours is the book's stack's ``norm`` (LayerNorm or nn.Identity), theirs PyTorch's (nn.LayerNorm,
    None or nn.Identity); stack names the stack in the error message.

    Raises:
        ValueError: if one stack ends in a LayerNorm and the other does not.
    """
    their_norm = theirs if isinstance(theirs, nn.LayerNorm) else None
    if isinstance(ours, LayerNorm) != (their_norm is not None):
        raise ValueError(
            f"one {stack} stack ends in a LayerNorm and the other does not: "
            f"ours ends in {type(ours).__name__}, theirs in {type(theirs).__name__}; "
            f"post-LN as in the paper has no final LayerNorm"
        )
    if isinstance(ours, LayerNorm) and their_norm is not None:
        load_torch_layer_norm(ours, their_norm)


def load_torch_encoder(ours: Encoder, theirs: nn.TransformerEncoder) -> None:
    """Copy an nn.TransformerEncoder layer by layer into the book's Encoder, in place.

    Raises:
        ValueError: if the number of layers differs, if a pair of layers differs (see
            load_torch_encoder_layer), or if one stack ends in a LayerNorm and the other does
            not (build theirs with ``norm=None`` to compare with the paper's post-LN).
    """
    if len(theirs.layers) != len(ours.layers):
        raise ValueError(f"theirs has {len(theirs.layers)} layers, ours has {len(ours.layers)}")
    for our_layer, their_layer in zip(ours.layers, theirs.layers):
        load_torch_encoder_layer(cast(EncoderLayer, our_layer), their_layer)
    load_torch_final_norm(ours.norm, theirs.norm, "encoder")


def load_torch_decoder_layer(ours: DecoderLayer, theirs: nn.TransformerDecoderLayer) -> None:
    """Copy nn.TransformerDecoderLayer's weights into the book's DecoderLayer, in place.

    self_attn -> self_attention, multihead_attn -> cross_attention, linear1/linear2 ->
    feed_forward, norm1/norm2/norm3 -> the three sub-layers' LayerNorms.

    Raises:
        ValueError: if the layers differ in size, norm_first or activation.
    """
    if theirs.norm_first != ours.self_attention_sublayer.norm_first:
        raise ValueError(
            f"theirs has norm_first={theirs.norm_first}, ours has norm_first={ours.self_attention_sublayer.norm_first}"
        )
    if ours.cross_attention is None or ours.cross_attention_sublayer is None:
        raise ValueError(
            "ours has no cross-attention; nn.TransformerDecoderLayer always has one "
            "(compare a decoder-only layer with nn.TransformerEncoderLayer and a causal mask)"
        )
    load_torch_weights(ours.self_attention, theirs.self_attn)
    load_torch_weights(ours.cross_attention, theirs.multihead_attn)
    load_torch_feed_forward(ours.feed_forward, theirs)
    for sublayer, their_norm in [
        (ours.self_attention_sublayer, theirs.norm1),
        (ours.cross_attention_sublayer, theirs.norm2),
        (ours.feed_forward_sublayer, theirs.norm3),
    ]:
        load_torch_layer_norm(sublayer.norm, their_norm)


def load_torch_decoder(ours: Decoder, theirs: nn.TransformerDecoder) -> None:
    """Copy an nn.TransformerDecoder layer by layer into the book's Decoder, in place.

    Raises:
        ValueError: if the number of layers differs, or only one stack ends in a LayerNorm
            (build theirs with ``norm=None`` to compare with the paper's post-LN).
    """
    if len(theirs.layers) != len(ours.layers):
        raise ValueError(f"theirs has {len(theirs.layers)} layers, ours has {len(ours.layers)}")
    for our_layer, their_layer in zip(ours.layers, theirs.layers):
        load_torch_decoder_layer(cast(DecoderLayer, our_layer), their_layer)
    load_torch_final_norm(ours.norm, theirs.norm, "decoder")
