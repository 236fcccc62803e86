"""The benchmark grid of issue 3 and the backward rows of issue 15, FLOP counts, the flashjit
spec of each shape, and the issues' speed targets. Pure Python: no torch needed here."""
from __future__ import annotations

from dataclasses import dataclass

TOKENS_PER_BATCH = 16384  # FlashAttention papers: batch = 16k / seqlen
HIDDEN = 2048             # heads = 2048 / head_dim

BF16_DIMS = [(d, d) for d in (64, 72, 80, 96, 100, 112, 128, 136, 160, 192, 200, 256, 320, 512)]
BF16_DIMS.append((192, 128))
FP16_DIMS = [(64, 64), (128, 128)]
SEQLENS = [1024, 4096, 16384]
QUICK_DIMS = [(64, 64), (100, 100), (128, 128), (192, 128)]
QUICK_SEQLENS = [4096]

# Head counts that do not follow HIDDEN / head_dim (ANCHORS.md uses 16 heads for (192, 128)).
HEADS_OVERRIDE = {(192, 128): 16}


def torch_dtype(torch, name: str):
    """The torch dtype of a spec's dtype name ("bf16" | "fp16"); `torch` is the caller's
    module, so this file imports none."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}[name]


@dataclass(frozen=True)
class Shape:
    dtype: str  # "bf16" | "fp16"
    dqk: int
    dv: int
    seqlen: int  # seqlen_q == seqlen_k in this grid
    causal: bool
    # Shapes outside the 16k-token rule (the long series of the backward rows); 0: the rule.
    fixed_batch: int = 0
    fixed_heads: int = 0

    @property
    def batch(self) -> int:
        return self.fixed_batch or max(1, TOKENS_PER_BATCH // self.seqlen)

    @property
    def heads(self) -> int:
        return self.fixed_heads or HEADS_OVERRIDE.get((self.dqk, self.dv),
                                                      max(1, HIDDEN // self.dqk))

    @property
    def dims_label(self) -> str:
        return str(self.dqk) if self.dqk == self.dv else f"{self.dqk}/{self.dv}"

    @property
    def kernel_key(self) -> "KernelKey":
        return KernelKey(self.dtype, self.dqk, self.dv, self.causal)

    def label(self) -> str:
        mask = "causal" if self.causal else "full"
        return (f"{self.dtype} d{self.dims_label} s{self.seqlen} {mask} "
                f"{self.batch}x{self.heads}")


@dataclass(frozen=True)
class KernelKey:
    """What one flashjit kernel serves: every seqlen of a (dtype, dims, causal) shares it.
    `deterministic` asks for the deterministic backward (the backward rows measure both)."""
    dtype: str
    dqk: int
    dv: int
    causal: bool
    deterministic: bool = False

    @property
    def name(self) -> str:
        return (f"bench_{self.dtype}_qk{self.dqk}_v{self.dv}"
                f"{'_causal' if self.causal else ''}{'_det' if self.deterministic else ''}")

    def spec_yaml(self) -> str:
        # The YAML schema of configs/README.md; tiles and arch left to flashjit.
        spec = (f"name: {self.name}\n"
                f"head_dim_qk: {self.dqk}\n"
                f"head_dim_v: {self.dv}\n"
                f"dtype: {self.dtype}\n"
                f"causal: {'true' if self.causal else 'false'}\n")
        return spec + ("backward: {deterministic: true}\n" if self.deterministic else "")


def visible_pairs(seqlen_q: int, seqlen_k: int, causal: bool) -> int:
    """(query, key) pairs a head computes; causal is bottom-right aligned (DESIGN.md):
    query i sees key j when j <= i + seqlen_k - seqlen_q."""
    if not causal:
        return seqlen_q * seqlen_k
    offset = seqlen_k - seqlen_q
    return sum(min(seqlen_k, max(0, i + offset + 1)) for i in range(seqlen_q))


def forward_flops(shape: Shape) -> int:
    """2 multiply-adds per visible pair per head dim, for Q·Kᵀ (dqk) and P·V (dv)."""
    pairs = visible_pairs(shape.seqlen, shape.seqlen, shape.causal)
    return 2 * shape.batch * shape.heads * pairs * (shape.dqk + shape.dv)


def backward_flops(shape: Shape) -> int:
    """DESIGN.md: the backward counts 2.5 x the forward's FLOPs (five GEMMs of the
    recomputing backward against the forward's two)."""
    return forward_flops(shape) * 5 // 2


def parse_dims(text: str) -> list[tuple[int, int]]:
    """'64,128,192/128' -> [(64, 64), (128, 128), (192, 128)]."""
    dims = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        qk, _, v = item.partition("/")
        dims.append((int(qk), int(v or qk)))
    return dims


def parse_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def grid(dims: list[tuple[int, int]] | None, seqlens: list[int] | None,
         dtypes: list[str], quick: bool) -> list[Shape]:
    """The shapes to run: bf16 over `dims`, fp16 over the dims of FP16_DIMS among them.
    None means the issue's full list (or the quick one with `quick`)."""
    if dims is None:
        dims = QUICK_DIMS if quick else BF16_DIMS
    if seqlens is None:
        seqlens = QUICK_SEQLENS if quick else SEQLENS
    per_dtype = {"bf16": dims, "fp16": [d for d in dims if d in FP16_DIMS]}
    shapes = []
    for dtype in dtypes:
        for dqk, dv in per_dtype[dtype]:
            for seqlen in seqlens:
                for causal in (False, True):
                    shapes.append(Shape(dtype, dqk, dv, seqlen, causal))
    return shapes


_BASELINE_NAMES = {"flash": "FA2", "cudnn": "cuDNN", "best": "best PyTorch"}


@dataclass(frozen=True)
class Target:
    """A speed target: flashjit TFLOP/s >= factor x the baseline's in the same run, or, with
    baseline "tflops", >= factor TFLOP/s."""
    baseline: str  # "flash" (PyTorch's FA2 backend), "cudnn", "best" (best PyTorch), "tflops"
    factor: float

    def describe(self) -> str:
        if self.baseline == "tflops":
            return f">= {self.factor:g} TFLOP/s"
        return f">= {self.factor:g}x {_BASELINE_NAMES[self.baseline]}"


TARGET_SEQLENS = (4096, 16384)
_TARGETS = {
    **{d: Target("flash", 1.0) for d in (64, 96, 128, 192, 256)},
    **{d: Target("flash", 1.2) for d in (72, 80, 112, 136, 160, 200)},
    **{d: Target("best", 2.0) for d in (100, 320, 512)},
}


def target_for(shape: Shape) -> Target | None:
    if shape.dqk != shape.dv or shape.seqlen not in TARGET_SEQLENS:
        return None
    return _TARGETS.get(shape.dqk)


# ---------------------------------------------------------------- the backward rows (issue 15)

BACKWARD_SEQLEN = 16384
BACKWARD_DIMS = [(d, d) for d in (64, 128, 192, 256)] + [(192, 128)] + \
    [(d, d) for d in (72, 100, 136, 200, 320, 512)]
# The first seed document's long time series (a trading day at one-second resolution):
# seqlen 23,400, 12 heads, causal, as ANCHORS.md measured it: (head dim, batch).
LONG_SERIES_SEQLEN = 23400
LONG_SERIES_HEADS = 12
LONG_SERIES = [(64, 1), (64, 4), (40, 2)]


def backward_grid(dims: list[tuple[int, int]] | None, seqlens: list[int] | None,
                  quick: bool) -> list[Shape]:
    """bf16, causal and not, over the issue's head dims at 16k tokens, then the long series.
    --dims / --seqlens / --quick replace the head dims and the seqlen, and drop the long
    series."""
    chosen = dims is not None or seqlens is not None or quick
    if dims is None:
        dims = QUICK_DIMS if quick else BACKWARD_DIMS
    if seqlens is None:
        seqlens = QUICK_SEQLENS if quick else [BACKWARD_SEQLEN]
    shapes = [Shape("bf16", dqk, dv, seqlen, causal)
              for dqk, dv in dims for seqlen in seqlens for causal in (False, True)]
    if not chosen:
        shapes += [Shape("bf16", d, d, LONG_SERIES_SEQLEN, True, batch, LONG_SERIES_HEADS)
                   for d, batch in LONG_SERIES]
    return shapes


# Issue 15's targets as same-run ratios (FlashAttention-4's backward on our H200 over PyTorch's
# cuDNN, from ANCHORS.md), and the absolute ones where only the efficient backend runs.
_BACKWARD_TARGETS = {
    (64, 64): [Target("cudnn", 1.17)],
    (128, 128): [Target("cudnn", 1.16)],
    (192, 192): [Target("cudnn", 1.71)],
    (256, 256): [Target("cudnn", 1.07)],
    (192, 128): [Target("cudnn", 1.66)],
    (72, 72): [Target("best", 1.5)],
    (100, 100): [Target("best", 1.5)],
    (136, 136): [Target("best", 1.5), Target("cudnn", 1.98)],
    (200, 200): [Target("best", 1.5)],
    (320, 320): [Target("tflops", 200)],
    (512, 512): [Target("tflops", 200)],
}
_LONG_SERIES_TARGET = [Target("cudnn", 1.27)]  # d64: FA4's 522 TFLOP/s over cuDNN's 410


def backward_targets_for(shape: Shape) -> list[Target]:
    """Every target the row must meet (empty: none). The 16k ones are non-causal."""
    if shape.seqlen == LONG_SERIES_SEQLEN and shape.dqk == shape.dv == 64 and shape.causal:
        return _LONG_SERIES_TARGET
    if shape.seqlen != BACKWARD_SEQLEN or shape.causal or shape.fixed_batch:
        return []
    return _BACKWARD_TARGETS.get((shape.dqk, shape.dv), [])


# Issue 15's "deterministic mode >= 0.8x the non-deterministic speed at every head dim": the
# kernel whose spec asks for backward: {deterministic: true} over the default one, in TFLOP/s.
DETERMINISTIC_FACTOR = 0.8
DETERMINISTIC_TARGET = f"deterministic >= {DETERMINISTIC_FACTOR:g}x default"


def deterministic_target_applies(shape: Shape) -> bool:
    """The deterministic target is judged on every 16k row, causal and not (one target over
    all of them: met only where every row meets it)."""
    return shape.seqlen == BACKWARD_SEQLEN and not shape.fixed_batch


# ---------------------------------------------------------------- the mask shapes (issue 6)

MASK_SEQLEN = 16384
MASK_DIMS = (64, 128)
MASK_BLOCK = 128          # block-sparse block size: FlexAttention's default, both sides
WINDOW = 1024             # causal sliding window: each query sees itself and 1023 keys before
SPARSE_DENSITIES = (0.1, 0.5)


@dataclass(frozen=True)
class MaskShape:
    """One shape of the mask benchmark: batch 1, 16k tokens, heads = 2048 / d, bf16."""
    dim: int
    kind: str          # "window" (causal, WINDOW keys) or "sparse" (random block layout)
    density: float = 0.0  # sparse only: the fraction of visible (query, key) blocks

    seqlen = MASK_SEQLEN
    batch = 1

    @property
    def heads(self) -> int:
        return HIDDEN // self.dim

    def label(self) -> str:
        mask = (f"causal window {WINDOW}" if self.kind == "window"
                else f"block-sparse {self.density:.0%}")
        return f"bf16 d{self.dim} s{self.seqlen} {mask} {self.batch}x{self.heads}"

    def spec_yaml(self) -> str:
        if self.kind == "window":
            mask = f"{{sliding_window: {{left: {WINDOW - 1}, right: 0}}}}"
            causal = "true"
        else:
            mask = f"{{block_sparse: {{block_q: {MASK_BLOCK}, block_k: {MASK_BLOCK}}}}}"
            causal = "false"
        return (f"name: bench_mask_{self.kind}_d{self.dim}\nhead_dim: {self.dim}\n"
                f"dtype: bf16\ncausal: {causal}\nmask: {mask}\n")

    def dense_spec_yaml(self) -> str:
        """The unmasked kernel of the same head dim: the TFLOP/s yardstick."""
        return f"name: bench_mask_dense_d{self.dim}\nhead_dim: {self.dim}\ndtype: bf16\n"


def mask_grid(dims: list[int] | None = None) -> list[MaskShape]:
    shapes = []
    for d in dims or MASK_DIMS:
        shapes.append(MaskShape(d, "window"))
        shapes.extend(MaskShape(d, "sparse", p) for p in SPARSE_DENSITIES)
    return shapes


def window_visible_pairs(seqlen: int) -> int:
    """Pairs of the causal window: query i sees keys max(0, i - WINDOW + 1) .. i."""
    return sum(min(i + 1, WINDOW) for i in range(seqlen))


def window_visited_pairs(seqlen: int, block_m: int, block_n: int) -> int:
    """(query, key) pairs the kernel computes for the causal window: each CTA of block_m rows
    walks the block_n key tiles from the band's first to the diagonal (fwd_sm80.cuh)."""
    total = 0
    for m0 in range(0, seqlen, block_m):
        key_end = min(seqlen, m0 + block_m)
        key_begin = max(0, m0 - (WINDOW - 1))
        tiles = -(-key_end // block_n) - key_begin // block_n
        total += tiles * block_m * block_n
    return total


def mask_flops(pairs: int, heads: int, dim: int, batch: int = 1) -> int:
    """2 multiply-adds per pair and head dim, for Q·Kᵀ and P·V (DESIGN.md)."""
    return 2 * batch * heads * pairs * (dim + dim)
