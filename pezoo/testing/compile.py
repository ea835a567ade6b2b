"""How many graph breaks ``torch.compile`` meets in the kit model's forward pass: a report
(:class:`CompileReport`), not a check; it fails nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pezoo.attention import runnable_backend
from pezoo.registry import ModelDims
from pezoo.testing.kit import Factory, KitConfig, build_model, quiet_flex_warnings, random_tokens, scale_hints

__all__ = ["CompileReport", "graph_breaks"]


@dataclass(frozen=True)
class CompileReport:
    """What ``torch._dynamo.explain`` saw in the kit model's forward pass.

    Attributes:
        graphs: graphs dynamo captured.
        graph_breaks: breaks between them (0: the forward compiles as one graph).
        reasons: one line per break, as dynamo words it.
    """

    graphs: int
    graph_breaks: int
    reasons: tuple[str, ...]


def graph_breaks(factory: Factory, dims: ModelDims | None = None, **config: Any) -> CompileReport:
    """Count the ``torch.compile`` graph breaks of the kit model's eval forward (sdpa backend, or
    the first the encoding runs on where sdpa cannot run it).

    A report, not a check: an encoding with breaks still compiles (into several graphs).
    It traces once with ``torch._dynamo.explain`` (no code generation); ``**config`` as
    for :func:`check_encoding`.
    """
    import torch._dynamo  # here, not at the top: the checks do not pay for dynamo's import

    cfg = KitConfig(**config) if dims is None else KitConfig(dims=dims, **config)
    model = build_model(factory, cfg, cfg.seed)
    model.eval()
    model.set_backend(runnable_backend("sdpa", model.pe))  # eager for an encoding sdpa cannot run
    s, b = cfg.length, cfg.batch
    pos, tokens, hint = model.pe.positions(b, s, cfg.device), random_tokens(cfg, s), scale_hints(cfg, b, s)
    torch._dynamo.reset()
    with torch.no_grad(), quiet_flex_warnings():
        explained = torch._dynamo.explain(model)(tokens, pos, scale_hint=hint)
    torch._dynamo.reset()
    reasons = tuple(str(getattr(r, "reason", r)).splitlines()[0] for r in explained.break_reasons)
    return CompileReport(explained.graph_count, explained.graph_break_count, reasons)
