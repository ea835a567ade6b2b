"""Randomized positional encodings (Ruoss et al. 2023, §3): a position sampler.

Not a new encoding but a wrapper around any position-consuming one. For a sequence of n
tokens it draws a set I of n distinct integers uniformly from ``[0, L)`` (without
replacement), sorts it, ``i_1 < ... < i_n``, and gives token t the position ``i_t``; the
wrapped encoding then sees those positions wherever it would have seen ``t``:

    randomized:ape          sin/cos table rows at the sampled positions (= bare ``randomized``)
    randomized:learned_ape  learned table rows at the sampled positions (needs max_position >= L)
    randomized:rope         rotation angles from the sampled positions
    randomized:alibi        distances between sampled positions

Conventions:
    * one draw per call to ``positions()``, i.e. once per batch and shared by every
      sequence of the batch (the paper subsamples "once per batch and not individually
      for every sequence"; its batches hold sequences of one length);
    * a batch of right-padded rows of different lengths (``padded_positions()``) gets
      one draw per distinct length, shared by the rows of that length
      (``draw="per_length"``, the default): every row's positions are then a uniform
      sorted subset of ``[0, L)`` of its own length, as each sequence's are in the
      paper, and a batch of one length is the paper's one draw. ``draw="per_batch"``
      instead draws once for the widest row and gives a shorter row of n tokens that
      draw's first n positions: the smallest n of a larger subset, so a short row's
      positions crowd the start of the range (about ``n/W`` of it for a batch W wide)
      instead of spreading over all of it;
    * the paper counts positions 1..L; pezoo counts 0..L-1 (the same set shifted by one);
    * positions are random in training *and* in eval mode by default: "at test time
      [...] we use the same procedure but for all token positions" (§3). With
      ``randomize_eval=False`` eval mode gives plain ``0..n-1`` instead (not the paper's
      test-time procedure; kept as a named option);
    * draws come from torch's global RNG, or, inside ``with pe.seeded(seed):``, from a
      generator seeded with ``seed`` (a deterministic evaluation: the harness seeds one
      draw per evaluated example from the run's seed, the scale and the example's index);
    * a sequence longer than L is an error in both modes: its positions cannot be
      distinct values of ``[0, L)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import torch
from torch import Tensor

from pezoo.cards import PaperCard, PaperClaim, PlotLook, RunFacts, option_departures
from pezoo.context import check_length
from pezoo.eager import eager_under_compile
from pezoo.encodings.ape import SinusoidalAPE
from pezoo.interface import PositionalEncoding, check_lengths, to_device
from pezoo.registry import WRAPPERS, ModelDims, register
from pezoo.wrapper import Wrapper

DEFAULT_MAX_LENGTH = 2048

DRAWS = ("per_length", "per_batch")
"""How a batch of rows of different lengths draws its positions (module docstring)."""


@eager_under_compile("positions drawn as in eager mode: see sample_sorted_positions")
def sample_sorted_positions(
    length: int,
    max_length: int,
    *,
    device: torch.device | str = "cpu",
    generator: torch.Generator | None = None,
) -> Tensor:
    """A uniformly random sorted subset of ``length`` distinct integers of ``[0, max_length)``.

    Uniform over all subsets of that size (a random permutation's first ``length``
    entries), drawn from ``generator`` or torch's global RNG on the CPU.

    Returns:
        (s,) long tensor, strictly increasing.

    Runs eagerly under ``torch.compile`` (``pezoo.eager.eager_under_compile``), so a compiled model
    draws the same random numbers from the same generator as an eager one and sees the
    same positions whatever the backend does with random operators. Traced, the draw
    also broke the graph on a ``seeded`` generator (dynamo cannot put a
    ``torch.Generator`` in a graph) and compiled one more resumed frame.
    """
    check_length("randomized positions", length)
    if length > max_length:
        raise ValueError(
            f"randomized positions are distinct values of [0, {max_length}), so a sequence can have at most "
            f"{max_length} tokens; got {length}. Build the encoding with a larger max_length"
        )
    chosen = torch.randperm(max_length, generator=generator)[:length]  # (s,)
    return to_device(chosen.sort().values, device)


class RandomizedPE(Wrapper):
    """Randomized PE (Ruoss et al. 2023): sorted random positions from ``[0, L)`` for ``inner``.

    Every hook is ``inner``'s (:class:`pezoo.wrapper.Wrapper`); only :meth:`positions` and
    :meth:`padded_positions` change.

    Args:
        inner: the wrapped encoding; must read positions (``uses_positions``) and, if it
            has a ``max_position``, accept every position below ``max_length``.
        max_length: L, the range positions are drawn from (2048 by default).
        randomize_eval: draw random positions in eval mode too (default True: the
            paper's test-time procedure, §3); False: plain ``0..n-1`` at evaluation.
        draw: for a batch of right-padded rows of different lengths
            (:meth:`padded_positions`), ``"per_length"`` (default): one draw per
            distinct length, so each row's positions are distributed as the paper's
            for a sequence of its length; ``"per_batch"``: one draw for the widest row,
            whose first n positions a row of n tokens takes (module docstring).
    """

    wrappable: ClassVar[bool] = False  # randomizing twice means nothing

    def __init__(
        self,
        inner: PositionalEncoding,
        /,
        *,
        max_length: int = DEFAULT_MAX_LENGTH,
        randomize_eval: bool = True,
        draw: str = "per_length",
    ) -> None:
        super().__init__(inner)
        if draw not in DRAWS:
            raise ValueError(f"draw must be one of {', '.join(map(repr, DRAWS))}; got {draw!r}")
        if isinstance(inner, RandomizedPE):
            raise ValueError(f"{inner.name!r} is already randomized; it cannot be wrapped again")
        if getattr(inner, "wrappable", True) is False:
            raise ValueError(f"encoding {inner.name!r} declares itself not wrappable (see its docstring)")
        if not inner.uses_positions:
            raise ValueError(
                f"encoding {inner.name!r} does not read positions, so randomizing them would change nothing"
            )
        if max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        if inner.max_position is not None and inner.max_position < max_length:
            raise ValueError(
                f"randomized positions go up to {max_length - 1} but {inner.name!r} supports positions "
                f"< {inner.max_position}; build it with max_position >= {max_length} or lower max_length"
            )
        self.max_length, self.randomize_eval, self.draw = max_length, randomize_eval, draw
        self.max_position = max_length
        if not type(self).name:  # the wrapper form; a registered alias keeps its own key
            self.name = f"randomized:{inner.name}"

    @property
    def random_at_eval(self) -> bool:
        """Whether eval-mode positions are random (``randomize_eval``): an evaluation is
        then deterministic only under :meth:`seeded`."""
        return self.randomize_eval

    @contextmanager
    def seeded(self, seed: int) -> Iterator[torch.Generator]:
        """Inside the block, draw positions from a fresh CPU ``torch.Generator`` seeded with
        ``seed`` (successive draws continue its stream) instead of torch's global RNG,
        whose state is left untouched. Yields the generator."""
        previous, self._generator = self._generator, torch.Generator().manual_seed(seed)
        try:
            yield self._generator
        finally:
            self._generator = previous

    def positions(self, batch: int, length: int, device: torch.device | str = "cpu") -> Tensor:
        """(1, s) sorted distinct positions of ``[0, L)`` (training, or eval with
        ``randomize_eval``), else the inner ones (plain ``0..s-1``)."""
        check_length(self.name, length)
        if length > self.max_length:
            raise ValueError(
                f"{self.name} draws positions from [0, {self.max_length}) and cannot place {length} tokens; "
                f"build it with max_length >= {length}"
            )
        if self.training or self.randomize_eval:
            return sample_sorted_positions(length, self.max_length, device=device, generator=self._generator)[None]
        return self.inner.positions(batch, length, device)

    def padded_positions(self, lengths: Tensor, width: int, device: torch.device | str = "cpu") -> Tensor:
        """Positions for right-padded rows of ``lengths`` real tokens, ``width`` wide:
        (b|1, width) long.

        With ``draw="per_length"`` (random positions, rows of different lengths): one
        draw per distinct length, shortest first, shared by the rows of that length;
        a row's padding repeats its last position (0 for an empty row). Rows all of
        the full width, ``draw="per_batch"``, or eval mode without ``randomize_eval``:
        :meth:`positions` for the whole width (the same draw, from the same random
        stream, as a plain call)."""
        check_lengths(lengths, width)
        batch = int(lengths.shape[0])
        sizes = sorted({int(n) for n in lengths.tolist()})
        randomizing = self.training or self.randomize_eval
        if not randomizing or self.draw == "per_batch" or sizes in ([], [width]):
            return self.positions(batch, width, device)
        on_cpu = lengths.cpu()
        planned = torch.zeros(batch, width, dtype=torch.long)
        for n in sizes:
            if n == 0:
                continue  # an empty row: its padding is 0
            drawn = sample_sorted_positions(n, self.max_length, generator=self._generator)  # (n,)
            planned[on_cpu == n] = torch.cat([drawn, drawn[-1:].expand(width - n)])
        return to_device(planned, device)

    def extra_repr(self) -> str:
        return f"max_length={self.max_length}, randomize_eval={self.randomize_eval}, draw={self.draw!r}"


PAPER = "Ruoss et al. 2023, “Randomized Positional Encodings Boost Length Generalization of Transformers”"


def paper_options(task: str, dims: ModelDims) -> dict[str, Any]:
    """Ruoss et al. §3: random sorted positions at evaluation too, and every training
    sequence's positions a uniform sorted subset of its own length (the paper's batches
    have one length; the harness's padded rows get one draw per length). L = 2048 as in
    the paper's §4 is the wrapper's default."""
    return {"draw": "per_length", "randomize_eval": True}


OPTION_WORDS: dict[str, Callable[[Any, Any], str]] = {
    "randomize_eval": lambda run, paper: (
        "evaluated on plain positions 0..n-1, which it never saw in training; the paper draws random "
        "sorted positions at test time too (§3)"
        if not run
        else "random positions at evaluation although the paper evaluates on plain ones"
    ),
    "draw": lambda run, paper: (
        "trained on one position draw per batch, for its longest row: a shorter row of n tokens took "
        "that draw's first n positions, which crowd the start of the range, where the paper draws each "
        "sequence's n positions from all of it (§3; its batches have one length)"
        if run == "per_batch"
        else f"positions drawn {run!r} (the paper: each sequence's from the whole range, §3)"
    ),
}
"""How each option of the paper's setup is worded where a run sets it otherwise."""


def departures(run: RunFacts) -> list[str]:
    """How the run's options depart from the paper's procedure. An encoder's batches hold one
    length, so no rows are padded and both draws are the paper's."""
    paper = paper_options(run.task, run.dims)
    return option_departures(run, paper, RandomizedPE, OPTION_WORDS, same=lambda key: key == "draw" and not run.causal)


def training_departures(run: RunFacts) -> list[str]:
    """The range L against the test lengths, and the paper's model, tasks and reporting."""
    lengths = run.token_lengths
    longest = round(max(lengths)) if lengths and max(lengths) > 0 else 2 * run.test_max + 4
    big = int(run.recorded_options.get("max_length", 2048))
    return [
        f"L = {big}, about {big / longest:.0f}× the longest test sequence here (~{longest} tokens); the paper's "
        "L = 2048 is about 4× its longest test length M = 500, its ablation spans 2–16× (Appendix B.1), and it "
        "warns that L much larger than M leaves too few positions seen in training (§3)",
        "a decoder trained and tested with greedy autoregressive decoding on pezoo's digit tasks; the paper's "
        "model is an encoder that outputs the whole answer at once, on the Chomsky-hierarchy tasks of Delétang "
        "et al. (§4), reporting the best of 10 seeds and 3 learning rates (§4, Appendix A)",
    ]


CLAIM = PaperClaim(
    order=30,
    source=f"{PAPER}, §4 and Table 1",
    says="Randomizing an encoding's positions raises its accuracy beyond the training lengths "
    "(by 12.0 points on average over their tasks).",
    test="randomized:ape's per-token accuracy beyond N (the paper's metric) against sin/cos APE's: above by the "
    "permutation test, p ≤ 0.05 (holds); above on the mean only (partly); otherwise does not hold. Where the "
    "table has the row with L about 4× the longest test sequence (the paper's ratio), the verdict uses it; "
    "else the L = 2048 row, and says so.",
    rule="above_base",
    row="randomized:ape",
    against=("ape",),
    params={
        "score": "tok_beyond",
        "base_title": "sin/cos APE",
        "preferred": "{max_length=",
        "preferred_why": "L about 4× the longest test sequence, the paper's ratio",
        "beside": "the L = 2048 row beside it",
        "default_why": "L = 2048, about 24× the longest test sequence, where the paper's ratio is about 4",
    },
)
"""Tested on ``randomized:ape`` (the paper's sin/cos base), preferring its row with L set
about 4× the longest test sequence (``randomized:ape{max_length=...}``) where a table has one."""

CARD = PaperCard(
    paper=PAPER,
    setup=paper_options,
    departures=departures,
    training_departures=training_departures,
    claims=(CLAIM,),
    look=PlotLook("#CC79A7", "7 3", "square"),  # reddish purple, dashed: its look on the published board
    # random positions at evaluation (the paper's procedure) and each padded row's positions drawn for its own
    # length (as the paper's are for each sequence), recorded so that such runs get ids of their own
    run_defaults={"draw": "per_length", "randomize_eval": True},
    # a run stored without randomize_eval evaluated on plain positions (the wrapper's old default), and one
    # without draw trained on one draw per batch, whose first n positions a padded row of n tokens took
    # (the harness before 25 November 2026)
    stored_defaults={"draw": "per_batch", "randomize_eval": False},
    shown_as="randomized:ape",  # bare randomized is the wrapper around sin/cos APE (run ids keep the name)
    # the bare name's family, sin/cos APE's (its class forwards every hook, which tells nothing); a
    # randomized:<base> takes its base's (pezoo.family_of)
    family="embedding",
)
"""Read by the bare name and by every ``randomized:<base>``."""


@register("randomized", card=CARD)
class RandomizedSinusoidalAPE(RandomizedPE):
    """Bare ``randomized``: randomized sin/cos APE, the same as ``randomized:ape``.

    Args:
        d_model: embedding width d (even).
        base: sin/cos wavelength base.
        scale: multiplier on the sin/cos table.
        max_length: L, the range positions are drawn from.
        randomize_eval: randomize in eval mode too (default True, as the paper).
        draw: how rows of different lengths draw (``"per_length"``, the default, or
            ``"per_batch"``; :class:`RandomizedPE`).
    """

    def __init__(
        self,
        *,
        d_model: int,
        base: float = 10000.0,
        scale: float = 1.0,
        max_length: int = DEFAULT_MAX_LENGTH,
        randomize_eval: bool = True,
        draw: str = "per_length",
    ) -> None:
        inner = SinusoidalAPE(d_model=d_model, base=base, scale=scale)
        super().__init__(inner, max_length=max_length, randomize_eval=randomize_eval, draw=draw)


WRAPPERS["randomized"] = RandomizedPE
