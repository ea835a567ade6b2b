"""The LM track's cost (issue 52): the ``lm`` preset's training step against a minimal
hand-written decoder of the same shape (fp32 and bf16), and the peak memory of evaluating
one window of 16,384 bytes per encoding (chunked attention). A benchmark, not a test.

    python benchmarks/lm_cost.py step [--steps 20] [--precision fp32,bf16] [--device cuda]
    python benchmarks/lm_cost.py memory [--length 16384] [--pe alibi,fire,kerple_log]
    python benchmarks/lm_cost.py speed [--repeats 5] [--out benchmarks/results/cpu-lm-speed]

``step`` times the backbone with ``nope`` (the hand-written decoder has no encoding either)
and prints ms per step and the ratio; ``memory`` runs each encoding in a fresh process and
prints the growth of its peak resident memory over the model's (``ru_maxrss``) while scoring
one window of ``--length`` bytes; ``speed`` times the training step of every encoding of the
sweep file (``leaderboard/lm/sweep.toml``) side by side, interleaved in one process (the
papers' speed tables; the records' seconds per step are wall time beside whatever else the
machine ran), and writes ``OUT.md`` and ``OUT.json`` with ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from harness.config import preset_config
from harness.config.pe_spec import config_display_name
from harness.evaluation.lm import score_windows
from harness.training.backbone import Backbone
from harness.training.precision import autocast
from harness.training.train import build_model


class HandBlock(nn.Module):
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)  # (3, b, h, s, e)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, h, s, e)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.ln2(x))


class HandDecoder(nn.Module):
    """nanoGPT's shape: embeddings, pre-LN blocks, tied output; no positional encoding."""

    def __init__(self, vocab: int, d: int, layers: int, heads: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(HandBlock(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        # the backbone's initialisation: its linear layers' (N(0, 0.02), zero biases) and tied
        # embeddings N(0, 1/d). Left at nn.Embedding's N(0, 1), the scaled inputs and the tied
        # output make logits of scale ~d, a saturated softmax, and gradients near 1e-31:
        # subnormal arithmetic, 14 s a backward pass on an AVX-512 CPU (29 November 2026)
        # where the backbone takes 0.3 s.
        self.apply(Backbone._init)
        nn.init.normal_(self.embed.weight, std=d**-0.5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) * math.sqrt(self.embed.weight.shape[1])
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln(x), self.embed.weight)


def _time_steps(model: nn.Module, tokens: torch.Tensor, precision: str, steps: int) -> float:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=precision != "fp32")
    times = []
    cuda = tokens.device.type == "cuda"
    for i in range(steps + 3):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with autocast(precision, tokens.device):
            logits = model(tokens)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if cuda:
            torch.cuda.synchronize()  # the step's kernels, not only their launches
        if i >= 3:  # warm-up steps left out
            times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def step(args: argparse.Namespace) -> None:
    cfg = preset_config("lm", pe="nope", task="lm_en", seed=0)
    b = cfg.backbone
    device = torch.device(args.device)
    tokens = torch.randint(256, (cfg.train.batch_size, cfg.train.train_max), device=device)
    for precision in args.precision.split(","):
        torch.manual_seed(0)
        ours = build_model(cfg, device)
        hand = HandDecoder(b.vocab_size, b.d_model, b.n_layers, b.n_heads).to(device)
        t_ours = _time_steps(ours, tokens, precision, args.steps)
        t_hand = _time_steps(hand, tokens, precision, args.steps)
        print(
            f"{precision}: lm preset step {1000 * t_ours:.2f} ms, hand-written {1000 * t_hand:.2f} ms, "
            f"ratio {t_ours / t_hand:.2f} (median of {args.steps}, {device.type}, {torch.get_num_threads()} threads)"
        )


def _train_step(model: nn.Module, tokens: torch.Tensor) -> Callable[[], None]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def one() -> None:
        logits = model(tokens)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return one


def speed(args: argparse.Namespace) -> None:
    from harness.perf import time_interleaved
    from harness.sweeps.sweep import load_sweep

    plan = load_sweep(args.file).configs(None)
    configs = [c for c in plan if c.task == "lm_en" and c.seed == 0 and not c.is_variant]
    tokens = torch.randint(256, (configs[0].train.batch_size, configs[0].train.train_max))
    steps = {}
    for cfg in configs:
        torch.manual_seed(0)
        steps[config_display_name(cfg)] = _train_step(build_model(cfg), tokens)
    timings = time_interleaved(steps, repeats=args.repeats, warmup=2)
    base = timings[config_display_name(next(c for c in configs if c.pe == "nope"))].median_ms
    rows = [
        {
            "encoding": name,
            "median_ms": t.median_ms,
            "q1_ms": t.q1_ms,
            "q3_ms": t.q3_ms,
            "ratio_to_nope": t.median_ms / base,
        }
        for name, t in sorted(timings.items(), key=lambda item: item[1].median_ms)
    ]
    from harness.records.provenance import provenance

    prov = provenance(torch.device("cpu"))
    env = f"commit {prov['commit']}, torch {torch.__version__}, {torch.get_num_threads()} thread(s), {prov.get('cpu')}"
    lines = [
        f"# The lm preset's training step per encoding ({time.strftime('%Y-%m-%d', time.gmtime())})",
        "",
        f"`python benchmarks/lm_cost.py speed --repeats {args.repeats}`: 16 x 256 bytes, fp32, forward, backward, "
        f"clipping and AdamW; every encoding timed in one process, interleaved (median of {args.repeats} rounds "
        f"after 2 warm-up steps). {env}.",
        "",
        "| encoding | ms per step (median) | q1-q3 | × nope |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['encoding']} | {r['median_ms']:.0f} | {r['q1_ms']:.0f}-{r['q3_ms']:.0f} | {r['ratio_to_nope']:.2f} |"
        for r in rows
    ]
    print("\n".join(lines))
    if args.out:
        Path(args.out + ".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
        Path(args.out + ".json").write_text(json.dumps({"env": env, "rows": rows}, indent=1) + "\n", encoding="utf-8")


def _one_memory(pe: str, length: int, chunk: int) -> dict[str, object]:
    cfg = preset_config("lm", pe=pe, task="lm_en", seed=0)
    model = build_model(cfg).eval()
    targets = torch.randint(256, (1, length))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    score_windows(model, targets, 0, chunk, "fp32", torch.device("cpu"))
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "pe": pe,
        "length": length,
        "chunk": chunk,
        "peak_growth_mib": (after - before) / 1024,
        "peak_mib": after / 1024,
        "seconds": time.perf_counter() - t0,
    }


def memory(args: argparse.Namespace) -> None:
    for pe in args.pe.split(","):
        out = subprocess.run(
            [sys.executable, __file__, "_memory_one", pe, str(args.length), str(args.chunk)],
            capture_output=True,
            text=True,
            check=False,
        )
        line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr.strip().splitlines()[-1]
        print(line)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_memory_one":
        print(json.dumps(_one_memory(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("step")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--precision", default="fp32,bf16")
    p.add_argument("--device", default="cpu")
    m = sub.add_parser("memory")
    m.add_argument("--length", type=int, default=16384)
    m.add_argument("--chunk", type=int, default=256)
    m.add_argument("--pe", default="alibi,fire,kerple_log")
    v = sub.add_parser("speed")
    v.add_argument("--file", default="leaderboard/lm/sweep.toml")
    v.add_argument("--repeats", type=int, default=5)
    v.add_argument("--out", default="")
    args = parser.parse_args()
    {"step": step, "memory": memory, "speed": speed}[args.what](args)


if __name__ == "__main__":
    main()
