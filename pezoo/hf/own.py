"""What a model's config says of its own position encoding, read for pezoo.hf's families
(``families.py``): the options of the ``hybrid`` that reproduces a model's own layers (Cohere
2's and EXAONE 4's RNoPE-SWA, Llama 4's iRoPE and Beam's NoPE layers with their temperatures,
Gemma 3's, OLMo 3's and gpt-oss's local/global layers, SmolLM3's NoPE layers), which encoding
that is where the config decides it, the model's local attention, its logit soft-capping, and
the configurations refused.

Each reader is a function of the config alone; one that cannot read it raises a ValueError
naming the fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pezoo.encodings.ssmax import BEAM_ATTN_SCALE, BEAM_FLOOR_SCALE

__all__ = ["sliding_window"]


def _gemma2_softcap(config: Any) -> float | None:
    """Gemma 2's attention-logit soft-capping (``attn_logit_softcapping``), or None when it is off."""
    cap = getattr(config, "attn_logit_softcapping", None)
    return None if cap is None else float(cap)


def _windowed_pattern(config: Any, full: str) -> str:
    """A sliding-window model's layers as ``hybrid`` letters: R for each ``sliding_attention``
    layer, ``full`` (N or G) for each ``full_attention`` one; a ValueError naming the fields
    where a layer type is unknown or the window is missing."""
    letters = {"sliding_attention": "R", "full_attention": full}
    kinds = _per_layer(config, "layer_types")
    if kinds is None or {str(kind) for kind in kinds} - set(letters) or not config.sliding_window:
        raise ValueError(
            f"its own encoding cannot be read from its config: layer_types {config.layer_types!r} "
            f"(sliding_attention or full_attention for each of its {config.num_hidden_layers} layers) and "
            f"sliding_window {config.sliding_window!r} (a window in tokens)"
        )
    return "".join(letters[kind] for kind in kinds)


def _per_layer(config: Any, name: str) -> list[Any] | None:
    """``config.<name>`` as a list of one entry per layer, or None where it is not a list or
    tuple of ``num_hidden_layers`` entries (which ``hybrid`` would otherwise repeat or cut
    as a pattern: a config edited out of step with the model's layers)."""
    value = getattr(config, name, None)
    if not isinstance(value, list | tuple) or len(value) != config.num_hidden_layers:
        return None
    return list(value)


def _no_rope_pattern(config: Any) -> str | None:
    """``no_rope_layers`` (Llama 4, SmolLM3: 1 a RoPE layer, 0 a NoPE one) as ``hybrid``
    letters, R and N; None where it is not one 0/1 flag per layer."""
    flags = _per_layer(config, "no_rope_layers")
    if flags is None or any(flag not in (0, 1) for flag in flags):
        return None
    return "".join("R" if flag else "N" for flag in flags)


def _rnope_swa(config: Any) -> dict[str, Any]:
    """Cohere 2's and EXAONE 4's (and EXAONE MoE's) own encoding as ``hybrid``'s options (beyond RoPE's, read by
    ``pezoo.hf._own_rope``): RoPE on their ``sliding_attention`` layers, each key within
    ``sliding_window`` positions (distance < W, as transformers' sliding mask), no position
    encoding on their ``full_attention`` layers (RNoPE-SWA: Yang et al. 2025, "Rope to Nope
    and Back Again", arXiv 2501.18795)."""
    return {"pattern": _windowed_pattern(config, "N"), "window": int(config.sliding_window), "local": "window"}


def _cohere2_moe_hybrid(config: Any) -> dict[str, Any]:
    """Cohere 2 MoE's own encoding: Cohere 2's (:func:`_rnope_swa`), except that where
    ``prefix_dense_sliding_window_pattern`` is 1 its dense-MLP layers (``mlp_layer_types``)
    rotate on their global attention too (transformers' ``force_rope``): G layers, of the same
    RoPE as the R layers."""
    out = _rnope_swa(config)
    if config.prefix_dense_sliding_window_pattern != 1:
        return out
    mlp = _per_layer(config, "mlp_layer_types")
    if mlp is None:
        raise ValueError(
            f"its own encoding cannot be read from its config: mlp_layer_types {config.mlp_layer_types!r} "
            f"(dense or sparse for each of its {config.num_hidden_layers} layers)"
        )
    out["pattern"] = "".join("G" if k == "N" and m == "dense" else k for k, m in zip(out["pattern"], mlp, strict=True))
    return out


def _granite_swa_hybrid(config: Any) -> dict[str, Any]:
    """Granite SWA's own encoding as ``hybrid``'s options: each layer's RoPE base from
    ``layer_rope_theta`` (0: no position encoding), its window from ``layer_types``. A
    windowed RoPE layer is R, a global RoPE layer G, a global one of base 0 N; R layers
    share one base, G layers another. A windowed layer without RoPE, or bases that vary
    within a kind, are beyond ``hybrid`` and refused by field."""
    kinds = _windowed_pattern(config, "G")
    thetas = _per_layer(config, "layer_rope_theta")
    layers = list(zip(kinds, thetas or [], strict=False))  # (R|G, its base) per layer
    letters = "".join("N" if kind == "G" and not theta else kind for kind, theta in layers)
    bases = {kind: {float(theta) for letter, (_, theta) in zip(letters, layers, strict=True) if letter == kind}
             for kind in "RG"}  # fmt: skip
    windowed_nope = any(kind == "R" and not theta for kind, theta in layers)
    if thetas is None or windowed_nope or any(len(b) > 1 for b in bases.values()):
        raise ValueError(
            f"its own encoding cannot be read from its config: layer_rope_theta {config.layer_rope_theta!r} (one "
            f"base for the sliding_attention layers, none of them 0, and one base or 0 for the full_attention ones, "
            f"over its {config.num_hidden_layers} layers)"
        )
    if (config.rope_parameters or {}).get("rope_type", "default") != "default":
        raise ValueError(
            f"its own encoding cannot be read from its config: rope_parameters {config.rope_parameters!r} "
            "(pezoo reads Granite SWA's unscaled RoPE)"
        )
    out: dict[str, Any] = {"pattern": letters, "window": int(config.sliding_window), "local": "window"}
    if bases["R"]:
        out["base"] = bases["R"].pop()
    if bases["G"]:
        out["global_base"] = bases["G"].pop()
    return out


MINISTRAL3_NOT_ROPE = ("llama_4_scaling_beta", "max_position_embeddings")
"""Keys of Ministral 3's ``rope_parameters`` that are not its RoPE's (transformers' own RoPE
validation skips them): the temperature's β, and the extended context's length."""


def _ministral3_own(config: Any) -> str:
    """Ministral 3's own encoding: RoPE, its queries scaled by Llama 4's kind of temperature
    where ``rope_parameters`` gives a ``llama_4_scaling_beta`` (``ssmax:rope`` of form
    ``ministral3``), else plain ``rope``."""
    return "ssmax:rope" if (config.rope_parameters or {}).get("llama_4_scaling_beta") else "rope"


def _ministral3_options(config: Any) -> dict[str, Any]:
    """Ministral 3's own encoding's options: its RoPE's scaling without the keys that are not
    RoPE's, and the temperature's β and F (``original_max_position_embeddings``: the factor
    is 1 within the original context)."""
    params = dict(config.rope_parameters or {})
    out: dict[str, Any] = {}
    cleaned = {k: v for k, v in params.items() if k not in MINISTRAL3_NOT_ROPE}
    if cleaned.get("rope_type", "default") != "default":
        out["scaling"] = cleaned
    if _ministral3_own(config) == "ssmax:rope":
        given = params.get("original_max_position_embeddings")
        integral = isinstance(given, int | float) and not isinstance(given, bool) and float(given).is_integer()
        floor = int(given) if integral else 0  # type: ignore[arg-type]  # integral: a number
        if floor < 1:
            raise ValueError(
                f"its own encoding cannot be read from its config: rope_parameters' original_max_position_embeddings "
                f"{given!r} (the context in tokens its llama_4_scaling_beta counts in)"
            )
        out.update(form="ministral3", attn_scale=float(params["llama_4_scaling_beta"]), floor_scale=floor)
    return out


def _exaone4_own(config: Any) -> str:
    """EXAONE 4's (and EXAONE MoE's) own encoding, which its config decides: RoPE on every
    layer where it has no sliding window; with one, RoPE on the sliding
    layers and none on the global ones, as Cohere 2 (``hybrid``), or ``rope`` where every
    layer is sliding and ``nope`` where every layer is global. A ``layer_types`` that is not
    one kind per layer goes to ``hybrid``, whose reader refuses it by field."""
    if config.sliding_window is None:
        return "rope"
    kinds = _per_layer(config, "layer_types")
    if kinds is not None and set(kinds) == {"sliding_attention"}:
        return "rope"
    if kinds is not None and set(kinds) == {"full_attention"}:
        return "nope"
    return "hybrid"


def _exaone4_options(config: Any) -> dict[str, Any]:
    """EXAONE 4's own encoding's options: Cohere 2's reading where it is ``hybrid``; none
    beyond RoPE's otherwise."""
    return _rnope_swa(config) if _exaone4_own(config) == "hybrid" else {}


def _llama4_hybrid(config: Any) -> dict[str, Any]:
    """Llama 4's own encoding (iRoPE) as ``hybrid``'s options: RoPE on the layers
    ``no_rope_layers`` marks 1, each query seeing its own chunk of ``attention_chunk_size``
    positions; the others global with no position encoding, their queries scaled by the
    attention temperature where ``attn_temperature_tuning`` is on (β ``attn_scale``, F
    ``floor_scale``)."""
    kinds = _no_rope_pattern(config)
    if kinds is None or not config.attention_chunk_size:
        raise ValueError(
            f"its own encoding cannot be read from its config: no_rope_layers {config.no_rope_layers!r} (1: a RoPE "
            f"layer, 0: NoPE, for each of its {config.num_hidden_layers} layers) and attention_chunk_size "
            f"{config.attention_chunk_size!r} (a chunk in tokens)"
        )
    out: dict[str, Any] = {"pattern": kinds, "window": int(config.attention_chunk_size), "local": "chunk"}
    if config.attn_temperature_tuning:
        out.update(nope_temperature="llama4", attn_scale=float(config.attn_scale), floor_scale=int(config.floor_scale))
    return out


def _local_global_hybrid(config: Any) -> dict[str, Any]:
    """Gemma 3's and OLMo 3's own encoding as ``hybrid``'s options: RoPE with a sliding window
    on the ``sliding_attention`` layers (R) and RoPE of its own frequencies with global
    attention on the ``full_attention`` layers (G), each kind's base and scaling from its
    entry of ``rope_parameters`` (Gemma Team 2025, "Gemma 3 Technical Report", arXiv
    2503.19786: bases 10⁴ and 10⁶; OLMo 3: one base, the global layers' scaled in its
    long-context models). gpt-oss gives one ``rope_parameters`` (YaRN) for both kinds."""
    kinds = _windowed_pattern(config, "G")
    params = config.rope_parameters or {}
    local, whole = params.get("sliding_attention"), params.get("full_attention")
    if local is None and whole is None and "rope_type" in params:  # one RoPE on every layer (gpt-oss)
        local = whole = params
    if not isinstance(local, dict) or not isinstance(whole, dict):
        raise ValueError(
            f"its own encoding cannot be read from its config: rope_parameters {params!r} (one entry per layer type)"
        )
    out: dict[str, Any] = {"pattern": kinds, "window": int(config.sliding_window), "local": "window"}
    out.update(_kind_rope(local, "sliding_attention"))
    if "G" in kinds:
        out.update({f"global_{key}": value for key, value in _kind_rope(whole, "full_attention").items()})
    return out


def layer_head_dims(config: Any) -> list[int] | None:
    """Each layer's head width where the config gives one per layer (Gemma 4's
    ``per_layer_config``: its full-attention layers' heads are wider), else None."""
    per_layer = getattr(config, "per_layer_config", None)  # transformers 5 gives every config a view of it
    if per_layer is None:
        return None
    widths: list[Any] = [getattr(per_layer[i], "head_dim", None) for i in range(config.num_hidden_layers)]
    return None if None in widths else [int(w) for w in widths]


def _gemma4_hybrid(config: Any) -> dict[str, Any]:
    """Gemma 4's own encoding as ``hybrid``'s options: Gemma 3's reading (R windowed layers, G
    global ones, each kind's RoPE from its ``rope_parameters`` entry: its global layers'
    ``proportional`` type is p-RoPE, :func:`rope_scaling`), and the G layers' head width where
    it is not the local layers' (``global_head_dim``: 512 against 256 in its checkpoints)."""
    out = _local_global_hybrid(config)
    widths = layer_head_dims(config)
    if widths is not None and "G" in out["pattern"]:
        local = {w for w, kind in zip(widths, out["pattern"], strict=True) if kind == "R"}
        whole = {w for w, kind in zip(widths, out["pattern"], strict=True) if kind == "G"}
        if len(local) > 1 or len(whole) > 1:
            raise ValueError(f"its own encoding cannot be read from its config: head widths {widths} per layer "
                             "(one width for its sliding layers and one for its full ones)")  # fmt: skip
        if whole != local:
            out["global_head_dim"] = whole.pop()
    return out


def rope_scaling(entry: Mapping[str, Any]) -> dict[str, Any] | None:
    """A ``rope_parameters`` entry's scaling as pezoo's RoPE takes it: None for plain RoPE
    (``default``); transformers' ``proportional`` type (Gemma 4's global layers) as p-RoPE,
    which it is (Barbero et al., "Round and Round We Go!", §6: θ_i over the whole head for the
    ⌊p·e/2⌋ highest frequencies, zero for the rest; p in ``partial_rotary_factor``, 1 where
    absent), refused where its ``factor`` also divides every frequency (p-RoPE does not);
    every other type as given, for pezoo's scaling to check."""
    kind = entry.get("rope_type", "default")
    if kind == "default":
        return None
    if kind != "proportional":
        return dict(entry)
    if entry.get("factor", 1.0) != 1.0:
        raise ValueError(
            f"its own encoding cannot be read from its config: proportional RoPE with factor {entry['factor']!r} "
            "(p-RoPE whose frequencies are also divided by a factor; pezoo's p_rope divides none)"
        )
    return {"rope_type": "p_rope", "p": float(entry.get("partial_rotary_factor", 1.0))}


def _kind_rope(entry: Any, kind: str) -> dict[str, Any]:
    """One layer kind's RoPE from its ``rope_parameters`` entry: its base, and its scaling where
    the entry is not plain (:func:`rope_scaling`; a ValueError naming the entry where it is not one)."""
    if not isinstance(entry, dict):
        raise ValueError(
            f"its own encoding cannot be read from its config: rope_parameters[{kind!r}] {entry!r} (the RoPE of "
            f"its {kind} layers)"
        )
    out: dict[str, Any] = {"base": float(entry.get("rope_theta", 10000.0))}
    scaling = rope_scaling(entry)
    if scaling is not None:
        out["scaling"] = scaling
    return out


def _beam_hybrid(config: Any) -> dict[str, Any]:
    """Reflection AI's Beam's own encoding as ``hybrid``'s options: RoPE on its
    ``sliding_attention`` layers (R, the RoPE of their ``rope_parameters`` entry), and on its
    ``full_attention`` layers, whose entry is None (its default), no position encoding, their
    queries scaled by Beam's temperature (1 + (pos + 1)/2048)^0.1 (transformers' ``BeamModel``,
    constants in its code). Where the full layers' entry is a RoPE they rotate (G) and take no
    temperature (Beam scales only the layers without RoPE): Gemma 3's reading."""
    params = config.rope_parameters or {}
    if isinstance(params.get("full_attention"), dict):
        return _local_global_hybrid(config)
    local = params.get("sliding_attention")
    if not isinstance(local, dict) or "full_attention" not in params:
        raise ValueError(
            f"its own encoding cannot be read from its config: rope_parameters {params!r} (one entry per layer "
            "type: the sliding_attention layers' RoPE, and the full_attention layers' or None)"
        )
    out: dict[str, Any] = {"pattern": _windowed_pattern(config, "N"), "window": int(config.sliding_window)}
    out.update(local="window", **_kind_rope(local, "sliding_attention"))
    out.update(nope_temperature="beam", attn_scale=BEAM_ATTN_SCALE, floor_scale=BEAM_FLOOR_SCALE)
    return out


def _laguna_own(config: Any) -> str:
    """Poolside's Laguna's own encoding, which its config decides: ``rope`` where its layers are
    of one kind (every one global by default), ``hybrid`` where ``sliding_attention`` layers
    (R) and ``full_attention`` ones (G, global RoPE of their own) mix. A ``layer_types`` that
    is not one kind per layer goes to ``hybrid``, whose reader refuses it by field."""
    kinds = _per_layer(config, "layer_types")
    return "rope" if kinds is not None and len(set(kinds)) == 1 else "hybrid"


def _laguna_rope(entry: Any, kind: str) -> dict[str, Any]:
    """One layer kind's RoPE as :func:`_kind_rope` reads it, and the fraction of each head it
    rotates (``partial_rotary_factor``: Laguna's global layers rotate half)."""
    out = _kind_rope(entry, kind)
    fraction = entry.get("partial_rotary_factor", 1.0)
    if fraction != 1.0 and entry.get("rope_type") != "proportional":  # there it is p-RoPE's p
        out["rotary_fraction"] = fraction
    return out


def _laguna_options(config: Any) -> dict[str, Any]:
    """Laguna's own encoding's options (its ``rope_parameters`` are keyed by layer kind): the one
    kind's RoPE where it is ``rope``; as ``hybrid``, R layers with the sliding kind's RoPE and
    window, G layers with the full kind's (Gemma 3's reading, each kind rotating its own
    fraction of the head)."""
    params = config.rope_parameters or {}
    if _laguna_own(config) == "rope":
        kind = str(config.layer_types[0])
        return _laguna_rope(params.get(kind), kind)
    out: dict[str, Any] = {"pattern": _windowed_pattern(config, "G"), "window": int(config.sliding_window)}
    out.update(local="window", **_laguna_rope(params.get("sliding_attention"), "sliding_attention"))
    whole = _laguna_rope(params.get("full_attention"), "full_attention")
    out.update({f"global_{key}": value for key, value in whole.items()})
    return out


def _laguna_refusal(config: Any) -> str | None:
    heads = getattr(config, "num_attention_heads_per_layer", None)
    if heads is not None and set(heads) != {config.num_attention_heads}:
        return (
            f"its layers have different head counts (num_attention_heads_per_layer {list(heads)!r}), and a pezoo "
            f"encoding is built for one ({config.num_attention_heads})"
        )
    return None


def _smollm3_own(config: Any) -> str:
    """SmolLM3's own encoding: RoPE on the layers ``no_rope_layers`` marks 1 and none on the
    others (every fourth, by default), all attending globally: ``hybrid``, or ``rope`` or
    ``nope`` where every layer is of one kind. A ``no_rope_layers`` that is not one flag per
    layer goes to ``hybrid``, whose reader refuses it by field."""
    flags = _per_layer(config, "no_rope_layers")
    if flags is not None and set(flags) == {1}:
        return "rope"
    if flags is not None and set(flags) == {0}:
        return "nope"
    return "hybrid"


def _smollm3_options(config: Any) -> dict[str, Any]:
    """SmolLM3's hybrid as ``hybrid``'s options: R where ``no_rope_layers`` is 1, N where 0, no
    window. Its sliding-window variant windows the NoPE layers, which ``hybrid`` (whose window
    belongs to its RoPE layers) does not express: refused by field."""
    if _smollm3_own(config) != "hybrid":
        return {}
    kinds = _no_rope_pattern(config)
    if kinds is None:
        raise ValueError(
            f"its own encoding cannot be read from its config: no_rope_layers {config.no_rope_layers!r} (1: a RoPE "
            f"layer, 0: NoPE, for each of its {config.num_hidden_layers} layers)"
        )
    if config.use_sliding_window and "sliding_attention" in (config.layer_types or ()):
        raise ValueError(
            "its own encoding cannot be read from its config: use_sliding_window windows its NoPE layers "
            f"(layer_types {config.layer_types!r}), and pezoo's hybrid windows its RoPE layers only"
        )
    return {"pattern": kinds, "window": None}


def _bidirectional_refusal(config: Any) -> str | None:
    if getattr(config, "use_bidirectional_attention", False):
        return "it attends bidirectionally (use_bidirectional_attention), and pezoo.hf adapts causal LMs"
    return None


def _opt_refusal(config: Any) -> str | None:
    if config.word_embed_proj_dim != config.hidden_size:
        return (
            f"its token embeddings are {config.word_embed_proj_dim} wide and projected to the hidden size "
            f"{config.hidden_size} inside the decoder, after pezoo's embed hooks would run"
        )
    return None


def sliding_window(config: Any) -> int | None:
    """The model's own local attention's reach, if it has one (pezoo's attention is global): a
    sliding window, or Llama 4's chunks (``attention_chunk_size``: up to that many tokens,
    every token is in the first chunk, so global attention is the model's), or GPT-Neo's
    ``window_size`` where its ``attention_layers`` has a local layer. A window no layer
    uses (``layer_types`` without a ``sliding_attention`` layer: Qwen2 with every layer below
    ``max_window_layers``, an EXAONE 4 of global layers) is none."""
    window = getattr(config, "sliding_window", None)
    if hasattr(config, "use_sliding_window") and not config.use_sliding_window:
        window = None
    kinds = getattr(config, "layer_types", None)
    if isinstance(kinds, list | tuple) and kinds and "sliding_attention" not in kinds:
        window = None
    chunk = getattr(config, "attention_chunk_size", None)
    reach = [int(w) for w in (window, chunk) if w]
    if "local" in (getattr(config, "attention_layers", None) or ()):  # GPT-Neo's local layers
        reach.append(int(config.window_size))
    return min(reach) if reach else None
