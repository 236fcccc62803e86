"""flashjit's own NVRTC in a torch process (bench/NOTES.md entries 55-56, README "NVRTC and the
driver"): NVRTC keeps state from one program to the next inside one instance of the library,
and cuDNN's runtime compiles (its first SDPA calls with a cold driver cache) changed the d256
decode kernels flashjit compiled in torch's instance. flashjit now compiles in a copy of the
file the process holds. The probe, in a process of its own with a fresh HOME (an empty
~/.nv/ComputeCache, so that cuDNN compiles) and a fresh flashjit cache: cuDNN's SDPA (bf16, d128
and d256), flashjit's d256 decode kernels, cuDNN's SDPA again; it must exit 0 (opening NVRTC in
a link-map namespace of its own crashed in cuDNN's second SDPA), and every kernel it compiled
must have the PTX that `flashjit compile --decode`, in a process without torch, gives."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import flashjit
from flashjit._tools import cli_path

torch = pytest.importorskip("torch", reason="torch is not installed: the GPU tests use it")
if not torch.cuda.is_available() or not flashjit.has_device():
    pytest.skip("no CUDA GPU: tests/python/test_gpu_*.py run on the GPU machine",
                allow_module_level=True)

SPEC = {"name": "probe", "head_dim_qk": 256, "head_dim_v": 256, "dtype": "bf16"}

PROBE = textwrap.dedent(r"""
    import sys
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import flashjit

    def cudnn_sdpa(when):
        ran = 0
        for d in (128, 256):
            q, k, v = (torch.randn(2, 8, 1024, d, device="cuda", dtype=torch.bfloat16)
                       for _ in range(3))
            try:
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    F.scaled_dot_product_attention(q, k, v, is_causal=True)
                torch.cuda.synchronize()
                ran += 1
                print(f"probe: cuDNN SDPA d{d} {when}: ran", flush=True)
            except RuntimeError as error:  # a cuDNN without this shape says so, loudly
                print(f"probe: cuDNN SDPA d{d} {when}: NOT RUN ({error})", flush=True)
        if ran == 0:
            sys.exit(f"probe: no cuDNN SDPA ran {when}: nothing was probed")

    def nvrtc_files(when):
        with open("/proc/self/maps") as maps:
            files = sorted({line.split()[-1] for line in maps if "libnvrtc" in line})
        print(f"probe: NVRTC files mapped {when}: {files}", flush=True)

    nvrtc_files("after import torch")
    cudnn_sdpa("before flashjit")
    nvrtc_files("before flashjit")
    kernel = flashjit.Kernel(SPEC)
    # One new row of 32 query heads over 8 KV heads against 8192 keys: the decode kernels, the
    # keys split over CTAs, so the combine runs too.
    q = torch.randn(1, 1, 32, 256, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, 8192, 8, 256, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = kernel(q, k, v)
    torch.cuda.synchronize()
    print(f"probe: flashjit decode ran, |o| = {out.float().abs().mean().item():.4f}", flush=True)
    nvrtc_files("after flashjit")
    cudnn_sdpa("after flashjit")
    print("probe: survived", flush=True)
""")


def fresh_env(tmp: Path, name: str) -> dict:
    """The environment of a child: a fresh HOME (the driver's compute cache in it empty), a fresh
    flashjit cache, PTX dumped, the verbose lines on; this process's sys.path (torch and
    flashjit may live in the old HOME's user site)."""
    env = dict(os.environ)
    for variable in ("CUDA_CACHE_PATH", "CUDA_CACHE_DISABLE", "FLASHJIT_NVRTC_LIBRARY",
                     "FLASHJIT_DISABLE_CACHE", "FLASHJIT_TUNE_DB", "XDG_CACHE_HOME"):
        env.pop(variable, None)
    home = tmp / f"{name}-home"
    home.mkdir()
    env.update(HOME=str(home), FLASHJIT_CACHE_DIR=str(tmp / f"{name}-cache"),
               FLASHJIT_DUMP_DIR=str(tmp / f"{name}-dump"), FLASHJIT_VERBOSE="1",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return env


def run(command, env, timeout=900):
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    output = done.stdout + done.stderr
    print(output)  # pytest -rs -s shows it; a failure shows it anyway
    return done.returncode, output


def ptx_files(folder: Path) -> dict:
    return {p.name: p.read_text() for p in sorted(folder.glob("*.ptx"))}


def test_flashjit_kernels_in_a_torch_process_after_cudnn_compiles_are_those_without_torch(
        tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(f"SPEC = {SPEC!r}\n" + PROBE)
    env = fresh_env(tmp_path, "torch")
    code, output = run([sys.executable, str(probe)], env)
    assert code == 0, f"the probe died (exit {code}):\n{output}"
    assert "probe: survived" in output
    # torch (or cuDNN) held NVRTC when flashjit first compiled: flashjit opened a copy (the
    # "NVRTC files mapped before flashjit" line shows what the process held).
    assert "an instance of flashjit's own" in output, output
    assert env["FLASHJIT_CACHE_DIR"] + "/nvrtc/" in output, output
    in_torch = ptx_files(Path(env["FLASHJIT_DUMP_DIR"]))
    combine = [name for name in in_torch if name.startswith("fa_dec_combine_qk256_v256_bf16")]
    assert combine, f"no d256 combine kernel was compiled in the probe: {sorted(in_torch)}"

    spec_file = tmp_path / "probe.yaml"
    spec_file.write_text(flashjit.spec(SPEC).to_yaml())
    plain = fresh_env(tmp_path, "plain")
    code, output = run([cli_path(), "compile", "--decode", str(spec_file)], plain)
    assert code == 0, output
    assert "an instance of flashjit's own" not in output  # no torch: NVRTC by its soname
    alone = ptx_files(Path(plain["FLASHJIT_DUMP_DIR"]))
    compared = sorted(set(in_torch) & set(alone))
    assert set(combine) <= set(compared), (sorted(in_torch), sorted(alone))
    differ = [name for name in compared if in_torch[name] != alone[name]]
    assert not differ, (f"PTX compiled in the torch process differs from the one without torch: "
                        f"{differ} ({[(len(in_torch[n]), len(alone[n])) for n in differ]})")
    print(f"identical PTX: {compared}")
