"""torch.compile: every built-in encoding but learned_prf_sh traces its forward as one graph
(PRISM's filter runs eagerly, outside it: ``torch.compiler.disable``).

A graph break costs a host sync and splits the compiled model; the bound checks of the
learned tables (learned_ape, abacus) and learned_prf_sh's per-scale grouping used to
break it. The checks must still fire when compiled, so they are tested under dynamo too
(``backend="eager"``: dynamo traces, no code generation, a second or so).
"""

from __future__ import annotations

import pytest
import torch

import pezoo
from pezoo.context import AttentionContext
from pezoo.encodings.abacus import Abacus
from pezoo.encodings.learned_prf import LearnedPRFScaleHint, lbpe_bias
from pezoo.testing import graph_breaks

DIMS = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=1)

# PRISM's filter (its nn.GRU and scan) runs outside the graph under torch.compiler.disable, which
# explain() does not count as a break (docs/prism.md says why). learned_prf_sh groups the batch by
# its distinct scale n (torch.unique) eagerly: evaluated per example instead, its compiled training
# step took 5x eager's (docs/performance.md, "torch.compile")
BREAKS_BY_DESIGN = {"learned_prf_sh"}


@pytest.mark.parametrize("name", [*(n for n in pezoo.available() if ":" not in n), "abacus+fire"])
def test_forward_is_one_graph(name):
    report = graph_breaks(lambda: pezoo.create(name, dims=DIMS), DIMS, length=8)
    if name in BREAKS_BY_DESIGN:
        assert report.graph_breaks > 0, f"{name} no longer breaks the graph: update BREAKS_BY_DESIGN and the docs"
    else:
        assert report.graph_breaks == 0, report.reasons


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_learned_ape_bound_holds_when_compiled(fresh_dynamo):
    pe = pezoo.create("learned_ape", d_model=4, max_position=8)
    embed = torch.compile(pe.embed, backend="eager", fullgraph=True)
    x = torch.zeros(1, 3, 4)
    assert torch.equal(embed(x, torch.tensor([[0, 1, 7]])), pe.table[[0, 1, 7]][None])
    with pytest.raises(RuntimeError, match=r"rows for positions 0\.\.7 only"):
        embed(x, torch.tensor([[0, 1, 8]]))
    with pytest.raises(RuntimeError, match=r"rows for positions 0\.\.7 only"):
        embed(x, torch.tensor([[-1, 1, 2]]))


def _abacus_call(pe, tokens):
    pos = torch.arange(tokens.shape[1])[None]
    ctx = AttentionContext(q_pos=pos, k_pos=pos)
    return pe.embed_tokens(torch.zeros(*tokens.shape, pe.d_model), tokens, ctx)


def test_abacus_bound_holds_when_compiled(fresh_dynamo):
    pe = Abacus(d_model=4, max_k=2, max_index=8).eval()
    call = torch.compile(_abacus_call, backend="eager", fullgraph=True)
    seven = torch.tensor([[3] * 7 + [12, 3]])  # a 7-digit number, then a 1-digit one
    assert torch.equal(call(pe, seven), _abacus_call(pe, seven))
    with pytest.raises(RuntimeError, match=r"rows for indices 0\.\.7 only"):
        call(pe, torch.tensor([[3] * 8 + [12]]))  # a digit at place 8: no row


def test_abacus_skips_the_check_when_the_length_proves_it(monkeypatch):
    """Below max_index - max_k tokens no index can be out of range: no read of the indices."""
    pe = Abacus(d_model=4, max_k=2, max_index=8).eval()
    checked = []
    monkeypatch.setattr(pe, "_check_rows", lambda index, offset: checked.append(index))
    _abacus_call(pe, torch.tensor([[3] * 5]))  # 5 + 2 < 8
    assert checked == []
    _abacus_call(pe, torch.tensor([[3] * 6]))  # 6 + 2 >= 8: could reach 8
    assert len(checked) == 1


def test_learned_prf_sh_grouped_path_equals_per_example_path():
    """φ evaluated per distinct n (eagerly, also under compile) gives every example its own bias."""
    torch.manual_seed(0)
    pe = LearnedPRFScaleHint(d_model=16, n_heads=2, n_layers=1)
    pos = torch.arange(5)[None]
    hint = torch.tensor([3.0, 4.0, 3.0])
    ctx = AttentionContext(q_pos=pos, k_pos=pos, scale_hint=hint)
    q = k = torch.randn(3, 2, 5, 8)
    grouped = pe.bias(0, q, k, ctx)[0].tensor
    per_example = lbpe_bias(pe.prf(0, pos, pos, hint), q, pe.slot_keys[0])
    torch.testing.assert_close(per_example, grouped, rtol=1e-5, atol=1e-6)
