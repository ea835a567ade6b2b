"""Where a graphed training step's time goes, per encoding, on a GPU: the bare eager step,
the harness's eager loss (length groups), and the loss replayed as a CUDA graph
(``harness.training.graphs.GraphedLoss``), each followed by the same backward, clipping and
fused AdamW; ms per step and the profiler's five costliest kernels of each.

    PYTHONPATH=. python benchmarks/gpu_graph_probe.py --pe nope,prism [--steps 20]

A diagnosis, not a benchmark of record (``pezoo perf --sections gpu`` is that).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn


def main() -> None:
    from harness.config import preset_config
    from harness.perf.train import training_batch
    from harness.training.graphs import GraphedLoss
    from harness.training.loss import training_loss
    from harness.training.train import build_model, make_optimizer

    parser = argparse.ArgumentParser()
    parser.add_argument("--pe", default="nope,prism")
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--device", default="cuda", help="cpu: checks the script (no graphed mode)")
    args = parser.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    _, batch = training_batch(args.preset, 0, device)
    host = batch.to("cpu")
    for pe in args.pe.split(","):
        cfg = preset_config(args.preset, pe=pe, task="copy", seed=0)
        model = build_model(cfg, device)
        opt = make_optimizer(model, cfg, fused=True)
        precision = cfg.train.precision

        def eager(b, h, model=model, precision=precision):
            return training_loss(model, b, precision)

        def bare(b, h, model=model):
            logits = model(b.inputs, scale_hint=b.scales)
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), b.labels.flatten(), ignore_index=-100)
            return loss, loss

        modes = {"bare": bare, "harness eager": eager}
        if cuda:
            modes["graphed"] = GraphedLoss(model, precision, eager)
        for name, fn in modes.items():

            def step(fn=fn, model=model, opt=opt):
                opt.zero_grad(set_to_none=True)
                loss, _ = fn(batch, host)
                loss.backward()
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()

            for _ in range(4):
                step()
            sync()
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step()
            sync()
            ms = (time.perf_counter() - t0) * 1000 / args.steps
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
                for _ in range(5):
                    step()
                sync()
            events = prof.key_averages()
            kernels = [e for e in events if getattr(e, "device_time_total", 0) > 0 and e.device_type.name == "CUDA"]
            total = sum(e.device_time_total for e in kernels) / 5 / 1000
            print(f"## {args.preset}/{pe} {name}: {ms:.2f} ms/step, kernels {total:.2f} ms/step")
            for e in sorted(kernels, key=lambda e: -e.device_time_total)[:5]:
                print(f"   {e.device_time_total / 5 / 1000:7.3f} ms  x{e.count // 5:<5} {e.key[:90]}")
            cpu = sorted(events, key=lambda e: -e.self_cpu_time_total)[:4]
            print("   host: " + "; ".join(f"{e.key[:40]} {e.self_cpu_time_total / 5 / 1000:.2f} ms" for e in cpu))


if __name__ == "__main__":
    main()
