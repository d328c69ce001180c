#!/usr/bin/env python3
"""Writes a Cohere2 checkpoint of random bf16 weights for a config.json: a real model's shapes (bench/models)
without its weights, as safetensors shards with an index, to measure what loading a checkpoint costs (reading
it, converting, quantizing at load). Matrices are N(0, 0.02) values (one random block repeated), norms 1.

    tools/gpu/random_checkpoint.py CONFIG_DIR OUT_DIR [--shard-gib 5]
"""
import argparse
import array
import json
import math
import os
import random
import struct


def tensors(c):
    h, inter, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    d = h // heads
    yield "model.embed_tokens.weight", (v, h)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (h,)
        yield p + "self_attn.q_proj.weight", (heads * d, h)
        yield p + "self_attn.k_proj.weight", (kv * d, h)
        yield p + "self_attn.v_proj.weight", (kv * d, h)
        yield p + "self_attn.o_proj.weight", (h, heads * d)
        yield p + "mlp.gate_proj.weight", (inter, h)
        yield p + "mlp.up_proj.weight", (inter, h)
        yield p + "mlp.down_proj.weight", (h, inter)
    yield "model.norm.weight", (h,)
    if not c.get("tie_word_embeddings", True):
        yield "lm_head.weight", (v, h)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--shard-gib", type=float, default=5.0)
    args = ap.parse_args()
    config = json.load(open(os.path.join(args.config_dir, "config.json")))
    os.makedirs(args.out_dir, exist_ok=True)
    json.dump(config, open(os.path.join(args.out_dir, "config.json"), "w"), indent=2)

    rng = random.Random(0)
    f32 = array.array("f", (rng.gauss(0.0, 0.02) for _ in range(1 << 20)))
    bf16 = array.array("H", (u >> 16 for u in array.array("I", f32.tobytes())))  # truncated to bf16
    block = bf16.tobytes() * 16  # 32 MiB
    ones = array.array("H", [0x3F80]).tobytes() * (1 << 16)

    shards, current, size = [], [], 0
    for name, shape in tensors(config):
        nbytes = 2 * math.prod(shape)
        if current and size + nbytes > args.shard_gib * (1 << 30):
            shards.append(current)
            current, size = [], 0
        current.append((name, shape, nbytes))
        size += nbytes
    shards.append(current)

    weight_map = {}
    for k, shard in enumerate(shards):
        file = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for name, shape, nbytes in shard:
            header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
            weight_map[name] = file
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(args.out_dir, file), "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for name, shape, nbytes in shard:
                source = ones if len(shape) == 1 else block
                left = nbytes
                while left > 0:
                    n = min(left, len(source))
                    f.write(source[:n])
                    left -= n
    json.dump({"metadata": {}, "weight_map": weight_map},
              open(os.path.join(args.out_dir, "model.safetensors.index.json"), "w"))
    print(f"{args.out_dir}: {len(shards)} shards, {len(weight_map)} tensors")


if __name__ == "__main__":
    main()
