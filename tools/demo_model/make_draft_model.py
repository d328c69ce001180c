#!/usr/bin/env python3
"""Trains a draft model for the bundled demo model (models/tide-demo-draft) for speculative decoding.

The draft is a smaller Cohere2ForCausalLM on the target's own tokenizer (read from the target's folder, so the
ids are the target's ids) and on the same text (the standard library's source, split as make_demo_model.py
splits it). It is distilled: each step runs the target on the batch and trains the draft on the KL divergence
from the target's next-token distribution to its own, which is what speculative decoding rewards (a greedy draft
is accepted where its argmax is the target's; a sampled one with probability sum_x min(p(x), q(x))). The weights
with the best held-out divergence are kept, and the report records, on held-out text, how often the draft's
argmax is the target's and the mean of sum_x min(p, q).

Usage (from the repository root, on a machine with one CUDA GPU and torch, transformers, tokenizers, safetensors):
    python3 tools/demo_model/make_draft_model.py --out DIR [--target models/tide-demo] [--pack]
DIR receives model/ (the draft's folder: bf16 weights, config, the target's tokenizer files), training_report.json
and log.txt; with --pack, draft.tar.gz holds model/ instead. To update the repository, copy model/* and the
report to models/tide-demo-draft/.
"""
import argparse
import json
import os
import random
import shutil
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_demo_model  # noqa: E402

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--target", default="models/tide-demo", help="the target model's folder")
    p.add_argument("--pack", action="store_true", help="write draft.tar.gz (model/) in --out")
    p.add_argument("--seed", type=int, default=4321)
    # The draft's shape: a few percent of the target's cost per token (it runs k times per verify step), the
    # target's head size and GQA ratio, one sliding and one global layer.
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--intermediate", type=int, default=384)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--kv-heads", type=int, default=1)
    p.add_argument("--global-every", type=int, default=2, help="layer i is global when (i + 1) %% N == 0")
    # training (train.py's loop)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--min-lr", type=float, default=3e-4)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--steps", type=int, default=0, help="number of steps (0: as many as fit --train-seconds)")
    p.add_argument("--train-seconds", type=float, default=150)
    p.add_argument("--hard-seconds", type=float, default=210, help="training stops here whatever the plan")
    p.add_argument("--max-steps", type=int, default=100000)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--val-batches", type=int, default=8)
    return p.parse_args()


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)

    def finish():
        model_dir = os.path.join(args.out, "model")
        if args.pack and os.path.isdir(model_dir):
            with tarfile.open(os.path.join(args.out, "draft.tar.gz"), "w:gz") as tar:
                tar.add(model_dir, arcname="model")
            shutil.rmtree(model_dir)

    make_demo_model.run_reported(args, run, finish)


def draft_config(target_config, args):
    """train.py's configuration with the draft's sizes and the target's vocabulary, window, RoPE, logit scale and
    maximum length."""
    import train as train_lib

    args.window = target_config.sliding_window
    args.max_position_embeddings = target_config.max_position_embeddings
    rope = getattr(target_config, "rope_parameters", None) or {"rope_theta": target_config.rope_theta}
    args.rope_theta = rope["rope_theta"]
    args.logit_scale = target_config.logit_scale
    config = train_lib.make_config(target_config.vocab_size, args)
    if config.head_dim != target_config.head_dim:
        raise ValueError(f"the draft's head size {config.head_dim} is not the target's {target_config.head_dim}")
    return config


def distillation_loss(target):
    """KL(p_target || q_draft) per position, averaged: the target runs under no_grad on the same inputs."""
    import torch
    import torch.nn.functional as F

    def loss(model, x, _y):
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            p_logits = target(input_ids=x, use_cache=False).logits
        with torch.autocast("cuda", dtype=torch.bfloat16):
            q_logits = model(input_ids=x, use_cache=False).logits
        vocab = q_logits.shape[-1]
        log_p = F.log_softmax(p_logits.float().reshape(-1, vocab), dim=-1)
        log_q = F.log_softmax(q_logits.float().reshape(-1, vocab), dim=-1)
        return F.kl_div(log_q, log_p, log_target=True, reduction="batchmean")

    return loss


def agreement(target, draft, batches):
    """On held-out batches: the share of positions where the draft's argmax is the target's, the mean of
    sum_x min(p(x), q(x)) (the acceptance of a draft sampled from q at temperature 1), and both models'
    cross-entropy on the next ids."""
    import torch
    import torch.nn.functional as F

    draft.eval()
    top1 = overlap = ce_p = ce_q = n = 0.0
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for x, y in batches:
            p = target(input_ids=x, use_cache=False).logits.float()
            q = draft(input_ids=x, use_cache=False).logits.float()
            vocab = p.shape[-1]
            top1 += (p.argmax(-1) == q.argmax(-1)).float().sum().item()
            overlap += torch.minimum(p.softmax(-1), q.softmax(-1)).sum(-1).sum().item()
            ce_p += F.cross_entropy(p.reshape(-1, vocab), y.reshape(-1), reduction="sum").item()
            ce_q += F.cross_entropy(q.reshape(-1, vocab), y.reshape(-1), reduction="sum").item()
            n += y.numel()
    draft.train()
    return {"argmax_agreement": round(top1 / n, 4), "mean_min_p_q": round(overlap / n, 4),
            "target_val_loss": round(ce_p / n, 4), "draft_val_loss": round(ce_q / n, 4), "positions": int(n)}


def run(args, log, report):
    import tokenizers
    import torch
    import transformers

    import train as train_lib

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    report["versions"] = {"python": sys.version.split()[0], "torch": torch.__version__,
                          "transformers": transformers.__version__, "tokenizers": tokenizers.__version__}
    report["device"] = torch.cuda.get_device_name(0)
    log(f"device {report['device']}, versions {report['versions']}")

    tok = tokenizers.Tokenizer.from_file(os.path.join(args.target, "tokenizer.json"))
    target = transformers.AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32,
                                                               attn_implementation="sdpa").to("cuda").eval()
    for param in target.parameters():
        param.requires_grad_(False)
    log(f"target {args.target}: {sum(p.numel() for p in target.parameters())} parameters, "
        f"vocabulary {target.config.vocab_size}, tokenizer {tok.get_vocab_size()}")

    corpus, train_docs, chat_docs, val_docs = make_demo_model.corpus_documents(log)
    report["corpus"] = corpus.record()
    train_stream, val_stream, report["tokens"] = make_demo_model.token_streams(tok, train_docs, chat_docs,
                                                                               val_docs, args.seed)
    log(f"tokens: {report['tokens']}")

    config = draft_config(target.config, args)
    draft = train_lib.make_model(config, "cuda")
    report["num_params"] = sum(p.numel() for p in draft.parameters())
    log(f"draft: {report['num_params']} parameters, layer types {config.layer_types}")

    val_source = train_lib.Batches(val_stream, args.seq_len, args.batch_size, args.seed + 7, "cuda")
    held_out = [val_source.next() for _ in range(args.val_batches)]
    report["before"] = agreement(target, draft, held_out)
    report["training"] = train_lib.train(draft, train_stream, val_stream, args, log, distillation_loss(target))
    report["after"] = agreement(target, draft, held_out)
    log(f"held out: {report['after']}")

    model_dir = os.path.join(args.out, "model")
    os.makedirs(model_dir, exist_ok=True)
    draft.to(torch.bfloat16).save_pretrained(model_dir, safe_serialization=True)
    make_demo_model.strip_tied_head(os.path.join(model_dir, "model.safetensors"), log)
    config_path = os.path.join(model_dir, "config.json")
    with open(config_path, encoding="utf-8") as f:
        saved = json.load(f)
    saved["dtype"] = "float32"  # trained in f32 with bf16 autocast, as the target (make_demo_model.py)
    with open(config_path, "w", encoding="utf-8") as f:
        f.write(json.dumps(saved, indent=2, sort_keys=True) + "\n")
    for name in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(args.target, name), os.path.join(model_dir, name))
    log(f"saved {model_dir}: {sorted(os.listdir(model_dir))}")


if __name__ == "__main__":
    main()
