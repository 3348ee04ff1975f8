#!/usr/bin/env python3
"""Times, through PyTorch, the kernels of a shape list that training frameworks run fused.

The CUDA suite (kernels_profiles/suite) has only naive fallback attention kernels and
straightforward norm and activation kernels; training frameworks run fused, tuned ones (cuDNN's
fused attention under Transformer Engine, FlashAttention, PyTorch's own norm kernels). This
script times those on this machine's GPU and writes a stepsim-kernel-times/1 list that
`stepsim_kernel_suite --times FILE` merges into the measured profile (docs/kernels.md):

- attention_fwd / attention_bwd: scaled_dot_product_attention with each fused backend PyTorch
  has (cuDNN, FlashAttention); the faster per shape is kept, its impl named;
- layernorm, rmsnorm (bf16/fp16 rows x cols, weight (and bias), output in the input's dtype):
  F.layer_norm, F.rms_norm;
- gelu (tanh approximation, bf16/fp16 elements): F.gelu.

    python3 tools/time_kernels_torch.py SHAPES.csv [SHAPES.csv ...] --out times.csv

Needs a CUDA GPU and PyTorch; exits 77 (skip) without them. Timing: random inputs, CUDA events
around each call, warm-up, the median of enough calls to fill --budget-s per shape (3..50); for
the memory-bound kernels the inputs rotate over enough copies to exceed 3x the L2 cache. The
attention backward is timed alone (torch.autograd.grad of a kept forward graph: no gradient
accumulation), as the profile's attention_bwd row means.
"""

import argparse
import os
import sys
import tempfile

ATTENTION = ("attention_fwd", "attention_bwd")
ROWWISE = ("layernorm", "rmsnorm")
ELEMENTWISE = ("gelu",)
REQUIRED = {
    "attention_fwd": ("batch", "heads", "kv_heads", "seq", "head_dim", "causal"),
    "attention_bwd": ("batch", "heads", "kv_heads", "seq", "head_dim", "causal"),
    "layernorm": ("rows", "cols"),
    "rmsnorm": ("rows", "cols"),
    "gelu": ("elements",),
}


def read_shapes(paths):
    """[(kernel, dtype, shape_text, fields)] of the rows this script times, first occurrence kept."""
    seen = set()
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line or line.startswith("#") or line.startswith("kernel,"):
                    continue
                cols = [c.strip() for c in line.split(",")]
                if cols[0] not in REQUIRED:
                    continue
                if len(cols) < 3:
                    sys.exit(f"{path}:{lineno}: expected kernel,dtype,shape")
                key = (cols[0], cols[1], cols[2])
                if key in seen:
                    continue
                seen.add(key)
                fields = {}
                for part in cols[2].split(";"):
                    name, _, value = part.partition("=")
                    try:
                        fields[name] = int(value)
                    except ValueError:
                        sys.exit(f"{path}:{lineno}: shape field '{part}' is not name=integer")
                for name in REQUIRED[cols[0]]:
                    if name not in fields:
                        sys.exit(f"{path}:{lineno}: {cols[0]} shape lacks '{name}'")
                out.append((cols[0], cols[1], cols[2], fields))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lists", nargs="+", help="shape lists or profiles (CSV)")
    ap.add_argument("--out", required=True, help="time list to write (stepsim-kernel-times/1)")
    ap.add_argument("--budget-s", type=float, default=0.2, help="timing seconds per shape and backend")
    ap.add_argument("--max-tflop", type=float, default=50.0,
                    help="leave out attention shapes whose forward exceeds this many TFLOP (the model covers them)")
    args = ap.parse_args()
    if args.budget_s <= 0 or args.max_tflop <= 0:
        sys.exit("--budget-s and --max-tflop must be > 0")

    shapes = read_shapes(args.lists)
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        print(f"time_kernels_torch: PyTorch not available ({e}); skipping", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("time_kernels_torch: no CUDA GPU; skipping", file=sys.stderr)
        return 77

    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    dev = torch.device("cuda")
    l2_bytes = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}, {len(shapes)} shapes", flush=True)

    def median_time(fn, rotations=1):
        """Median seconds of fn(i) over calls, i cycling through range(rotations)."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for i in range(2):
            fn(i % rotations)
        torch.cuda.synchronize()
        start.record()
        fn(0)
        end.record()
        end.synchronize()
        first = start.elapsed_time(end) / 1e3
        reps = max(3, min(50, int(args.budget_s / max(first, 1e-6))))
        times = []
        for r in range(reps):
            start.record()
            fn(r % rotations)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        times.sort()
        return times[len(times) // 2]

    def rotations_for(nbytes):
        return max(1, min(64, -(-3 * l2_bytes // max(nbytes, 1))))

    rows = []

    # Attention: one set of inputs serves the forward and backward rows of a shape.
    by_shape = {}
    for kernel, dtype, text, fields in shapes:
        if kernel in ATTENTION:
            by_shape.setdefault((dtype, text), (fields, []))[1].append(kernel)
    backends = [("torch_sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("torch_sdpa_flash", SDPBackend.FLASH_ATTENTION)]
    for (dtype, text), (fields, kernels) in by_shape.items():
        if dtype not in dtypes:
            print(f"{text}: dtype {dtype} not timed", flush=True)
            continue
        b, h, hk, s, d = (fields[k] for k in ("batch", "heads", "kv_heads", "seq", "head_dim"))
        causal = bool(fields["causal"])
        fwd_flop = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)  # kernel_flops()
        if fwd_flop > args.max_tflop * 1e12:
            print(f"{text}: {fwd_flop / 1e12:.0f} TFLOP forward, over --max-tflop; not timed", flush=True)
            continue
        gen = torch.Generator(device=dev).manual_seed(1234)
        q = torch.randn(b, h, s, d, device=dev, dtype=dtypes[dtype], generator=gen).requires_grad_()
        k = torch.randn(b, hk, s, d, device=dev, dtype=dtypes[dtype], generator=gen).requires_grad_()
        v = torch.randn(b, hk, s, d, device=dev, dtype=dtypes[dtype], generator=gen).requires_grad_()
        grad_out = torch.randn(b, h, s, d, device=dev, dtype=dtypes[dtype], generator=gen)
        best = {}
        for impl, backend in backends:
            try:
                with sdpa_kernel([backend]):
                    def fwd(_):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=(h != hk))

                    out = fwd(0)
                    if not torch.isfinite(out).all():
                        raise RuntimeError("non-finite output")
                    t_fwd = median_time(fwd)
                    t_bwd = median_time(lambda _: torch.autograd.grad(out, (q, k, v), grad_out, retain_graph=True))
                    del out
            except RuntimeError as e:  # backend does not support this shape or GPU
                print(f"{text}: {impl} unavailable ({str(e).splitlines()[0][:120]})", flush=True)
                torch.cuda.synchronize()
                continue
            for kernel, t in (("attention_fwd", t_fwd), ("attention_bwd", t_bwd)):
                if kernel in kernels and (kernel not in best or t < best[kernel][0]):
                    best[kernel] = (t, impl)
            print(f"{text}: {impl} fwd {t_fwd * 1e3:.3f} ms ({fwd_flop / t_fwd / 1e12:.0f} TFLOP/s), "
                  f"bwd {t_bwd * 1e3:.3f} ms ({2.5 * fwd_flop / t_bwd / 1e12:.0f} TFLOP/s)", flush=True)
        for kernel in kernels:
            if kernel in best:
                rows.append(f"{kernel},{dtype},{text},{best[kernel][0]:.6e},{best[kernel][1]}")
        del q, k, v, grad_out
        torch.cuda.empty_cache()

    # Norms and GELU: memory-bound, bytes = 2 x element size x elements (docs/kernels.md).
    for kernel, dtype, text, fields in shapes:
        if kernel in ATTENTION:
            continue
        if dtype not in dtypes:
            print(f"{kernel} {text}: dtype {dtype} not timed", flush=True)
            continue
        dt = dtypes[dtype]
        if kernel in ROWWISE:
            shape = (fields["rows"], fields["cols"])
        else:
            shape = (fields["elements"],)
        n = 1
        for x in shape:
            n *= x
        nbytes = 2 * n * torch.finfo(dt).bits // 8
        rot = rotations_for(nbytes)
        if nbytes * rot > 24 << 30:
            print(f"{kernel} {text}: too large to rotate; not timed", flush=True)
            continue
        gen = torch.Generator(device=dev).manual_seed(99)
        xs = [torch.randn(*shape, device=dev, dtype=dt, generator=gen) for _ in range(rot)]
        y = torch.empty(*shape, device=dev, dtype=dt)
        if kernel == "layernorm":
            w = torch.randn(shape[-1], device=dev, dtype=dt, generator=gen)
            bias = torch.randn(shape[-1], device=dev, dtype=dt, generator=gen)
            fn, impl = (lambda i: F.layer_norm(xs[i], (shape[-1],), w, bias)), "torch_layer_norm"
        elif kernel == "rmsnorm":
            w = torch.randn(shape[-1], device=dev, dtype=dt, generator=gen)
            fn, impl = (lambda i: F.rms_norm(xs[i], (shape[-1],), w)), "torch_rms_norm"
        else:
            fn, impl = (lambda i: torch.ops.aten.gelu.out(xs[i], approximate="tanh", out=y)), "torch_gelu_tanh"
        with torch.no_grad():
            out = fn(0)
            if not torch.isfinite(out).all():
                sys.exit(f"{kernel} {text}: non-finite output")
            t = median_time(fn, rot)
        rows.append(f"{kernel},{dtype},{text},{t:.6e},{impl}")
        print(f"{kernel} {text}: {impl} {t * 1e6:.1f} us ({nbytes / t / 1e9:.0f} GB/s)", flush=True)
        del xs, y, out
        torch.cuda.empty_cache()

    # Whole or not at all: write a temporary file, then rename it over the target.
    out_dir = os.path.dirname(os.path.abspath(args.out))
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".times.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("# format: stepsim-kernel-times/1\n")
        f.write(f"# timed by tools/time_kernels_torch.py: torch {torch.__version__}, "
                f"cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name(0)}\n")
        f.write("kernel,dtype,shape,time_s,impl\n")
        for r in rows:
            f.write(r + "\n")
    os.replace(tmp, args.out)
    print(f"wrote {len(rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
