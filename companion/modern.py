"""Today's decoder: RMSNorm, a SwiGLU feed-forward, rotary positions inside attention, and
grouped-query attention (GQA) with optional QK-norm: the block of Llama 3, Qwen 3 and nanochat.

Against chapter 7's GPT (GPT-2's design) four things change, each in one place:

* **RMSNorm** (:class:`companion.norm.RMSNorm`, chapter 4) instead of LayerNorm: no centring, no
  shift; one reduction instead of two;
* **SwiGLU** (:class:`SwiGLU`): ``down(silu(gate(x)) * up(x))``, a gated feed-forward with three
  matrices instead of two;
* **rotary position embeddings** (:func:`rotate`) applied to the queries and keys of every head
  inside attention, at the tokens' absolute positions (``offset`` = tokens already cached), instead
  of a learned position table added to the input; two layouts exist (:data:`LAYOUTS`);
* **grouped-query attention** (:class:`GroupedQueryAttention`): ``n_heads`` query heads share
  ``n_kv_heads`` key/value heads, so the KV cache stores ``n_heads / n_kv_heads`` times less; with
  ``qk_norm=True`` each head's queries and keys go through an RMSNorm first (Qwen 3, OLMo 2).

:meth:`ModernGPT.copy_from_hf` copies the weights of a Hugging Face ``LlamaForCausalLM`` (or
``Qwen3ForCausalLM`` with ``qk_norm``) into the companion's model; ``tests/test_modern.py`` checks
the two give the same logits and gradients. The model has the GPT's interface (``forward(idx,
targets, cache=...)``, ``new_cache()``), so chapter 8's decoders run on it unchanged.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .model import GPT, GPTCache
from .multihead import fused_attention
from .norm import RMSNorm
from .positional import apply_rotary
from .validation import (IGNORE_INDEX, check_bool, check_choice, check_float, check_instance, check_int,
                         check_float_dtype, check_tensor, check_token_ids, check_vectors)

#: The two conventions for which features rotate together. ``"interleaved"``: pairs
#: ``(2j, 2j+1)`` (the RoFormer paper, Meta's original Llama code, chapter 5's ``apply_rotary``);
#: ``"halves"``: pairs ``(j, j + d/2)`` (GPT-NeoX, Hugging Face's ``rotate_half``). Frequency ``j``
#: is the same in both; they differ by a fixed permutation of the features (:func:`halves_order`).
LAYOUTS = ("halves", "interleaved")


def rope_frequencies(d_head: int, base: float = 10000.0, dtype: torch.dtype = torch.float64,
                     device=None) -> Tensor:
    """The ``d_head / 2`` angular frequencies ``base ** (-2j / d_head)``. Shapes: -> (d_head/2,)."""
    d_head = check_int("d_head", d_head, minimum=2)
    if d_head % 2:
        raise ValueError(f"`d_head` must be even: features rotate in pairs (got d_head={d_head})")
    check_float("base", base, low=1.0, low_open=True)
    check_float_dtype("dtype", dtype)
    return base ** (-torch.arange(0, d_head, 2, dtype=dtype, device=device) / d_head)


def rotate(x: Tensor, *, offset: int = 0, base: float = 10000.0, layout: str = "halves") -> Tensor:
    """Rotate each pair of features of the token at position ``t = offset + index`` by ``t * w_j``:
    chapter 5's :func:`companion.positional.apply_rotary`, with the layout of Llama and Hugging
    Face (``"halves"``) as the default.

    ``layout`` says which features form pair ``j`` (see :data:`LAYOUTS`). Applied to the queries
    and keys of every head, it makes ``q_i . k_j`` depend on the positions only through ``i - j``.
    ``offset`` is the position of ``x``'s first token (the number of tokens already in a KV cache).

    Shapes:
        x: ``(..., T, d_head)`` with ``d_head`` even, for example ``(B, h, T, d_head)`` -> same.
    """
    if isinstance(x, Tensor) and x.ndim and x.shape[-1] % 2:
        raise ValueError(f"the last dimension of `x` (d_head) must be even: features rotate in pairs (got "
                         f"d_head={x.shape[-1]}, x of shape {tuple(x.shape)})")
    return apply_rotary(x, offset=offset, base=base, layout=layout)


def halves_order(d_head: int) -> Tensor:
    """The permutation from the interleaved layout to the halves layout: ``x[..., halves_order(d)]``
    puts features ``0, 2, 4, ...`` first and ``1, 3, 5, ...`` second, so that

    ``rotate(x[..., p], layout="halves") == rotate(x, layout="interleaved")[..., p]``.

    To move a trained model from one layout to the other, permute the output rows of every head's
    block of ``W_Q`` and ``W_K`` (the same permutation for both, so ``q . k`` is unchanged).
    Shapes: -> ``(d_head,)`` LongTensor.
    """
    d_head = check_int("d_head", d_head, minimum=2)
    if d_head % 2:
        raise ValueError(f"`d_head` must be even (got {d_head})")
    return torch.cat([torch.arange(0, d_head, 2), torch.arange(1, d_head, 2)])


def repeat_kv(x: Tensor, groups: int) -> Tensor:
    """Each key/value head repeated for the ``groups`` query heads that share it.

    Shapes: ``(B, h_kv, S, d_head)`` -> ``(B, h_kv * groups, S, d_head)``; query head ``i`` reads
    key/value head ``i // groups``.
    """
    check_tensor("x", x, shape=("B", "h_kv", "S", "d_head"))
    groups = check_int("groups", groups, minimum=1)
    B, h_kv, S, d = x.shape
    return x[:, :, None].expand(B, h_kv, groups, S, d).reshape(B, h_kv * groups, S, d)


class SwiGLU(nn.Module):
    """The gated feed-forward of Llama: ``down(silu(gate(x)) * up(x))`` (Shazeer, 2020).

    Three ``d_model x d_ff`` matrices instead of GELU's two: at equal parameters ``d_ff`` is about
    ``2/3`` of GELU's ``4 d_model`` (Llama uses ``8/3 d_model``, rounded up).

    Shapes: ``(..., d_model)`` -> ``(..., d_model)``.
    """

    def __init__(self, d_model: int, d_ff: int, *, bias: bool = False):
        super().__init__()
        check_int("d_model", d_model, minimum=1)
        check_int("d_ff", d_ff, minimum=1)
        check_bool("bias", bias)
        self.gate_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        check_vectors("x", x, self.gate_proj.in_features, shape=("...",), like=self.gate_proj.weight)
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))  # (..., d_ff) -> (..., d_model)


class GroupedQueryAttention(nn.Module):
    """Causal self-attention with rotary positions and ``n_kv_heads`` key/value heads shared by
    ``n_heads`` query heads (``n_kv_heads = n_heads``: ordinary multi-head attention; ``1``:
    multi-query attention).

    Shapes:
        x: ``(B, T, d_model)``; with ``cache`` (a :class:`companion.attention.KVCache`), ``T`` new
        tokens at positions ``len(cache) ...``; the cache stores ``(B, n_kv_heads, S, d_head)``.
        returns ``(B, T, d_model)``.

    Non-finite inputs (NaN, inf) are legitimate and give NaN outputs, as in ``torch.nn`` modules:
    a check would cost a host-device synchronization in every layer of every step on a GPU.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, *, d_head: int | None = None,
                 qk_norm: bool = False, rope_base: float = 10000.0, rope_layout: str = "halves",
                 norm_eps: float = 1e-6, bias: bool = False):
        super().__init__()
        check_int("d_model", d_model, minimum=1)
        check_int("n_heads", n_heads, minimum=1)
        check_int("n_kv_heads", n_kv_heads, minimum=1)
        if n_heads % n_kv_heads:
            raise ValueError(f"`n_heads` must be a multiple of `n_kv_heads`: each key/value head serves the same "
                             f"number of query heads (got n_heads={n_heads}, n_kv_heads={n_kv_heads})")
        if d_head is None:
            if d_model % n_heads:
                raise ValueError(f"`d_model` must be divisible by `n_heads` (got d_model={d_model}, n_heads={n_heads}), "
                                 "or give d_head")
            d_head = d_model // n_heads
        check_int("d_head", d_head, minimum=2)
        if d_head % 2:
            raise ValueError(f"`d_head` must be even for rotary embeddings (got {d_head})")
        check_choice("rope_layout", rope_layout, LAYOUTS)
        check_bool("qk_norm", qk_norm)
        check_float("rope_base", rope_base, low=1.0, low_open=True)
        check_float("norm_eps", norm_eps, low=0.0, low_open=True)
        check_bool("bias", bias)
        self.d_model = d_model
        self.n_heads, self.n_kv_heads, self.d_head = n_heads, n_kv_heads, d_head
        self.rope_base, self.rope_layout = float(rope_base), rope_layout
        self.q_proj = nn.Linear(d_model, n_heads * d_head, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * d_head, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * d_head, bias=bias)
        self.o_proj = nn.Linear(n_heads * d_head, d_model, bias=bias)
        self.q_norm = RMSNorm(d_head, eps=norm_eps) if qk_norm else None
        self.k_norm = RMSNorm(d_head, eps=norm_eps) if qk_norm else None

    def forward(self, x: Tensor, *, cache=None) -> Tensor:
        check_vectors("x", x, self.d_model, like=self.q_proj.weight)
        if cache is not None:
            from .attention import KVCache
            check_instance("cache", cache, KVCache, "None or a companion.attention.KVCache",
                           hint="a model's cache holds one per layer: cache.layers[i]")
        B, T, _ = x.shape
        h, h_kv, d = self.n_heads, self.n_kv_heads, self.d_head
        q = self.q_proj(x).view(B, T, h, d).transpose(1, 2)  # (B, T, h*d) -> (B, h, T, d)
        k = self.k_proj(x).view(B, T, h_kv, d).transpose(1, 2)  # (B, h_kv, T, d)
        v = self.v_proj(x).view(B, T, h_kv, d).transpose(1, 2)  # (B, h_kv, T, d)
        if self.q_norm is not None:  # QK-norm: each head's vectors normalized before the rotation
            q, k = self.q_norm(q), self.k_norm(k)
        start = 0 if cache is None else len(cache)  # absolute position of the first new token
        q = rotate(q, offset=start, base=self.rope_base, layout=self.rope_layout)
        k = rotate(k, offset=start, base=self.rope_base, layout=self.rope_layout)
        if cache is not None:
            k, v = cache.append(k, v)  # (B, h_kv, S, d): only the shared heads are stored
        S = k.shape[2]
        k, v = repeat_kv(k, h // h_kv), repeat_kv(v, h // h_kv)  # (B, h, S, d)
        # new token t (absolute position start + t) sees keys 0 .. start + t
        mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)  # (T, S)
        y = fused_attention(q, k, v, attn_mask=mask)  # (B, h, T, d)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, h * d))  # (B, T, h*d) -> (B, T, d_model)


class ModernBlock(nn.Module):
    """Pre-norm block: ``x + attn(rms1(x))``, then ``x + swiglu(rms2(x))``. Shapes: (B, T, d_model)."""

    def __init__(self, config: "ModernConfig"):
        super().__init__()
        c = config
        self.norm1 = RMSNorm(c.d_model, eps=c.norm_eps)
        self.attn = GroupedQueryAttention(c.d_model, c.n_heads, c.n_kv_heads, d_head=c.d_head, qk_norm=c.qk_norm,
                                          rope_base=c.rope_base, rope_layout=c.rope_layout, norm_eps=c.norm_eps)
        self.norm2 = RMSNorm(c.d_model, eps=c.norm_eps)
        self.ff = SwiGLU(c.d_model, c.d_ff)

    def forward(self, x: Tensor, *, cache=None) -> Tensor:
        x = x + self.attn(self.norm1(x), cache=cache)  # (B, T, d_model)
        return x + self.ff(self.norm2(x))


@dataclass(frozen=True)
class ModernConfig:
    """Everything needed to build a :class:`ModernGPT`. Names follow the book; Hugging Face's in
    brackets."""

    vocab_size: int = 69  # distinct tokens [vocab_size]
    context_length: int = 64  # longest input; RoPE itself has no limit [max_position_embeddings]
    d_model: int = 128  # [hidden_size]
    n_layers: int = 4  # [num_hidden_layers]
    n_heads: int = 4  # query heads [num_attention_heads]
    n_kv_heads: int = 4  # key/value heads, a divisor of n_heads [num_key_value_heads]
    d_ff: int | None = None  # SwiGLU width; None: 8/3 d_model rounded up to a multiple of 8 [intermediate_size]
    d_head: int | None = None  # None: d_model / n_heads [head_dim]
    rope_base: float = 10000.0  # [rope_theta]
    rope_layout: str = "halves"  # "halves" (HF) or "interleaved" (RoFormer)
    qk_norm: bool = False  # RMSNorm on each head's queries and keys (Qwen 3)
    norm_eps: float = 1e-6  # [rms_norm_eps]
    tie_embeddings: bool = True  # output head shares the token embedding [tie_word_embeddings]

    def __post_init__(self):
        for name in ("vocab_size", "context_length", "d_model", "n_layers", "n_heads", "n_kv_heads"):
            check_int(name, getattr(self, name), minimum=1)
        if self.d_ff is not None:
            check_int("d_ff", self.d_ff, minimum=1, hint="use d_ff=None for 8/3 d_model")
        if self.d_head is not None:
            check_int("d_head", self.d_head, minimum=2)
        elif self.d_model % self.n_heads:
            raise ValueError(f"`d_model` must be divisible by `n_heads` (got d_model={self.d_model}, "
                             f"n_heads={self.n_heads}), or give d_head")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"`n_heads` must be a multiple of `n_kv_heads` (got n_heads={self.n_heads}, "
                             f"n_kv_heads={self.n_kv_heads})")
        check_float("rope_base", self.rope_base, low=1.0, low_open=True)
        check_choice("rope_layout", self.rope_layout, LAYOUTS)
        check_bool("qk_norm", self.qk_norm)
        check_float("norm_eps", self.norm_eps, low=0.0, low_open=True)
        check_bool("tie_embeddings", self.tie_embeddings)
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 8 * math.ceil(8 * self.d_model / 3 / 8))
        if self.d_head is None:
            object.__setattr__(self, "d_head", self.d_model // self.n_heads)
        if self.d_head % 2:
            raise ValueError(f"`d_head` must be even for rotary embeddings (got {self.d_head})")

    def to_dict(self) -> dict:
        return asdict(self)

    def kv_cache_bytes(self, batch_size: int, length: int, bytes_per_number: int = 2) -> int:
        """Bytes of the KV cache for ``batch_size`` sequences of ``length`` tokens: keys and values,
        every layer, ``n_kv_heads`` heads of ``d_head`` numbers (2 bytes each in bfloat16).
        A batch or a length of 0 is legitimate (an empty cache: 0 bytes)."""
        batch_size = check_int("batch_size", batch_size, minimum=0)
        length = check_int("length", length, minimum=0)
        bytes_per_number = check_int("bytes_per_number", bytes_per_number, minimum=1,
                                     hint="2 for bfloat16, 4 for float32")
        return 2 * self.n_layers * batch_size * length * self.n_kv_heads * self.d_head * bytes_per_number


def _hf_rope(config) -> tuple:
    """``(rope_type, rope_theta, partial_rotary_factor)`` of a transformers config, old or new style."""
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    theta = params.get("rope_theta", getattr(config, "rope_theta", None))
    kind = params.get("rope_type", params.get("type", "default"))
    partial = params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0))
    return kind, theta, partial


def _hf_differences(hf_model, c: "ModernConfig") -> list[str]:
    """Each setting in which a Hugging Face causal LM differs from ``c``; a wrong kind of model is a TypeError."""
    config = getattr(hf_model, "config", None)
    kind = getattr(config, "model_type", None)
    if not isinstance(hf_model, nn.Module) or kind not in ("llama", "qwen3"):
        raise TypeError(f"`hf_model` must be a transformers LlamaForCausalLM or Qwen3ForCausalLM (got "
                        f"{type(hf_model).__name__}{'' if kind is None else f', model_type={kind!r}'})")
    if not c.tie_embeddings and not isinstance(getattr(hf_model, "lm_head", None), nn.Linear):
        raise TypeError(f"`hf_model` has no output head (got {type(hf_model).__name__}) but this model's head is "
                        "untied (tie_embeddings=False): pass the ForCausalLM model")
    rope_type, theta, partial = _hf_rope(config)
    sliding = [t for t in (getattr(config, "layer_types", None) or []) if t != "full_attention"]
    if getattr(config, "layer_types", None) is None and getattr(config, "use_sliding_window", False):
        sliding = ["sliding_attention"]
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    pairs = [
        ("model_type", kind, "qwen3" if c.qk_norm else "llama",
         f"qk_norm={c.qk_norm} ({'a Qwen 3 has QK-norm' if c.qk_norm else 'a Llama has no QK-norm'})"),
        ("vocab_size", config.vocab_size, c.vocab_size, "vocab_size"),
        ("hidden_size", config.hidden_size, c.d_model, "d_model"),
        ("intermediate_size", config.intermediate_size, c.d_ff, "d_ff"),
        ("num_hidden_layers", config.num_hidden_layers, c.n_layers, "n_layers"),
        ("num_attention_heads", config.num_attention_heads, c.n_heads, "n_heads"),
        ("num_key_value_heads", kv_heads, c.n_kv_heads, "n_kv_heads"),
        ("head_dim", head_dim, c.d_head, "d_head"),
        ("rms_norm_eps", config.rms_norm_eps, c.norm_eps, "norm_eps"),
        ("rope_theta", theta, c.rope_base, "rope_base"),
        ("rope_type", rope_type, "default", "plain RoPE, always"),
        ("partial_rotary_factor", partial, 1.0, "every feature rotated, always"),
        ("tie_word_embeddings", bool(getattr(config, "tie_word_embeddings", False)), c.tie_embeddings,
         "tie_embeddings"),
        ("attention_bias", bool(getattr(config, "attention_bias", False)), False, "no biases, always"),
        ("mlp_bias", bool(getattr(config, "mlp_bias", False)), False, "no biases, always"),
        ("hidden_act", config.hidden_act, "silu", "SwiGLU's SiLU, always"),
        ("layer_types", sliding[:1] or None, None, "full attention in every layer, always"),
    ]
    out = []
    for hf_name, theirs, ours, our_name in pairs:
        if theirs != ours:
            if hf_name == "model_type":
                out.append(f"model_type: Hugging Face {theirs!r}, this model {our_name}")
            elif "always" in our_name:
                out.append(f"{hf_name}: Hugging Face {theirs!r}, this model {ours!r} ({our_name})")
            else:
                out.append(f"{hf_name}: Hugging Face {theirs!r}, this model {our_name}={ours!r}")
    return out


def _check_hf_shapes(model: "ModernGPT", hf_model) -> None:
    """Every tensor to copy has our shape (a model whose weights disagree with its config is refused
    before anything is copied)."""
    ours = dict(model.named_parameters(remove_duplicate=False))
    renames = [("tok_emb.", "model.embed_tokens."), ("final_norm.", "model.norm."), ("blocks.", "model.layers."),
               (".attn.", ".self_attn."), (".norm1.", ".input_layernorm."), (".norm2.", ".post_attention_layernorm."),
               (".ff.", ".mlp.")]
    theirs = dict(hf_model.named_parameters(remove_duplicate=False))
    if not any(k.startswith("model.") for k in theirs):  # a bare LlamaModel
        theirs = {f"model.{k}": v for k, v in theirs.items()}
    for name, p in ours.items():
        if name == "head.weight" and model.config.tie_embeddings:
            continue
        hf_name = "lm_head." + name[len("head."):] if name.startswith("head.") else name
        for a, b in renames:
            hf_name = hf_name.replace(a, b)
        t = theirs.get(hf_name)
        if t is None or tuple(t.shape) != tuple(p.shape):
            got = "no such tensor" if t is None else f"shape {tuple(t.shape)}"
            raise ValueError(f"`hf_model`'s {hf_name} has {got}, this model's {name} has shape {tuple(p.shape)}: "
                             "its weights do not have the shapes its config gives")


class ModernGPT(nn.Module):
    """A decoder-only language model with :class:`ModernBlock` blocks and no position table.

    Shapes: as :class:`companion.model.GPT`: idx (B, T) -> logits (B, T, vocab_size) and, with
    targets, the mean cross-entropy (``-100`` targets left out).
    """

    def __init__(self, config: ModernConfig):
        super().__init__()
        check_instance("config", config, ModernConfig, "a ModernConfig")
        self.config = c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        self.blocks = nn.ModuleList(ModernBlock(c) for _ in range(c.n_layers))
        self.final_norm = RMSNorm(c.d_model, eps=c.norm_eps)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_embeddings:
            self.head.weight = self.tok_emb.weight
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """N(0, 0.02^2) for every matrix, the residual outputs scaled by 1/sqrt(2 n_layers) as in
        the GPT; norms start as the identity."""
        std, resid_std = 0.02, 0.02 / math.sqrt(2 * self.config.n_layers)
        for name, p in self.named_parameters():
            if p.ndim >= 2:
                residual = name.endswith("o_proj.weight") or name.endswith("down_proj.weight")
                nn.init.normal_(p, mean=0.0, std=resid_std if residual else std)
            elif name.endswith("weight"):
                nn.init.ones_(p)
            else:
                nn.init.zeros_(p)

    def num_parameters(self) -> int:
        """Distinct parameters (a tied head counts once)."""
        return sum(p.numel() for p in self.parameters())

    def new_cache(self) -> GPTCache:
        """An empty KV cache: one :class:`~companion.attention.KVCache` per layer."""
        return GPTCache(self.config.n_layers)

    #: The GPT's short sampler (:meth:`companion.model.GPT.generate`); chapter 8's decoders
    #: (:mod:`companion.decoding`) take this model as they take the GPT.
    generate = GPT.generate

    def forward(self, idx: Tensor, targets: Tensor | None = None, *, cache: GPTCache | None = None):
        c = self.config
        check_tensor("idx", idx, shape=("B", "T"), hint="for one sequence of shape (T,) pass idx[None]")
        check_token_ids("idx", idx, c.vocab_size)
        B, T = idx.shape
        start = 0
        if cache is not None:
            check_instance("cache", cache, GPTCache, "a GPTCache", hint="make one with model.new_cache()")
            if len(cache.layers) != c.n_layers:
                raise ValueError(f"`cache` was made for {len(cache.layers)} layers, this model has n_layers={c.n_layers}; "
                                 "make one with model.new_cache()")
            start = len(cache)
            if start and cache.batch_size != B:
                raise ValueError(f"`cache` holds {cache.batch_size} sequences but `idx` has batch size B={B}; start a "
                                 "new one with model.new_cache(), or keep rows with cache.reorder(index)")
        if start + T > c.context_length:
            raise ValueError(f"the sequence is longer than the model's context: {start} cached + {T} new positions "
                             f"> context_length={c.context_length}; "
                             + (f"crop `idx` to its last {c.context_length - start} tokens" if start < c.context_length
                                else "the cache is full: start a new one with model.new_cache()"))
        x = self.tok_emb(idx)  # (B, T, d_model): no position table, positions enter inside attention
        for i, block in enumerate(self.blocks):
            x = block(x, cache=None if cache is None else cache.layers[i])
        logits = self.head(self.final_norm(x))  # (B, T, V)
        loss = None
        if targets is not None:
            check_tensor("targets", targets, shape=("B", "T"))
            if targets.shape != idx.shape:
                raise ValueError(f"`targets` must have the shape of `idx` {tuple(idx.shape)} (got {tuple(targets.shape)})")
            check_token_ids("targets", targets, c.vocab_size, ignore_index=IGNORE_INDEX, long_only=True,
                            hint=f"{IGNORE_INDEX} marks a position left out of the loss")
            flat = logits.reshape(B * T, -1)
            nll = F.cross_entropy(flat if flat.dtype != torch.float16 else flat.float(), targets.reshape(B * T),
                                  reduction="sum")
            loss = nll / (targets != IGNORE_INDEX).sum().clamp(min=1)
        return logits, loss

    # ------------------------------------------------------------------ Hugging Face
    def hf_config(self):
        """The ``transformers`` config of the same model: ``LlamaConfig``, or ``Qwen3Config`` when
        ``qk_norm`` (imported here: transformers is needed only for this).

        Hugging Face's configs require ``hidden_size`` to be a multiple of ``num_attention_heads``
        even when ``head_dim`` is given (``d_model=30, n_heads=4, d_head=8`` is refused): such a
        model has no Hugging Face config, and this says so before transformers is imported.
        ``d_model != n_heads * d_head`` is legitimate when the division is exact (``d_model=32,
        n_heads=4, d_head=12``): the tests copy such a model both ways, with equal logits."""
        c = self.config
        if c.d_model % c.n_heads:
            raise ValueError(f"this model has no Hugging Face config: transformers requires hidden_size to be a "
                             f"multiple of num_attention_heads, even with head_dim given (got d_model={c.d_model}, "
                             f"n_heads={c.n_heads}, d_head={c.d_head} in `self.config`); choose d_model a multiple "
                             f"of n_heads")
        common = dict(vocab_size=c.vocab_size, hidden_size=c.d_model, intermediate_size=c.d_ff,
                      num_hidden_layers=c.n_layers, num_attention_heads=c.n_heads, num_key_value_heads=c.n_kv_heads,
                      head_dim=c.d_head, max_position_embeddings=c.context_length, rms_norm_eps=c.norm_eps,
                      tie_word_embeddings=c.tie_embeddings, attention_bias=False,
                      rope_parameters={"rope_type": "default", "rope_theta": c.rope_base})
        if c.qk_norm:
            from transformers import Qwen3Config
            return Qwen3Config(**common, use_sliding_window=False)
        from transformers import LlamaConfig
        return LlamaConfig(**common, mlp_bias=False)

    @torch.no_grad()
    def copy_from_hf(self, hf_model: nn.Module) -> "ModernGPT":
        """Copy the weights of a Hugging Face ``LlamaForCausalLM``/``Qwen3ForCausalLM`` of the same
        shape. HF rotates halves; into an ``"interleaved"`` model the rows of each head's ``W_Q`` and
        ``W_K`` are permuted (:func:`halves_order`), so the two compute the same function.

        Every setting that changes the function is compared first, and each difference is named
        (nothing is copied then): sizes, heads, key/value heads, ``head_dim``, ``rms_norm_eps``,
        ``rope_theta`` and the rope type, QK-norm (a Qwen 3 has it, a Llama not), the tied head,
        attention and MLP biases, the activation, sliding windows. ``max_position_embeddings`` is not
        compared: it does not change the function (RoPE has no table), only ``context_length`` limits
        this model's input."""
        c = self.config
        differences = _hf_differences(hf_model, c)
        if differences:
            raise ValueError(f"`hf_model` computes another function than this model; {len(differences)} setting"
                             f"{'s differ' if len(differences) > 1 else ' differs'}: " + "; ".join(differences)
                             + ". Build this model from a ModernConfig with the same settings")
        base = getattr(hf_model, "model", hf_model)
        if len(base.layers) != c.n_layers:
            raise ValueError(f"the Hugging Face model has {len(base.layers)} layers, this one n_layers={c.n_layers}")
        _check_hf_shapes(self, hf_model)
        inverse = torch.argsort(halves_order(c.d_head))  # halves feature -> interleaved feature

        def qk(weight: Tensor, heads: int) -> Tensor:
            if c.rope_layout == "halves":
                return weight
            w = weight.view(heads, c.d_head, -1)  # (heads, d_head, d_model): rows of each head
            return w[:, inverse].reshape_as(weight)

        self.tok_emb.weight.copy_(base.embed_tokens.weight)
        for ours, theirs in zip(self.blocks, base.layers):
            a, t = ours.attn, theirs.self_attn
            a.q_proj.weight.copy_(qk(t.q_proj.weight, c.n_heads))
            a.k_proj.weight.copy_(qk(t.k_proj.weight, c.n_kv_heads))
            a.v_proj.weight.copy_(t.v_proj.weight)
            a.o_proj.weight.copy_(t.o_proj.weight)
            if c.qk_norm:
                inv = inverse if c.rope_layout == "interleaved" else torch.arange(c.d_head)
                a.q_norm.weight.copy_(t.q_norm.weight[inv])
                a.k_norm.weight.copy_(t.k_norm.weight[inv])
            ours.norm1.weight.copy_(theirs.input_layernorm.weight)
            ours.norm2.weight.copy_(theirs.post_attention_layernorm.weight)
            ours.ff.gate_proj.weight.copy_(theirs.mlp.gate_proj.weight)
            ours.ff.up_proj.weight.copy_(theirs.mlp.up_proj.weight)
            ours.ff.down_proj.weight.copy_(theirs.mlp.down_proj.weight)
        self.final_norm.weight.copy_(base.norm.weight)
        if not c.tie_embeddings:
            self.head.weight.copy_(hf_model.lm_head.weight)
        return self


# ---------------------------------------------------------------------------------- Muon
#: Coefficients of the quintic ``a X + b (X X^T) X + c (X X^T)^2 X`` of Keller Jordan's Muon: chosen
#: to push every singular value of a normalized matrix towards 1 in few steps (not exactly to 1:
#: they end between about 0.7 and 1.2, which trains as well).
NEWTON_SCHULZ = (3.4445, -4.7750, 2.0315)


def orthogonalize(g: Tensor, steps: int = 5) -> Tensor:
    """The matrix nearest ``g`` with all singular values about 1 (``U V^T`` of ``g = U S V^T``),
    by ``steps`` Newton-Schulz iterations: only matrix products, no SVD.

    Shapes: ``(m, n)`` -> ``(m, n)``. ``steps >= 1`` (0 steps would only normalize ``g``), as
    :class:`Muon`'s ``ns_steps``. A non-finite ``g`` (NaN, inf) is legitimate and gives a NaN
    matrix, as in torch's own functions: a check would cost a host-device synchronization for every
    matrix at every step of :class:`Muon` on a GPU.
    """
    check_tensor("g", g, shape=("m", "n"), dtype="float")
    check_int("steps", steps, minimum=1, hint="0 steps would only normalize `g`, not orthogonalize it")
    a, b, c = NEWTON_SCHULZ
    wide = g.shape[0] <= g.shape[1]
    x = g if wide else g.T  # (small, large): X X^T is the small square
    x = x / (x.norm() + 1e-7)  # every singular value now <= 1, where the iteration converges
    for _ in range(steps):
        s = x @ x.T  # (small, small)
        x = a * x + (b * s + c * s @ s) @ x
    return x if wide else x.T


class Muon(torch.optim.Optimizer):
    """Momentum, then orthogonalized (Jordan et al., 2024): for the weight matrices of the blocks.

    Each step keeps a momentum buffer ``m = beta m + (1 - beta) g``, takes the Nesterov look-ahead
    ``u = (1 - beta) g + beta m``, replaces it by :func:`orthogonalize` ``(u)`` (every direction
    of the update moves by the same amount, however small its gradient was) and moves the weight
    by ``lr * sqrt(max(1, rows / cols))`` times that, after a decoupled weight decay. Embeddings,
    the output head and the norms' gains stay with AdamW (:func:`companion.train.make_optimizer`).
    """

    def __init__(self, params, lr: float = 0.02, momentum: float = 0.95, weight_decay: float = 0.0,
                 ns_steps: int = 5):
        check_float("lr", lr, low=0.0, low_open=True)
        check_float("momentum", momentum, low=0.0, high=1.0, high_open=True)
        check_float("weight_decay", weight_decay, low=0.0)
        check_int("ns_steps", ns_steps, minimum=1)
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, ns_steps=ns_steps))
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim != 2:
                    raise ValueError(f"Muon updates matrices only (got a parameter of shape {tuple(p.shape)}); "
                                     "give vectors and embeddings to AdamW")

    @torch.no_grad()
    def step(self, closure=None):
        loss = None if closure is None else closure()
        for group in self.param_groups:
            beta, lr = group["momentum"], group["lr"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.lerp_(p.grad, 1 - beta)  # m = beta m + (1 - beta) g
                update = p.grad.lerp(buf, beta)  # Nesterov: (1 - beta) g + beta m
                p.mul_(1 - lr * group["weight_decay"])
                p.add_(orthogonalize(update, group["ns_steps"]), alpha=-lr * max(1.0, p.shape[0] / p.shape[1]) ** 0.5)
        return loss


class MuonWithAdamW:
    """Two optimizers stepped as one, for :class:`companion.train.Trainer`: ``param_groups`` lists
    the groups of both (Muon's carry ``lr_scale``, the ratio of its peak to AdamW's)."""

    def __init__(self, muon: Muon, adamw: torch.optim.Optimizer):
        if isinstance(adamw, Muon) and not isinstance(muon, Muon):
            raise TypeError(f"MuonWithAdamW(muon, adamw) takes the Muon first, then the AdamW (got "
                            f"{type(muon).__name__}, {type(adamw).__name__}): swap the two arguments")
        check_instance("muon", muon, Muon, "a companion.modern.Muon")
        check_instance("adamw", adamw, torch.optim.Optimizer, "a torch.optim.Optimizer such as AdamW")
        if isinstance(adamw, Muon):
            raise TypeError("`adamw` must be the optimizer of the vectors and embeddings, such as AdamW (got a "
                            "second Muon)")
        self.muon, self.adamw = muon, adamw

    @property
    def param_groups(self) -> list:
        return self.muon.param_groups + self.adamw.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.muon.zero_grad(set_to_none=set_to_none), self.adamw.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        self.muon.step(), self.adamw.step()

    def state_dict(self) -> dict:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if not isinstance(state, dict) or not {"muon", "adamw"} <= set(state):
            got = sorted(map(str, state)) if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"`state` must be a MuonWithAdamW.state_dict(), a dict with keys 'muon' and 'adamw' "
                             f"(got keys {got}); a single optimizer's state dict holds only one of the two")
        self.muon.load_state_dict(state["muon"]), self.adamw.load_state_dict(state["adamw"])
