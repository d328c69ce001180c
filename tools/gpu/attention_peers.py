"""Prefill attention of PyTorch's kernels on the shape of tide_bench's attention section (8192 tokens of one
sequence, 32 query / 8 KV heads, head_dim 128, bf16), for comparison in the same run: SDPA with the cuDNN
backend (K/V repeated to 32 heads: cuDNN's SDPA takes no GQA), SDPA with the FlashAttention-2 backend (GQA),
and compiled flex_attention, causal and with a window of 4096 keys. Prints TFLOP/s of useful FLOPs (4 x heads x
head_dim per (query, key) pair the mask allows), as tide_bench counts them; a backend this PyTorch lacks prints
its error instead.

`--decode SEQS:CONTEXT ...` measures decode instead: SEQS sequences of one query token attending CONTEXT keys
each (contiguous K/V, not paged), SDPA's FlashAttention-2 backend (GQA) and cuDNN (K/V repeated), in GB/s of the
K and V each sequence attends read once, as tide_bench's attention section counts them."""
import sys

import torch
import torch.nn.functional as F

T, HQ, HKV, D, WINDOW = 8192, 32, 8, 128, 4096


def useful_flops(window):
    pairs = sum(min(i + 1, window) if window else i + 1 for i in range(T))
    return 4.0 * HQ * D * pairs


def time_ms(fn, runs=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(runs):
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def report(name, window, fn):
    try:
        ms = time_ms(fn)
        print(f"{name:40s} {'causal' if window == 0 else 'window 4096':12s} {ms:8.3f} ms "
              f"{useful_flops(window) / ms / 1e9:7.1f} TFLOP/s")
    except Exception as e:  # a backend missing from this build
        print(f"{name:40s} {'causal' if window == 0 else 'window 4096':12s} error: {str(e).splitlines()[0][:80]}")


def decode(points):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for point in points:
        seqs, context = (int(x) for x in point.split(":"))
        q = torch.randn(seqs, HQ, 1, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(seqs, HKV, context, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        kv_bytes = 2 * k.numel() * k.element_size()
        cases = [("SDPA FlashAttention-2 (GQA)", SDPBackend.FLASH_ATTENTION, k, v, {"enable_gqa": True})]
        if seqs * context * HQ * D * 2 * 2 < (24 << 30):
            k_rep, v_rep = k.repeat_interleave(HQ // HKV, 1), v.repeat_interleave(HQ // HKV, 1)
            cases.append(("SDPA cuDNN (K/V repeated; reads 4x)", SDPBackend.CUDNN_ATTENTION, k_rep, v_rep, {}))
        for name, backend, kk, vv, kw in cases:
            def run():
                with sdpa_kernel([backend]):
                    F.scaled_dot_product_attention(q, kk, vv, **kw)
            try:
                ms = time_ms(run)
                print(f"{name:40s} decode {seqs} x {context:6d} {ms:8.3f} ms {kv_bytes / ms / 1e6:7.1f} GB/s")
            except Exception as e:
                print(f"{name:40s} decode {seqs} x {context:6d} error: {str(e).splitlines()[0][:80]}")


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--decode":
        return decode(sys.argv[2:])
    torch.manual_seed(0)
    q = torch.randn(1, HQ, T, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, HKV, T, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, HKV, T, D, device="cuda", dtype=torch.bfloat16)
    k_rep, v_rep = k.repeat_interleave(HQ // HKV, 1), v.repeat_interleave(HQ // HKV, 1)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa(backend, kk, vv, **kw):
        def run():
            with sdpa_kernel([backend]):
                F.scaled_dot_product_attention(q, kk, vv, is_causal=True, **kw)
        return run

    report("SDPA cuDNN (K/V repeated)", 0, sdpa(SDPBackend.CUDNN_ATTENTION, k_rep, v_rep))
    report("SDPA FlashAttention-2 (GQA)", 0, sdpa(SDPBackend.FLASH_ATTENTION, k, v, enable_gqa=True))
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    flex = torch.compile(flex_attention)
    for window in (0, WINDOW):
        def mask(b, h, qi, ki, window=window):
            return (ki <= qi) & ((qi - ki < window) if window else (ki >= 0))
        block_mask = create_block_mask(mask, None, None, T, T)
        report("flex_attention (GQA)", window, lambda: flex(q, k, v, block_mask=block_mask, enable_gqa=True))


if __name__ == "__main__":
    main()
