"""pezoo.hf at length: forward time and allocator peak of an adapted Llama per encoding.

    python benchmarks/hf_cost_at_length.py [--length 2048] [--batch 2] [--specs none,alibi,fire,kerple_log,t5]

The model: a random Llama of hidden 256, 4 layers, 4 heads (2 key/value heads), MLP 512,
vocabulary 100 (issue 54's size), in eval mode, float32, on CPU; ``none`` is the untouched
model (its own RoPE, transformers' sdpa). Time: median wall seconds and median CPU seconds of
the process (``time.process_time``: what a shared machine's other load does not add to) of
``--repeats`` forwards under ``torch.no_grad`` after one warm-up, ``--threads`` threads. Memory: the peak of the CPU
allocator's live bytes during one forward, from the profiler's memory events
(``profile_memory=True``), relative to what was live before, in MiB. The batch has no
padding. Prints one JSON line per spec.

Axis letters: b batch, s tokens.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch
import transformers
from torch.profiler import ProfilerActivity, profile

import pezoo.hf


def peak_bytes(fn) -> int:
    """Peak of live CPU-allocator bytes during fn(), from the profiler's memory events."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--specs", default="none,alibi,fire,kerple_log,t5")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                      max_position_embeddings=args.length)  # fmt: skip
    base = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(3, 100, (args.batch, args.length))  # (b, s)
    mask = torch.ones_like(ids)
    for spec in args.specs.split(","):
        model = base if spec == "none" else pezoo.hf.use_encoding(copy.deepcopy(base), spec)

        def forward(model=model) -> None:
            with torch.no_grad():
                model(ids, attention_mask=mask, logits_to_keep=1)

        forward()
        times, cpu = [], []
        for _ in range(args.repeats):
            start, start_cpu = time.perf_counter(), time.process_time()
            forward()
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        peak = peak_bytes(forward)
        row = {"spec": spec, "length": args.length, "batch": args.batch, "seconds": round(statistics.median(times), 3),
            "cpu_seconds": round(statistics.median(cpu), 3),
               "peak_mib": round(peak / 2**20, 1), "threads": args.threads}  # fmt: skip
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
