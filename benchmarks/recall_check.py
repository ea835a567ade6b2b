"""An independent check of associative recall's learnability, outside the harness.

docs/protocol-study.md ("mqar", "associative recall") found that the board's model does
not learn mqar at the board's budget. This script asks the same question of a plain
PyTorch model that shares no code with pezoo or the harness: a pre-norm causal
``nn.TransformerEncoder`` with learned absolute positions, trained with AdamW on
single-query associative recall. A prompt binds n distinct keys (43 symbols) to digit
values (with replacement), n uniform in 1..10 as on the board, then asks one key; prompts
are left-padded to a common length, and the loss is on the answer alone. Where the answer
is read (``--layout``):

    after  ``k1 v1 ... kn vn : q ?`` -> v(q) at ``?``: one token after the query, as the
           harness's ``=`` puts mqar's answer
    at     ``k1 v1 ... kn vn : q`` -> v(q) at q itself, as H3's and Zoology's streams do
    echo   ``k1 v1 ... kn vn : q ? q`` -> q at ``?`` and v(q) at the echoed q (both in the
           loss, both needed to count as right): the task ``associative_recall``

It prints the answer accuracy on 1000 fresh prompts every ``--every`` steps, beside what
guessing one of the prompt's values at random would score.

    python benchmarks/recall_check.py --layers 2 --steps 6000 --layout after
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Iterator

import torch
from torch import nn

KEYS = range(14, 57)  # 43 key ids
VALUES = range(4, 14)  # 10 digit ids
PAD, COLON, ASK = 0, 58, 59
VOCAB = 64


LAYOUTS = ("after", "at", "echo")


def prompts(
    rng: random.Random, batch: int, max_pairs: int, layout: str = "after"
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` left-padded prompts of ``layout`` (the module's table) and their answers:
    (batch,) values v(q), or for ``echo`` (batch, 2) rows of q and v(q), read at the last
    two positions."""
    tail = {"after": [ASK], "at": [], "echo": [ASK, None]}[layout]
    width = 2 * max_pairs + 2 + len(tail)
    rows, answers = [], []
    for _ in range(batch):
        n = rng.randint(1, max_pairs)
        keys = rng.sample(KEYS, n)
        values = [rng.choice(VALUES) for _ in keys]
        asked = rng.randrange(n)
        end = [keys[asked] if t is None else t for t in tail]
        row = [t for pair in zip(keys, values, strict=True) for t in pair] + [COLON, keys[asked], *end]
        rows.append([PAD] * (width - len(row)) + row)
        answers.append([keys[asked], values[asked]] if layout == "echo" else values[asked])
    return torch.tensor(rows), torch.tensor(answers)


def guess_rate(max_pairs: int) -> float:
    """The accuracy of answering one of the prompt's n values at random: the asked value is
    one of them, each other equals it with probability 1/10; n uniform in 1..max_pairs."""
    return sum((1 + (n - 1) / len(VALUES)) / n for n in range(1, max_pairs + 1)) / max_pairs


class Recall(nn.Module):
    def __init__(self, d_model: int, layers: int, heads: int, width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d_model)
        self.position = nn.Embedding(width, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, 0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.out = nn.Linear(d_model, VOCAB)

    def forward(self, x: torch.Tensor, last: int = 1) -> torch.Tensor:
        """Logits at the last position (batch, vocab), or at the last ``last`` (batch, last, vocab)."""
        h = self.embed(x) + self.position(torch.arange(x.shape[1]))
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        out = self.out(self.blocks(h, mask=mask, is_causal=True)[:, -last:])
        return out[:, -1] if last == 1 else out


def run(layers: int, steps: int, every: int, *, d_model: int = 128, heads: int = 4, lr: float = 1e-3,
        batch: int = 64, max_pairs: int = 10, seed: int = 0, layout: str = "after",
        ) -> Iterator[tuple[int, float, float]]:  # fmt: skip
    """Train, yielding (step, loss, accuracy on 1000 fresh prompts: every answer token right)
    every ``every`` steps."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    torch.manual_seed(seed)
    rng = random.Random(seed)
    last = 2 if layout == "echo" else 1
    model = Recall(d_model, layers, heads, 2 * max_pairs + 2 + last)
    opt = torch.optim.AdamW(model.parameters(), lr)
    for step in range(1, steps + 1):
        x, y = prompts(rng, batch, max_pairs, layout)
        loss = nn.functional.cross_entropy(model(x, last).reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % every == 0:
            with torch.no_grad():
                x, y = prompts(rng, 1000, max_pairs, layout)
                right = model(x, last).argmax(-1) == y
                accuracy = (right.all(-1) if last > 1 else right).float().mean().item()
            yield step, loss.item(), accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layout", choices=LAYOUTS, default="after", help="where the answer is read")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"guessing one of the prompt's values at random: accuracy {guess_rate(10):.2f}")
    start = time.perf_counter()
    rows = run(args.layers, args.steps, args.every, lr=args.lr, seed=args.seed, layout=args.layout)
    for step, loss, accuracy in rows:
        took = time.perf_counter() - start
        print(f"step {step}: loss {loss:.3f}, accuracy {accuracy:.3f} ({took:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
