"""Peak memory of one training pass of the quick backbone, per sequence length, each length in
a fresh process: how PRISM's memory grows with S against NoPE's (issue 65).

    python benchmarks/prism_memory.py --pe prism,nope --lengths 512,1024,2048,4096
    python benchmarks/prism_memory.py --pe prism --lengths 2048 --profile   # where the peak is

Each (encoding, S) runs in its own Python process: the harness's quick-preset backbone
(d_model 128, 3 layers, 4 heads, the sdpa backend) with the encoding at its defaults, one
forward + backward of a batch of one random S-token row, one torch thread. Two peaks are
reported, both relative to what the process held just before the pass:

* ``rss``: growth of the peak resident set size (``resource.getrusage``'s ``ru_maxrss``), what
  the issue measured; it includes the allocator's caching and fragmentation;
* ``alloc``: the peak of the CPU allocator's live bytes, from the profiler's memory events
  (``profile_memory=True``), measured in a second pass of the same process.

The ratio column is each length's peak over the previous length's.

Axis letters: b batch, s tokens, v vocab.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

QUICK = {"vocab_size": 64, "d_model": 128, "n_layers": 3, "n_heads": 4, "backend": "sdpa"}


def _child(pe_name: str, length: int, profile_top: int) -> dict:
    """Measure one (encoding, S) in this process; returns {"rss": MiB, "alloc": MiB}."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    import pezoo
    from harness.training.backbone import Backbone, BackboneConfig

    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = BackboneConfig(**QUICK)  # type: ignore[arg-type]
    pe = pezoo.create(pe_name, dims=pezoo.ModelDims(cfg.d_model, cfg.n_heads, cfg.n_layers))
    model = Backbone(cfg, pe)
    tokens = torch.randint(0, cfg.vocab_size, (1, length))  # (b, s)

    def step() -> None:
        logits = model(tokens)  # (b, s, v)
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
        model.zero_grad(set_to_none=True)

    before = _rss_now_kib()
    step()
    rss = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted(
        (e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"), key=lambda e: e.start_ns()
    )
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    out = {"rss": rss, "alloc": peak / 2**20}
    if profile_top:
        print(prof.key_averages().table(sort_by="self_cpu_memory_usage", row_limit=profile_top), file=sys.stderr)
    return out


def _rss_now_kib() -> int:
    """The current resident set size in KiB (Linux), the baseline the peak's growth is taken from."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def measure(pe_name: str, length: int, profile_top: int = 0) -> dict:
    """Run :func:`_child` for one (encoding, S) in a fresh interpreter."""
    cmd = [sys.executable, __file__, "--child", pe_name, str(length), str(profile_top)]
    done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pe", default="prism,nope")
    parser.add_argument("--lengths", default="512,1024,2048,4096")
    parser.add_argument("--profile", action="store_true", help="print the profiler's memory table per run")
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    print("| encoding | S | rss MiB | × | alloc MiB | × |")
    print("|---|---|---|---|---|---|")
    for pe_name in args.pe.split(","):
        prev: dict | None = None
        for length in lengths:
            got = measure(pe_name, length, 25 if args.profile else 0)
            ratio = {k: (f"{got[k] / prev[k]:.2f}" if prev else "") for k in ("rss", "alloc")}
            print(
                f"| {pe_name} | {length} | {got['rss']:.0f} | {ratio['rss']} | {got['alloc']:.0f} | {ratio['alloc']} |",
                flush=True,
            )
            prev = got


if __name__ == "__main__":
    main()
