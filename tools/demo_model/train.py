"""Training of the demo Cohere2ForCausalLM: transformers' own model class, from scratch, on one GPU.

bf16 autocast over f32 weights, AdamW, linear warm-up then cosine decay. The number of steps is fixed before the
schedule needs it: either given (--steps, to repeat a run), or the most that fit the time budget at the speed
measured over the first steps (the report records the number, so a rerun with --steps repeats the schedule).
Batches are windows of the token stream at offsets drawn from a seeded generator. The weights with the best
held-out loss are kept. GPU kernels are not bit-deterministic, so a rerun gives close, not identical, weights.
"""
import copy
import math
import time

import torch
import torch.nn.functional as F


def make_config(vocab_size, args):
    from transformers import Cohere2Config

    pattern = args.global_every
    layer_types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                   for i in range(args.layers)]
    return Cohere2Config(
        vocab_size=vocab_size, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        max_position_embeddings=args.max_position_embeddings, sliding_window=args.window, layer_types=layer_types,
        rope_parameters={"rope_type": "default", "rope_theta": args.rope_theta}, logit_scale=args.logit_scale,
        layer_norm_eps=1e-5, initializer_range=0.02, hidden_act="silu", attention_bias=False,
        bos_token_id=5, eos_token_id=6, pad_token_id=0, tie_word_embeddings=True, use_cache=True)


def make_model(config, device):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    return model.to(device=device, dtype=torch.float32)


class Batches:
    """Windows of seq_len + 1 tokens of one token stream (on the device), at seeded random offsets."""

    def __init__(self, stream, seq_len, batch_size, seed, device):
        self.stream = torch.tensor(stream, dtype=torch.long, device=device)
        self.seq_len, self.batch_size = seq_len, batch_size
        self.gen = torch.Generator().manual_seed(seed)
        self.span = torch.arange(seq_len + 1, device=device)

    def next(self):
        high = self.stream.numel() - self.seq_len - 1
        offsets = torch.randint(0, high, (self.batch_size,), generator=self.gen).to(self.span.device)
        w = self.stream[offsets[:, None] + self.span[None, :]]
        return w[:, :-1], w[:, 1:]


def lr_at(step, total, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = min(1.0, (step - args.warmup) / max(1, total - args.warmup))
    return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1 + math.cos(math.pi * progress))


def loss_of(model, x, y):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(input_ids=x, use_cache=False).logits
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))


@torch.no_grad()
def evaluate(model, val_batches, loss_fn=loss_of):
    model.eval()
    losses = [loss_fn(model, x, y).item() for x, y in val_batches]
    model.train()
    return sum(losses) / len(losses)


def train(model, train_stream, val_stream, args, log, loss_fn=loss_of):
    """Trains on loss_fn(model, inputs, next ids) (cross-entropy by default; a draft passes its distillation loss),
    keeping the weights of the best held-out value of the same loss."""
    device = next(model.parameters()).device
    torch.manual_seed(args.seed)
    batches = Batches(train_stream, args.seq_len, args.batch_size, args.seed, device)
    val_source = Batches(val_stream, args.seq_len, args.batch_size, args.seed + 1, device)
    val_batches = [val_source.next() for _ in range(args.val_batches)]

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    model.train()

    total = args.steps  # 0: decided from the measured speed once the first steps ran
    calib_from, calib_to = 5, 30
    history, recent = [], []
    best = {"val_loss": float("inf"), "step": -1, "state": None}
    start = time.time()
    t_calib = None
    step = 0
    while total == 0 or step < total:
        if step == calib_from:
            torch.cuda.synchronize()
            t_calib = time.time()
        if step == calib_to and total == 0:
            torch.cuda.synchronize()
            per_step = (time.time() - t_calib) / (calib_to - calib_from)
            total = max(calib_to + 1, int((args.train_seconds - (time.time() - start)) / per_step) + calib_to)
            total = min(total, args.max_steps)
            log(f"measured {per_step * 1000:.1f} ms/step: {total} steps in the budget")
        lr = lr_at(step, max(total, args.warmup + 1), args)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = batches.next()
        loss = loss_fn(model, x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        recent.append(loss.detach())
        step += 1
        last = total != 0 and step == total
        if step % args.eval_every == 0 or last:
            train_loss = torch.stack(recent).mean().item()
            recent = []
            val_loss = evaluate(model, val_batches, loss_fn)
            elapsed = time.time() - start
            history.append({"step": step, "train_loss": round(train_loss, 4), "val_loss": round(val_loss, 4),
                            "lr": lr, "seconds": round(elapsed, 1)})
            log(f"step {step}/{total}: train {train_loss:.4f} val {val_loss:.4f} lr {lr:.2e} {elapsed:.0f}s")
            if val_loss < best["val_loss"]:
                best = {"val_loss": val_loss, "step": step, "state": copy.deepcopy(model.state_dict())}
        if time.time() - start > args.hard_seconds:
            log(f"stopped at step {step} by the hard time limit ({args.hard_seconds}s)")
            break
    torch.cuda.synchronize()
    seconds = time.time() - start
    if best["state"] is None:  # stopped before the first evaluation
        best = {"val_loss": evaluate(model, val_batches, loss_fn), "step": step, "state": model.state_dict()}
    model.load_state_dict(best["state"])
    return {
        "steps_planned": total, "steps_run": step, "seconds": round(seconds, 1),
        "tokens_seen": step * args.batch_size * args.seq_len,
        "best_step": best["step"], "best_val_loss": round(best["val_loss"], 4),
        "final_train_loss": history[-1]["train_loss"] if history else None,
        "final_val_loss": history[-1]["val_loss"] if history else None,
        "history": history,
    }
