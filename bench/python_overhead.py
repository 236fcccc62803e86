"""Host time per forward call through the Python package, beside the C++ launch (reached
through the C ABI with its ctypes arguments built once: Kernel::forward's own cost plus one
ctypes call). Issue 17 asks the package to add at most 10 us a call.

A tiny kernel (batch 1, 128 rows, 1 head, head dim 64, bf16) is launched `--calls` times in a
row and the loop is timed on the host without waiting for the GPU: launches are asynchronous,
and fewer calls than the driver's launch queue holds never block, so the time is the host's.
Median of `--rounds` rounds. Needs a GPU, torch and the built package (README, "Python").
flashjit.Kernel hands torch tensors to the extension through DLPack's C exchange API where torch
has it (2.10 on), else as DLPack capsules (the _core Kernel.forward line). flashjit.torch.attention
here calls the ops' implementations itself (eager mode, plain CUDA tensors: the dispatcher would
add nothing); the last row is the route through torch's dispatcher that torch.compile, modes
and transforms get.

    python bench/python_overhead.py [--lib build/capi/libflashjit_c.so]
"""
import argparse
import os
import statistics
import sys
import time

import torch

import flashjit
import flashjit.torch as fjt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashjit_lib  # noqa: E402  (the C ABI's ctypes binding, bench/)


def host_us_per_call(call, calls, rounds):
    call()
    torch.cuda.synchronize()
    per_round = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        per_round.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per_round)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", default="build/capi/libflashjit_c.so", help="the C ABI library")
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args()

    spec = {"head_dim": 64, "dtype": "bf16"}
    q, k, v = (torch.randn(1, 128, 1, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = torch.empty_like(q)
    trained = [t.detach().requires_grad_() for t in (q, k, v)]  # each call records a graph node
    kern = flashjit.kernel(spec)
    stream = torch.cuda.current_stream().cuda_stream

    lib = flashjit_lib.Library(args.lib)
    c_kernel = flashjit_lib.Runtime(lib).kernel(kern.spec_yaml)
    paths = {
        "C ABI, arguments built once (the C++ launch)": c_kernel.launcher(q, k, v, o, None, 0.0, stream),
        "flashjit._core Kernel.forward (DLPack + checks)": lambda: kern._core.forward(q, k, v, o, stream=stream),
    }
    if hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):  # the path flashjit.Kernel takes
        paths["flashjit._core Kernel.forward_exchange (+ checks)"] = lambda: kern._core.forward_exchange(
            q, k, v, o, None, 0.0, None, None, None, None, 0, 0, None, None, stream)
    paths |= {
        "flashjit.Kernel(q, k, v, out=o)": lambda: kern(q, k, v, out=o),
        "flashjit.Kernel(q, k, v) (allocates o)": lambda: kern(q, k, v),
        "flashjit.attention(q, k, v)": lambda: flashjit.attention(q, k, v),
        "flashjit.torch.attention (o)": lambda: fjt.attention(q, k, v),
        "flashjit.torch.attention, return_lse=True": lambda: fjt.attention(q, k, v, return_lse=True),
        "flashjit.torch.attention, q, k, v requiring grad": lambda: fjt.attention(*trained),
        "torch.ops.flashjit.forward, through the dispatcher": lambda: fjt.forward_op(
            q, k, v, fjt.spec_text(q.dtype, 64, 64), 0.0, None, None, None, None, 0, 0),
    }
    times = {name: host_us_per_call(call, args.calls, args.rounds) for name, call in paths.items()}
    base = times[next(iter(paths))]
    print(f"host time per forward call, {torch.cuda.get_device_name()}, median of {args.rounds} "
          f"rounds of {args.calls} calls:")
    for name, us in times.items():
        print(f"  {name:<50} {us:7.2f} us   +{us - base:6.2f} us")
    # The allocation flashjit.Kernel makes for o, and the free of the o before it, without a launch.
    alloc_us = host_us_per_call(lambda: q.new_empty(1, 128, 1, 64), args.calls, args.rounds)
    print(f"  {'(torch allocation of o alone: q.new_empty)':<50} {alloc_us:7.2f} us")
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        print(f"torch {torch.__version__} has no DLPack exchange API: flashjit.Kernel took the "
              "DLPack capsule path")
    over = times["flashjit.Kernel(q, k, v) (allocates o)"] - base
    print(f"package overhead (flashjit.Kernel allocating o) above the C++ launch: {over:.2f} us "
          f"({'within' if over <= 10 else 'over'} issue 17's 10 us)")
    over = times["flashjit.torch.attention (o)"] - base
    print(f"flashjit.torch op overhead above the C++ launch: {over:.2f} us "
          f"({'within' if over <= 10 else 'over'} issue 17's 10 us)")
    over = times["flashjit.torch.attention, q, k, v requiring grad"] - base
    print(f"flashjit.torch op overhead with q, k, v requiring grad: {over:.2f} us "
          f"({'within' if over <= 10 else 'over'} issue 17's 10 us)")


if __name__ == "__main__":
    main()
