"""Trains the same small transformer on the same synthetic trading days twice, once with
PyTorch's scaled_dot_product_attention and once with flashjit.torch's, and writes the loss
curves (with each run's step time and peak memory) to a PNG; then measures the memory of one
attention layer's forward and backward at several sequence lengths. README.md beside this
file shows the commands and what to expect."""
import argparse
import json
import statistics
import time
from pathlib import Path

import torch

import flashjit.torch as fjt
from model import SeriesTransformer
from series import TRADING_DAY, days, time_features

BACKENDS = {
    "torch SDPA": torch.nn.functional.scaled_dot_product_attention,
    "flashjit": fjt.scaled_dot_product_attention,
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=300, help="training steps per backend")
    p.add_argument("--seqlen", type=int, default=TRADING_DAY, help="steps of the series a sample holds")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head-dim", type=int, default=64, help="64, or an odd one such as 40")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seqlens", default="4096,16384,23400,65536",
                   help="sequence lengths of the attention memory table ('' skips it)")
    p.add_argument("--quick", action="store_true", help="40 steps of batch 1: under 2 minutes on an H200")
    p.add_argument("--out", default="timeseries-out", help="folder for the PNG and results.json")
    args = p.parse_args()
    if args.quick:
        args.steps, args.batch = 40, 1
    return args


def batch_of(step, args):
    """(inputs [batch, seqlen, 5], targets [batch, seqlen]): the value and the time of day at
    t, and the value at t + 1. Seeded by the step, so both runs train on the same days."""
    generator = torch.Generator(device="cuda").manual_seed(args.seed * 100_003 + step)
    series = days(args.batch, args.seqlen + 1, generator, "cuda")
    clock = time_features(args.seqlen, "cuda").expand(args.batch, -1, -1)
    return torch.cat([series[:, :-1, None], clock], dim=-1), series[:, 1:]


def train(name, attention, args):
    torch.manual_seed(args.seed)  # the same initial weights for every backend
    model = SeriesTransformer(attention, args.layers, args.heads, args.head_dim).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    losses, times = [], []
    for step in range(args.steps):
        inputs, targets = batch_of(step, args)
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(inputs).float(), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())  # synchronizes: the step's time is all its GPU work
        times.append(time.perf_counter() - start)
    result = {"losses": losses, "step_ms": 1e3 * statistics.median(times[3:] or times),
              "first_step_s": times[0], "peak_gib": torch.cuda.max_memory_allocated() / 2**30}
    print(f"{name:>10}: loss {losses[0]:.4f} -> {statistics.mean(losses[-10:]):.4f} (last 10), "
          f"{result['step_ms']:.1f} ms a step (median; first step {times[0]:.1f} s with compiles), "
          f"peak {result['peak_gib']:.2f} GiB")
    return result


def attention_memory(seqlen, attention, args):
    """Peak bytes one attention layer's forward and backward adds above its inputs and
    outputs (q, k, v, o, their gradients), batch 1."""
    shape = (1, args.heads, seqlen, args.head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    d_o = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    attention(q, k, v, is_causal=True).backward(d_o)  # warm-up: compiles, allocates grads
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    attention(q, k, v, is_causal=True).backward(d_o)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - held


def memory_table(seqlens, args):
    rows = []
    print(f"\nattention memory (one layer, forward + backward, batch 1, {args.heads} heads of {args.head_dim}):")
    print(f"{'seqlen':>8} | {'torch SDPA MiB':>14} | {'flashjit MiB':>12} | {'flashjit B/token':>16} | "
          f"{'S x S fp32 scores would be':>26}")
    for seqlen in seqlens:
        row = {"seqlen": seqlen}
        for name, attention in BACKENDS.items():
            row[name] = attention_memory(seqlen, attention, args)
        scores_gib = args.heads * seqlen * seqlen * 4 / 2**30
        print(f"{seqlen:>8} | {row['torch SDPA'] / 2**20:>14.1f} | {row['flashjit'] / 2**20:>12.1f} | "
              f"{row['flashjit'] / seqlen:>16.0f} | {scores_gib:>22.1f} GiB")
        rows.append(row)
    return rows


def plot(results, args, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(figsize=(9, 5))
    for name, r in results.items():
        axes.plot(r["losses"], label=f"{name}: {r['step_ms']:.0f} ms/step, peak {r['peak_gib']:.1f} GiB")
    axes.set_xlabel("step")
    axes.set_ylabel("next-step MSE")
    axes.set_yscale("log")
    axes.set_title(f"{args.layers} layers, {args.heads} heads x {args.head_dim}, seqlen {args.seqlen}, "
                   f"batch {args.batch}, seed {args.seed}")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main():
    args = parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {name: train(name, attention, args) for name, attention in BACKENDS.items()}
    a, b = (results[n]["losses"] for n in BACKENDS)
    gap = max(abs(x - y) / max(abs(x), 1e-8) for x, y in zip(a, b))
    print(f"largest relative gap between the two loss curves: {gap:.2%}")
    plot(results, args, out / "loss.png")
    seqlens = [int(s) for s in args.seqlens.split(",") if s]
    table = memory_table(seqlens, args) if seqlens else []
    (out / "results.json").write_text(json.dumps({"args": vars(args), "runs": results,
                                                   "loss_gap": gap, "attention_memory": table}, indent=1))
    print(f"wrote {out / 'loss.png'} and {out / 'results.json'}")


if __name__ == "__main__":
    main()
