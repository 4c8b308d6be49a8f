"""Explorables: small interactive views of numbers a chapter computed (written by hand, not exported).

Three views, each shown with IPython's ``display`` in a chapter's cell:

- :class:`HeadView`: attention weights a trained model computed over a sentence; pick a layer and a
  head, point at (or focus) a token and see how much it attends to each earlier token.
- :class:`SamplingExplorer`: a real next-token distribution under temperature, top-k and top-p;
  what each filter cuts, what remains, and the renormalised probabilities (:func:`filtered_distribution`).
- :class:`MemoryCalculator`: a Llama-style configuration in; parameters, key-value cache, training
  state and 6ND out (:func:`memory_estimate`, whose formulas are the package's own).

Like :mod:`transformer_book.quiz`, each output is one block of HTML with the data inline, a small
script and a style, and nothing loaded from elsewhere, so the same cell works on the website (also
from ``file://``), in Colab and in Jupyter. A charting library (Bokeh, Plotly) would need its
JavaScript in the site's ``_static``, which a Colab output does not have, and be far larger than these
views. Controls are native sliders, selects, buttons and number fields with labels; results are
written as text in live regions, so a keyboard and a screen reader reach every number. The script
computes what the Python functions here compute, in the same order and in double precision; the
site's browser tests compare the two.
"""

from __future__ import annotations

import decimal
import hashlib
import html
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from transformer_book.checks import positive_int
from transformer_book.modern_decoder import kv_cache_bytes
from transformer_book.scaling_laws import training_flops

__all__ = [
    "HeadView",
    "MemoryCalculator",
    "SamplingExplorer",
    "filtered_distribution",
    "fixed",
    "format_estimate",
    "memory_estimate",
]

STYLE = """\
.tb-explore{margin:1em 0;font-size:1rem;line-height:1.5}
.tb-explore .tb-controls{display:flex;flex-wrap:wrap;gap:.5em 1.5em;margin:0 0 .8em}
.tb-explore label{font-weight:600}
.tb-explore input,.tb-explore select,.tb-explore button{font:inherit}
.tb-explore input[type=number]{width:11em}
.tb-explore table{border-collapse:collapse;font-size:.9rem}
.tb-explore th,.tb-explore td{padding:.1em .6em;text-align:right}
.tb-explore th:nth-child(2),.tb-explore td:nth-child(2){text-align:left}
.tb-explore .tb-bar{display:inline-block;height:.8em;background:#1f77b4;vertical-align:middle}
.tb-explore tr.tb-cut .tb-bar{background:#a0a0a0}
.tb-explore tr.tb-cut td{font-style:italic}
.tb-explore .tb-tokens{display:flex;flex-wrap:wrap;gap:.3em;margin:.5em 0}
.tb-explore .tb-token{display:flex;flex-direction:column;align-items:stretch;padding:.1em .3em;cursor:pointer;
 background:none;color:inherit;border:1px solid #8a8a8a;border-radius:.3em;white-space:pre}
.tb-explore .tb-token[aria-pressed=true]{border:2px solid #d62728}
.tb-explore .tb-token .tb-weight{display:block;height:.4em;margin-top:.15em;background:#1f77b4;width:0}
.tb-explore .tb-readout{margin:.5em 0;padding:.3em .7em;border-left:.3em solid #8a8a8a}
.tb-explore dl{display:grid;grid-template-columns:max-content auto;gap:.1em 1em;margin:.5em 0}
.tb-explore dt{font-weight:600}.tb-explore dd{margin:0}
"""


def _block(kind: str, data: dict[str, Any], body: str, script: str) -> str:
    """One self-contained block: a div with an id derived from the data, its style, body and script."""
    payload = json.dumps(data, separators=(",", ":"))
    block_id = f"tb-{kind}-{hashlib.sha256(payload.encode()).hexdigest()[:10]}"
    return (
        f'<div class="tb-explore tb-{kind}" id="{block_id}" data-explorable="{html.escape(payload)}">'
        f"<style>{STYLE}</style>{body.replace('ID', block_id)}"
        f"<script>{script.replace('BLOCK_ID', json.dumps(block_id))}</script></div>"
    )


def _finite_numbers(values: object, name: str) -> list[float]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
        raise ValueError(f"{name} must be a non-empty sequence of numbers, got {values!r:.80}")
    numbers = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"{name} must hold finite numbers, got {value!r}")
        numbers.append(float(value))
    return numbers


def _labels(tokens: object, count: int, name: str) -> list[str]:
    if isinstance(tokens, str) or not isinstance(tokens, Sequence) or not all(isinstance(t, str) for t in tokens):
        raise ValueError(f"{name} must be a sequence of strings, got {tokens!r:.80}")
    if len(tokens) != count:
        raise ValueError(f"{name} must have one string per position ({count}), got {len(tokens)}")
    return list(tokens)


# ---------------------------------------------------------------------------------------------
# Sampling: temperature, top-k, top-p


def filtered_distribution(
    logits: Sequence[float], temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> tuple[list[float], list[str], list[float]]:
    """What sampling with temperature, top-k and then top-p does to one next-token distribution.

    Returns the probabilities softmax(logits / temperature), each token's fate ("kept", "top-k"
    or "top-p": the filter that cut it) and the probabilities the draw uses: those of the kept
    tokens, renormalised. Top-k keeps the tokens whose scaled logit is at least the k-th largest
    (ties kept), as :func:`~transformer_book.decoding.sample_token` does; top-p then keeps, among
    those, the smallest set of most probable tokens holding at least p of their renormalised
    probability (the tokens ranked before a kept one hold less than p), as Holtzman et al.'s nucleus.

    Raises:
        ValueError: if logits are empty or not finite, temperature is not positive, top_k is not a
            positive integer, or top_p is not in (0, 1].
    """
    scores = _finite_numbers(logits, "logits")
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not 0 < temperature < math.inf:
        raise ValueError(f"temperature must be positive and finite, got temperature={temperature!r}")
    if top_k is not None:
        top_k = positive_int(top_k, "top_k")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, int | float) or not 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1], got top_p={top_p!r}")
    scaled = [score / temperature for score in scores]
    largest = max(scaled)
    exponentials = [math.exp(value - largest) for value in scaled]
    total = _total(exponentials)
    probabilities = [value / total for value in exponentials]
    fate = ["kept"] * len(scaled)
    if top_k is not None and top_k < len(scaled):
        kth_largest = sorted(scaled, reverse=True)[top_k - 1]
        fate = ["top-k" if value < kth_largest else "kept" for value in scaled]
    if top_p is not None:
        kept_mass = _total(p for p, f in zip(probabilities, fate, strict=True) if f == "kept")
        order = sorted((i for i, f in enumerate(fate) if f == "kept"), key=lambda i: (-probabilities[i], i))
        before = 0.0
        for i in order:
            if before >= top_p:
                fate[i] = "top-p"
            before += probabilities[i] / kept_mass
    kept_mass = _total(p for p, f in zip(probabilities, fate, strict=True) if f == "kept")
    final = [p / kept_mass if f == "kept" else 0.0 for p, f in zip(probabilities, fate, strict=True)]
    return probabilities, fate, final


def _total(values: Iterable[float]) -> float:
    """Left-to-right addition, as the page's script adds (Python 3.12's sum compensates rounding)."""
    total = 0.0
    for value in values:
        total += value
    return total


SAMPLING_SCRIPT = """\
(function () {
  var root = document.getElementById(BLOCK_ID);
  if (!root || root.dataset.ready) return;
  root.dataset.ready = "1";
  var data = JSON.parse(root.dataset.explorable);
  var t = root.querySelector("[name=temperature]"), k = root.querySelector("[name=top_k]"),
      p = root.querySelector("[name=top_p]");
  function filtered(logits, temperature, topK, topP) {
    var scaled = logits.map(function (x) { return x / temperature; });
    var largest = Math.max.apply(null, scaled);
    var exps = scaled.map(function (x) { return Math.exp(x - largest); });
    var total = 0; exps.forEach(function (x) { total += x; });
    var probs = exps.map(function (x) { return x / total; });
    var fate = scaled.map(function () { return "kept"; });
    if (topK !== null && topK < scaled.length) {
      var kth = scaled.slice().sort(function (a, b) { return b - a; })[topK - 1];
      fate = scaled.map(function (x) { return x < kth ? "top-k" : "kept"; });
    }
    var kept;
    if (topP !== null) {
      kept = 0; probs.forEach(function (x, i) { if (fate[i] === "kept") kept += x; });
      var order = [];
      fate.forEach(function (f, i) { if (f === "kept") order.push(i); });
      order.sort(function (a, b) { return probs[b] - probs[a] || a - b; });
      var before = 0;
      order.forEach(function (i) { if (before >= topP) fate[i] = "top-p"; before += probs[i] / kept; });
    }
    kept = 0; probs.forEach(function (x, i) { if (fate[i] === "kept") kept += x; });
    return {probs: probs, fate: fate, kept: kept,
            final: probs.map(function (x, i) { return fate[i] === "kept" ? x / kept : 0; })};
  }
  function update() {
    var temperature = Number(t.value), topK = Number(k.value), topP = Number(p.value);
    var kOff = topK > data.shown, pOff = topP >= 1;
    root.querySelector(".tb-t").textContent = temperature.toFixed(2);
    root.querySelector(".tb-k").textContent = kOff ? "off" : String(topK);
    root.querySelector(".tb-p").textContent = pOff ? "off" : topP.toFixed(2);
    var r = filtered(data.logits, temperature, kOff ? null : topK, pOff ? null : topP);
    var rows = root.querySelectorAll("tbody tr"), count = 0;
    r.fate.forEach(function (f) { if (f === "kept") count += 1; });
    data.ids.forEach(function (id, row) {
      var cells = rows[row].children, fate = r.fate[id];
      rows[row].className = fate === "kept" ? "" : "tb-cut";
      cells[2].textContent = r.probs[id].toFixed(4);
      cells[3].firstChild.style.width = (r.probs[id] * 20) + "em";
      cells[4].textContent = fate === "kept" ? "kept" : "cut by " + fate;
      cells[5].textContent = r.final[id].toFixed(4);
    });
    root.querySelector(".tb-readout").textContent = "The draw keeps " + count + " of " + data.logits.length +
      " tokens, holding " + (100 * r.kept).toFixed(1) + "% of the probability after temperature.";
  }
  [t, k, p].forEach(function (input) { input.addEventListener("input", update); });
  update();
})();
"""


class SamplingExplorer:
    """A next-token distribution (one logit per vocabulary entry, with each entry's text) under
    temperature, top-k and top-p sliders; the ``shown`` most likely tokens are listed."""

    def __init__(self, logits: Sequence[float], tokens: Sequence[str], *, context: str, shown: int = 30) -> None:
        self.logits = _finite_numbers(logits, "logits")
        self.tokens = _labels(tokens, len(self.logits), "tokens")
        if not isinstance(context, str):
            raise ValueError(f"context must be a string, got {context!r}")
        self.context = context
        shown = positive_int(shown, "shown")
        self.ids = sorted(range(len(self.logits)), key=lambda i: (-self.logits[i], i))[:shown]

    def _repr_html_(self) -> str:
        shown = len(self.ids)
        data = {"logits": self.logits, "ids": self.ids, "shown": shown}
        rows = "".join(
            f"<tr><td>{rank}</td><td><code>{html.escape(repr(self.tokens[i])[1:-1].replace(' ', '␣'))}</code></td><td></td>"
            f'<td><span class="tb-bar"></span></td><td></td><td></td></tr>'
            for rank, i in enumerate(self.ids, start=1)
        )
        body = (
            f"<p>The next token after <code>{html.escape(repr(self.context))}</code>: "
            f"its {shown} most likely tokens.</p>"
            '<div class="tb-controls">'
            '<span><label for="ID-t">Temperature</label> <input type="range" id="ID-t" name="temperature" '
            'min="0.1" max="2" step="0.05" value="1"> <output class="tb-t" for="ID-t"></output></span>'
            '<span><label for="ID-k">Top-k</label> <input type="range" id="ID-k" name="top_k" '
            f'min="1" max="{shown + 1}" step="1" value="{shown + 1}"> <output class="tb-k" for="ID-k"></output></span>'
            '<span><label for="ID-p">Top-p</label> <input type="range" id="ID-p" name="top_p" '
            'min="0.05" max="1" step="0.05" value="1"> <output class="tb-p" for="ID-p"></output></span></div>'
            '<p class="tb-readout" role="status" aria-live="polite"></p>'
            f"<table><caption>The {shown} most likely next tokens: probability after temperature, "
            "the filter that cuts it, and the probability the draw uses (␣ is a space)</caption>"
            '<thead><tr><th scope="col">rank</th><th scope="col">token</th><th scope="col">after temperature</th>'
            '<th scope="col">bar</th><th scope="col">filter</th><th scope="col">renormalised</th></tr></thead>'
            f"<tbody>{rows}</tbody></table>"
        )
        return _block("sampling", data, body, SAMPLING_SCRIPT)

    def __repr__(self) -> str:
        probabilities, _, _ = filtered_distribution(self.logits)
        top = ", ".join(f"{self.tokens[i]!r} {probabilities[i]:.3f}" for i in self.ids[:10])
        return f"Next token after {self.context!r}: {top}, ..."


# ---------------------------------------------------------------------------------------------
# Head view

HEAD_SCRIPT = """\
(function () {
  var root = document.getElementById(BLOCK_ID);
  if (!root || root.dataset.ready) return;
  root.dataset.ready = "1";
  var data = JSON.parse(root.dataset.explorable);
  var layer = root.querySelector("[name=layer]"), head = root.querySelector("[name=head]");
  var buttons = root.querySelectorAll(".tb-token"), query = data.tokens.length - 1;
  function show() {
    var row = data.weights[Number(layer.value)][Number(head.value)][query], parts = [];
    buttons.forEach(function (button, key) {
      button.setAttribute("aria-pressed", key === query ? "true" : "false");
      var weight = key <= query ? row[key] : 0;
      button.querySelector(".tb-weight").style.width = (100 * weight) + "%";
      if (key <= query) parts.push(JSON.stringify(data.tokens[key]) + " " + weight.toFixed(3));
    });
    root.querySelector(".tb-readout").textContent = "Layer " + layer.value + ", head " + head.value +
      ": token " + query + " " + JSON.stringify(data.tokens[query]) + " attends to " + parts.join(", ") + ".";
  }
  buttons.forEach(function (button, index) {
    function choose() { query = index; show(); }
    button.addEventListener("mouseenter", choose);
    button.addEventListener("focus", choose);
    button.addEventListener("click", choose);
  });
  layer.addEventListener("change", show);
  head.addEventListener("change", show);
  show();
})();
"""


class HeadView:
    """Attention weights (layer, head, query, key) over a sentence's tokens, one head at a time:
    choose a layer and a head, then point at or focus a token to see its row of weights."""

    def __init__(self, tokens: Sequence[str], weights: object, *, decimals: int = 4) -> None:
        rows = _nested(weights, "weights")
        if not rows or not all(isinstance(layer, list) and layer for layer in rows):
            raise ValueError("weights must have shape (layers, heads, tokens, tokens)")
        self.tokens = _labels(tokens, len(rows[0][0]), "tokens")
        m = len(self.tokens)
        heads = len(rows[0])
        for layer in rows:
            if len(layer) != heads or any(len(h) != m or any(len(r) != m for r in h) for h in layer):
                raise ValueError(f"weights must have shape (layers, heads, {m}, {m}) with as many heads in every layer")
        self.weights = [[[[round(w, decimals) for w in row] for row in h] for h in layer] for layer in rows]

    def _repr_html_(self) -> str:
        layers, heads = len(self.weights), len(self.weights[0])
        data = {"tokens": self.tokens, "weights": self.weights}
        layer_options = "".join(f'<option value="{i}">{i}</option>' for i in range(layers))
        head_options = "".join(f'<option value="{i}">{i}</option>' for i in range(heads))
        tokens = "".join(
            f'<button type="button" class="tb-token" aria-pressed="false" '
            f'aria-label="token {index}: {html.escape(json.dumps(token, ensure_ascii=False))}">'
            f'<span>{html.escape(_visible(token))}</span><span class="tb-weight"></span></button>'
            for index, token in enumerate(self.tokens)
        )
        body = (
            '<div class="tb-controls">'
            '<span><label for="ID-layer">Layer</label> '
            f'<select id="ID-layer" name="layer">{layer_options}</select></span>'
            f'<span><label for="ID-head">Head</label> <select id="ID-head" name="head">{head_options}</select></span>'
            "</div><p>Point at a token, or move to it with Tab: the bar under each earlier token is its "
            "attention weight from the chosen token.</p>"
            f'<div class="tb-tokens" role="group" aria-label="Tokens of the sentence">{tokens}</div>'
            '<p class="tb-readout" role="status" aria-live="polite"></p>'
        )
        return _block("heads", data, body, HEAD_SCRIPT)

    def __repr__(self) -> str:
        return f"HeadView of {len(self.weights)} layers x {len(self.weights[0])} heads over {self.tokens!r}"


def _visible(token: str) -> str:
    """A token as a button shows it: whitespace alone becomes visible marks (␣ for a space, ⏎ for a newline)."""
    return token if token.strip() else token.replace(" ", "␣").replace("\n", "⏎").replace("\t", "⇥")


def _nested(values: object, name: str) -> Any:
    """A tensor or array as nested lists of Python floats (anything with .tolist()), or the lists themselves."""
    values = values.tolist() if hasattr(values, "tolist") else values
    if not isinstance(values, list | tuple):
        raise ValueError(f"{name} must be nested lists, an array or a tensor, got {type(values).__name__}")

    def walk(item: Any) -> Any:
        if isinstance(item, list | tuple):
            return [walk(inner) for inner in item]
        if isinstance(item, bool) or not isinstance(item, int | float) or not math.isfinite(item):
            raise ValueError(f"{name} must hold finite numbers, got {item!r}")
        return float(item)

    return walk(values)


# ---------------------------------------------------------------------------------------------
# Memory and compute

#: The calculator's inputs, in order, with their labels.
CONFIG = {
    "vocab_size": "vocabulary",
    "d_model": "d_model",
    "num_layers": "layers",
    "num_heads": "query heads",
    "num_kv_heads": "key-value heads",
    "d_ff": "d_ff (SwiGLU width)",
    "context": "context (tokens)",
    "batch_size": "batch (sequences)",
    "bytes_per_number": "bytes per number",
    "tokens": "training tokens D",
}


def memory_estimate(
    *,
    vocab_size: int,
    d_model: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    d_ff: int,
    context: int,
    batch_size: int,
    bytes_per_number: int,
    tokens: int,
) -> dict[str, int | float]:
    """Sizes of a Llama-style DecoderOnlyTransformer (RMSNorm, SwiGLU, no biases, rotary positions,
    untied generator, as the modern-decoder chapter builds Llama 3 8B) with every number stored in
    ``bytes_per_number`` bytes.

    ``parameters`` is what count_parameters finds; ``non-embedding parameters`` leaves out the token
    embedding (scaling_laws.non_embedding_parameters); ``kv cache`` is modern_decoder.kv_cache_bytes
    for ``batch_size`` sequences of ``context`` tokens; weights, gradients and Adam's state are
    precision_and_memory.model_state_bytes of the model; ``6ND`` is scaling_laws.training_flops of the
    non-embedding parameters and ``tokens``. Activations are not counted.

    Raises:
        ValueError: if a size is not a positive integer, num_heads does not divide d_model, or
            num_kv_heads does not divide num_heads.
    """
    config = {name: positive_int(value, name) for name, value in locals().items()}
    d, heads, kv_heads = config["d_model"], config["num_heads"], config["num_kv_heads"]
    if d % heads:
        raise ValueError(f"num_heads={heads} must divide d_model={d}")
    if heads % kv_heads:
        raise ValueError(f"num_kv_heads={kv_heads} must divide num_heads={heads}")
    d_head, vocab, layers, size = d // heads, config["vocab_size"], config["num_layers"], config["bytes_per_number"]
    per_layer = 2 * d * d + 2 * d * kv_heads * d_head + 3 * d * config["d_ff"] + 2 * d
    parameters = 2 * vocab * d + layers * per_layer + d
    non_embedding = parameters - vocab * d
    weights = parameters * size
    cache = kv_cache_bytes(
        num_layers=layers,
        num_kv_heads=kv_heads,
        d_head=d_head,
        tokens=config["context"],
        bytes_per_number=size,
        batch_size=config["batch_size"],
    )
    return {
        "parameters": parameters,
        "non-embedding parameters": non_embedding,
        "kv cache": cache,
        "weights": weights,
        "gradients": weights,
        "Adam state": 2 * weights,
        "6ND": training_flops(non_embedding, config["tokens"]),
    }


def fixed(value: float, digits: int) -> str:
    """value with digits decimals as JavaScript's toFixed writes it: an exact tie rounds up (0.125 to
    0.13), where Python's format rounds to even (0.12)."""
    return str(decimal.Decimal(value).quantize(decimal.Decimal(1).scaleb(-digits), rounding=decimal.ROUND_HALF_UP))


def format_estimate(estimate: dict[str, int | float]) -> dict[str, str]:
    """The estimate as the calculator shows it: counts with thousands separators, bytes also in GiB,
    operations in scientific notation."""
    shown = {}
    for name, value in estimate.items():
        if name == "6ND":
            shown[name] = f"{value:.3e}"
        elif "parameters" in name:
            shown[name] = f"{int(value):,}"
        else:
            shown[name] = f"{int(value):,} bytes ({fixed(value / 2**30, 2)} GiB)"
    return shown


MEMORY_SCRIPT = """\
(function () {
  var root = document.getElementById(BLOCK_ID);
  if (!root || root.dataset.ready) return;
  root.dataset.ready = "1";
  var inputs = root.querySelectorAll("input");
  function commas(n) { return n.toLocaleString("en-US", {maximumFractionDigits: 0}); }
  function bytes(n) { return commas(n) + " bytes (" + (n / 1073741824).toFixed(2) + " GiB)"; }
  function exponential(x) { return x.toExponential(3).replace(/e([+-])(\\d)$/, "e$10$2"); }
  function update() {
    var c = {}, problem = "";
    inputs.forEach(function (input) {
      var value = Number(input.value);
      if (!(Number.isInteger(value) && value > 0)) problem = problem || input.name + " must be a positive integer";
      c[input.name] = value;
    });
    if (!problem && c.d_model % c.num_heads) problem = "query heads must divide d_model";
    if (!problem && c.num_heads % c.num_kv_heads) problem = "key-value heads must divide query heads";
    var status = root.querySelector(".tb-readout");
    if (problem) { status.textContent = "Not a valid configuration: " + problem + "."; return; }
    var d = c.d_model, dHead = d / c.num_heads;
    var perLayer = 2 * d * d + 2 * d * c.num_kv_heads * dHead + 3 * d * c.d_ff + 2 * d;
    var parameters = 2 * c.vocab_size * d + c.num_layers * perLayer + d;
    var nonEmbedding = parameters - c.vocab_size * d, weights = parameters * c.bytes_per_number;
    var shown = {
      "parameters": commas(parameters),
      "non-embedding parameters": commas(nonEmbedding),
      "kv cache": bytes(2 * c.num_layers * c.num_kv_heads * dHead * c.context * c.batch_size * c.bytes_per_number),
      "weights": bytes(weights), "gradients": bytes(weights), "Adam state": bytes(2 * weights),
      "6ND": exponential(6 * nonEmbedding * c.tokens)
    };
    root.querySelectorAll("dd").forEach(function (dd) { dd.textContent = shown[dd.dataset.name]; });
    status.textContent = "Parameters: " + shown.parameters + "; key-value cache: " + shown["kv cache"] + ".";
  }
  inputs.forEach(function (input) { input.addEventListener("input", update); });
  update();
})();
"""

ESTIMATE_LABELS = {
    "parameters": "parameters",
    "non-embedding parameters": "non-embedding parameters N",
    "kv cache": "key-value cache (batch × context)",
    "weights": "weights",
    "gradients": "gradients",
    "Adam state": "Adam's two moments",
    "6ND": "training operations 6ND",
}


class MemoryCalculator:
    """A configuration in, the sizes of :func:`memory_estimate` out, recomputed as the reader types."""

    def __init__(self, **config: int) -> None:
        if set(config) != set(CONFIG):
            raise ValueError(f"give exactly these settings: {', '.join(CONFIG)}; got {', '.join(config)}")
        memory_estimate(**config)  # refuses a bad configuration here, not in the page
        self.config = {name: config[name] for name in CONFIG}

    def _repr_html_(self) -> str:
        fields = "".join(
            f'<span><label for="ID-{name}">{label}</label> <input type="number" id="ID-{name}" name="{name}" '
            f'min="1" step="1" value="{self.config[name]}"></span>'
            for name, label in CONFIG.items()
        )
        outputs = "".join(f'<dt>{label}</dt><dd data-name="{name}"></dd>' for name, label in ESTIMATE_LABELS.items())
        body = (
            f'<div class="tb-controls">{fields}</div>'
            '<p class="tb-readout" role="status" aria-live="polite"></p>'
            f"<dl>{outputs}</dl>"
        )
        return _block("memory", {"config": self.config}, body, MEMORY_SCRIPT)

    def __repr__(self) -> str:
        shown = format_estimate(memory_estimate(**self.config))
        return "\n".join(f"{ESTIMATE_LABELS[name]}: {value}" for name, value in shown.items())
