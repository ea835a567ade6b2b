"""The backbone with every registered encoding: causality, incremental decoding, backends."""

from __future__ import annotations

import pytest
import torch

import pezoo
from harness.training.backbone import Backbone, BackboneConfig
from pezoo.backends import flex_compile, xformers_available

ENCODINGS = pezoo.available()
# xformers runs only on CUDA; flex runs uncompiled here (its compiled kernel is tested in tests/pezoo)
BACKENDS = [b for b in sorted(pezoo.BACKENDS) if b != "xformers" or xformers_available()]


@pytest.fixture(autouse=True)
def _uncompiled_flex():
    with flex_compile(False):
        yield


def build(name: str, backend: str = "eager", seed: int = 0) -> Backbone:
    cfg = BackboneConfig(d_model=32, n_layers=2, n_heads=4, backend=backend)
    torch.manual_seed(seed)  # before the encoding too: a randomly initialised one must be the same for every backend
    pe = pezoo.create(name, dims=pezoo.ModelDims(cfg.d_model, cfg.n_heads, cfg.n_layers))
    return Backbone(cfg, pe).eval()


def hint(b: int, s: int) -> torch.Tensor:
    return torch.full((b,), s)


@pytest.mark.parametrize("name", ENCODINGS)
def test_no_future_leakage(name):
    """Changing token t changes no output at positions before t."""
    model = build(name)
    tokens = torch.randint(0, 64, (2, 14), generator=torch.Generator().manual_seed(1))
    changed = tokens.clone()
    t = 9
    changed[:, t] = (changed[:, t] + 1) % 64
    pos = model.pe.positions(2, 14)  # once: randomized PE draws new positions per call, in eval mode too

    def run(x):
        return model(x, state=model.start_state(2, 14, positions=pos), scale_hint=hint(2, 14))

    with torch.no_grad():
        a, b = run(tokens), run(changed)
    torch.testing.assert_close(a[:, :t], b[:, :t], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(a[:, t:], b[:, t:])


@pytest.mark.parametrize("name", ENCODINGS)
def test_incremental_decoding_equals_full_forward(name):
    model = build(name)
    tokens = torch.randint(0, 64, (3, 13), generator=torch.Generator().manual_seed(2))
    pos = model.pe.positions(3, 13)  # planned once for both (random for randomized PE)
    with torch.no_grad():
        full = model(tokens, state=model.start_state(3, 13, positions=pos), scale_hint=hint(3, 13))
        state = model.start_state(3, 13, positions=pos)
        parts = [model(tokens[:, :4], state=state, scale_hint=hint(3, 13))]
        parts += [model(tokens[:, t : t + 1], state=state, scale_hint=hint(3, 13)) for t in range(4, 13)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", ENCODINGS)
def test_backends_agree_in_the_backbone(name):
    tokens = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(3))
    outs = {}
    with torch.no_grad():
        for backend in BACKENDS:
            outs[backend] = build(name, backend)(tokens, scale_hint=hint(2, 12))
    for backend, out in outs.items():
        torch.testing.assert_close(out, outs["eager"], atol=1e-4, rtol=1e-4, msg=backend)


@pytest.mark.parametrize("options", [{"d_pe": 64}, {"n_cursors": 4, "d_pe": 96, "copy_cursors": (0,)}])
def test_prism_training_pass_equals_decoding(options, monkeypatch):
    """A pass without a state (training) drops its state, so PRISM adds its position score
    as a bias (docs/prism.md, reading J); decoding keeps the state and widens q/k. Same logits."""
    from pezoo.encodings.prism import encoding as prism_encoding

    chosen: list[bool] = []
    decide = prism_encoding.scores_as_bias
    monkeypatch.setattr(prism_encoding, "scores_as_bias", lambda *a: chosen.append(decide(*a)) or chosen[-1])
    cfg = BackboneConfig(d_model=32, n_layers=2, n_heads=4)
    torch.manual_seed(0)
    model = Backbone(cfg, pezoo.create("prism", dims=pezoo.ModelDims(32, 4, 2), **options)).eval()
    tokens = torch.randint(0, 64, (3, 13), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(tokens)
        assert chosen == [True, True]
        state = model.start_state(3, 13)
        parts = [model(tokens[:, :4], state=state)] + [model(tokens[:, t : t + 1], state=state) for t in range(4, 13)]
    assert not any(chosen[2:])
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-4, rtol=1e-4)


def test_state_planned_too_short_is_a_clear_error():
    model = build("rope")
    state = model.start_state(1, 3)
    with pytest.raises(ValueError, match="planned for 3 tokens"):
        model(torch.zeros(1, 5, dtype=torch.long), state=state)


def test_draws_handed_to_a_decoding_step_are_a_clear_error():
    """Planned draws (``pe.plan_draws``) seed a full pass; a decoding state holds its own,
    so handing them to a step is refused, as positions are, before anything is computed."""
    model = build("rope")
    state = model.start_state(1, 4)
    with pytest.raises(ValueError, match="positions and draws are for a full pass"):
        model(torch.zeros(1, 2, dtype=torch.long), state=state, draws={})
    assert state["length"] == 0  # nothing fed


def test_attention_probabilities_are_returned_by_eager():
    model = build("alibi")
    logits, probs = model(torch.zeros(1, 6, dtype=torch.long), return_probs=True)
    assert logits.shape == (1, 6, 64) and len(probs) == 2
    torch.testing.assert_close(probs[0].sum(-1), torch.ones(1, 4, 6))
    assert torch.all(probs[0].triu(1) == 0)  # causal


def test_an_untied_head_is_a_layer_of_its_own_and_a_tied_model_is_unchanged():
    """``head="untied"``: the logits are read through the model's own output layer (the input
    embedding no longer reaches them that way); the default tied model makes the same
    draws and the same parameters as before the option existed (no head module)."""
    dims = pezoo.ModelDims(32, 4, 2)
    torch.manual_seed(0)
    tied = Backbone(BackboneConfig(d_model=32, n_layers=2, n_heads=4), pezoo.create("nope", dims=dims)).eval()
    after_tied = torch.random.get_rng_state()
    torch.manual_seed(0)
    untied = Backbone(
        BackboneConfig(d_model=32, n_layers=2, n_heads=4, head="untied"), pezoo.create("nope", dims=dims)
    ).eval()
    assert "head.weight" not in dict(tied.named_parameters())
    assert dict(untied.named_parameters())["head.weight"].shape == (64, 32)
    assert untied.n_params()["total"] == tied.n_params()["total"] + 64 * 32
    torch.manual_seed(0)
    again = Backbone(BackboneConfig(d_model=32, n_layers=2, n_heads=4), pezoo.create("nope", dims=dims)).eval()
    assert torch.equal(torch.random.get_rng_state(), after_tied)
    assert all(torch.equal(a, b) for a, b in zip(tied.state_dict().values(), again.state_dict().values(), strict=True))

    tokens = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = untied(tokens)
        untied.head.weight.mul_(2.0)  # the logits are read through the head: doubled with it
        torch.testing.assert_close(untied(tokens), 2.0 * before)


def test_an_untied_model_decodes_token_by_token_as_its_full_pass():
    torch.manual_seed(0)
    cfg = BackboneConfig(d_model=32, n_layers=2, n_heads=4, head="untied")
    model = Backbone(cfg, pezoo.create("rope", dims=pezoo.ModelDims(32, 4, 2))).eval()
    tokens = torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(tokens)
        state = model.start_state(2, 10)
        steps = [model(tokens[:, t : t + 1], state=state) for t in range(10)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def _compiled_graphs(depth: int) -> int:
    """Graphs dynamo compiles for one training pass of a ``depth``-layer PRISM backbone."""
    graphs: list[torch.fx.GraphModule] = []

    def counter(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):
        graphs.append(gm)
        return gm.forward

    cfg = BackboneConfig(d_model=32, n_layers=depth, n_heads=4)
    torch.manual_seed(0)
    model = Backbone(cfg, pezoo.create("prism", dims=pezoo.ModelDims(cfg.d_model, cfg.n_heads, cfg.n_layers)))
    torch._dynamo.reset()
    torch.compile(model, backend=counter, dynamic=True)(torch.randint(cfg.vocab_size, (2, 6))).sum().backward()
    torch._dynamo.reset()
    return len(graphs)


def test_a_compiled_prism_backbone_compiles_its_blocks_once_with_unspecialised_layer_ints():
    """PRISM's eager filter splits the layer loop, so each block is a frame of its own; with
    ``allow_unspec_int_on_nn_module`` (docs/prism.md, "torch.compile") one graph serves every
    block. It did not while each full pass cached its keys in ``ctx.state[("kv", layer)]``,
    a key per layer that pinned each block's graph to its layer (a 12-layer model hit
    dynamo's recompile limit)."""
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    with torch._dynamo.config.patch({limit: 64, "allow_unspec_int_on_nn_module": True}):
        assert _compiled_graphs(3) == _compiled_graphs(10)
