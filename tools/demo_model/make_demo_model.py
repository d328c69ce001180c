#!/usr/bin/env python3
"""Trains tide's bundled demo model (models/tide-demo) and makes its golden data (tests/fixtures/tide-demo).

Runs on a machine with one CUDA GPU, torch, transformers, tokenizers, safetensors and jinja2, and no network:
1. corpus: the Python standard library's source on that machine (corpus.py), recorded exactly;
2. tokenizer: a Cohere-style byte-level BPE trained on it (tokenizer_build.py);
3. model: a small Cohere2ForCausalLM with sliding-window and global layers, trained from scratch for a few
   minutes (train.py), saved in bf16 as a Hugging Face folder;
4. goldens: transformers in float64 (goldens.py), tokenizer and chat-template cases;
5. training_report.json: corpus, settings, steps, losses, times, versions, device.

Usage (from the repository root; the defaults made the shipped model):
    python3 tools/demo_model/make_demo_model.py --out DIR [--pack] [--steps N | --steps 0 --train-seconds S]
DIR receives model/ (the model folder), fixtures/ (the golden data), training_report.json and log.txt; with
--pack, model.safetensors and bundle.tar.gz (model/ and fixtures/ without it) replace the two folders (for a
machine that returns few files). A failure still leaves what was made so far.
Seeded: a rerun with the same settings (a time-budgeted run: --steps set to the report's steps_planned) repeats
the corpus split, tokenizer, data order and schedule; GPU kernels make the weights close, not bit-identical.
"""
import argparse
import copy
import json
import os
import random
import shutil
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus as corpus_lib  # noqa: E402
import goldens  # noqa: E402
import tokenizer_build  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--pack", action="store_true", help="also write model.safetensors + bundle.tar.gz in --out")
    p.add_argument("--seed", type=int, default=1234)
    # tokenizer and model
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--intermediate", type=int, default=768)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--window", type=int, default=64)
    p.add_argument("--global-every", type=int, default=4, help="layer i is global when (i + 1) %% N == 0")
    p.add_argument("--max-position-embeddings", type=int, default=1024)
    p.add_argument("--rope-theta", type=float, default=50000.0)
    p.add_argument("--logit-scale", type=float, default=0.25)
    # training
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--min-lr", type=float, default=2e-4)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    # 2500 steps are about 14 passes over the 3M training tokens: held-out loss stops improving near there (a
    # first run at a nearly constant rate was best after ~7 passes and overfit after).
    p.add_argument("--steps", type=int, default=2500, help="number of steps (0: as many as fit --train-seconds)")
    p.add_argument("--train-seconds", type=float, default=240, help="time budget when --steps is 0")
    p.add_argument("--hard-seconds", type=float, default=330, help="training stops here whatever the plan")
    p.add_argument("--max-steps", type=int, default=100000)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--val-batches", type=int, default=8)
    # goldens
    p.add_argument("--golden-tokens", type=int, default=256)
    p.add_argument("--logits-prompt-tokens", type=int, default=150)
    return p.parse_args()


def main():
    args = parse_args()
    os.makedirs(os.path.join(args.out, "model"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "fixtures"), exist_ok=True)
    run_reported(args, run, lambda: pack(args.out) if args.pack else None)


def run_reported(args, run_fn, finish):
    """Runs run_fn(args, log, report) with a timed log; whatever was made comes back, also after a failure:
    training_report.json and log.txt in args.out, then finish()."""
    t0 = time.time()
    log_lines = []
    report = {"args": vars(args)}

    def log(message):
        line = f"[{time.time() - t0:7.1f}s] {message}"
        print(line, flush=True)
        log_lines.append(line)

    try:
        run_fn(args, log, report)
    except BaseException as e:
        log(f"FAILED: {e!r}")
        report["failed"] = repr(e)
        raise
    finally:
        report["total_seconds"] = round(time.time() - t0, 1)
        goldens.dump_json(os.path.join(args.out, "training_report.json"), report)
        with open(os.path.join(args.out, "log.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(log_lines) + "\n")
        finish()


def run(args, log, report):
    model_dir = os.path.join(args.out, "model")
    fixture_dir = os.path.join(args.out, "fixtures")
    import tokenizers
    import torch
    import transformers

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = "cuda"
    report["versions"] = {"python": sys.version.split()[0], "torch": torch.__version__,
                          "transformers": transformers.__version__, "tokenizers": tokenizers.__version__}
    report["device"] = torch.cuda.get_device_name(0)
    log(f"device {report['device']}, versions {report['versions']}")

    # --- corpus ---
    corpus, train_docs, chat_docs, val_docs = corpus_documents(log)
    report["corpus"] = corpus.record()

    # --- tokenizer ---
    tok = tokenizer_build.train(train_docs, args.vocab)
    tokenizer_json = tok.to_str()
    report["tokenizer_problems"] = tokenizer_build.check_supported(tokenizer_json)
    log(f"tokenizer: {tok.get_vocab_size()} tokens, unsupported by tide: {report['tokenizer_problems'] or 'nothing'}")
    if tok.get_vocab_size() != args.vocab:
        log(f"WARNING: the tokenizer has {tok.get_vocab_size()} tokens, the model {args.vocab} rows")

    train_stream, val_stream, report["tokens"] = token_streams(tok, train_docs, chat_docs, val_docs, args.seed)
    log(f"tokens: {report['tokens']}")

    # --- model and training ---
    import train as train_lib

    config = train_lib.make_config(args.vocab, args)
    model = train_lib.make_model(config, device)
    num_params = sum(p.numel() for p in model.parameters())
    report["num_params"] = num_params
    log(f"model: {num_params} parameters, layer types {config.layer_types}")

    # Everything after training runs first on the untrained model, so a broken step fails in seconds, not after
    # the training minutes.
    preflight = tempfile.mkdtemp(prefix="demo-preflight-")
    write_model_folder(copy.deepcopy(model), os.path.join(preflight, "model"), tokenizer_json, args, log)
    make_goldens(args, tok, os.path.join(preflight, "model"), os.path.join(preflight, "fixtures"), val_docs,
                 log, {}, golden_tokens=2)
    shutil.rmtree(preflight)
    log("preflight of saving and goldens passed")

    report["training"] = train_lib.train(model, train_stream, val_stream, args, log)
    write_model_folder(model, model_dir, tokenizer_json, args, log)
    del model
    torch.cuda.empty_cache()

    # --- goldens ---
    make_goldens(args, tok, model_dir, fixture_dir, val_docs, log, report, args.golden_tokens)
    log("done")



def token_streams(tok, train_docs, chat_docs, val_docs, seed):
    """The training and held-out token streams: documents between BOS and EOS, chat examples as rendered (they
    start with BOS and end a turn), training sequences in a seeded order; and what the report keeps of them."""
    def encode_docs(docs, with_bos_eos):
        out = []
        for enc in tok.encode_batch(docs, add_special_tokens=False):
            out.append(([tokenizer_build.BOS_ID] if with_bos_eos else []) + enc.ids +
                       ([tokenizer_build.EOS_ID] if with_bos_eos else []))
        return out

    train_seqs = encode_docs(train_docs, True) + encode_docs(chat_docs, False)
    random.Random(seed).shuffle(train_seqs)
    val_seqs = encode_docs(val_docs, True)
    train_stream = [i for s in train_seqs for i in s]
    val_stream = [i for s in val_seqs for i in s]
    record = {"train": len(train_stream), "val": len(val_stream), "chat_examples": len(chat_docs),
              "train_bytes_per_token":
              round(sum(len(d.encode()) for d in train_docs + chat_docs) / len(train_stream), 3)}
    return train_stream, val_stream, record


def corpus_documents(log):
    """The corpus with its training documents, chat examples (rendered) and held-out documents."""
    corpus = corpus_lib.load()
    train_files = [f for f in corpus.files if not f.is_val]
    val_files = [f for f in corpus.files if f.is_val]
    train_docs = corpus_lib.documents(train_files)
    val_docs = corpus_lib.documents(val_files)
    pairs = corpus_lib.chat_pairs(train_files)
    chat_docs = [tokenizer_build.render_chat([{"role": "user", "content": u}, {"role": "assistant", "content": a}],
                                             add_generation_prompt=False) for u, a in pairs]
    log(f"corpus: {len(corpus.files)} files, {corpus.total_bytes()} bytes, sha256 {corpus.sha256[:16]}; "
        f"{len(train_docs)} train / {len(val_docs)} val documents, {len(chat_docs)} chat examples")
    return corpus, train_docs, chat_docs, val_docs

def write_model_folder(model, model_dir, tokenizer_json, args, log):
    """The Hugging Face folder: bf16 weights, config, tokenizer files, generation config."""
    import torch
    import transformers

    os.makedirs(model_dir, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(model_dir, safe_serialization=True)
    strip_tied_head(os.path.join(model_dir, "model.safetensors"), log)
    # The weights are stored in bf16 to halve the file, but the model was trained in float32 (bf16 autocast)
    # with float32 RoPE frequencies, and that is the dtype to run it in. For a "bfloat16" config tide rounds
    # inv_freq to bf16 (ModelConfig::rope_inv_freq, after what transformers does to a bf16-loaded model), which
    # moves this model's logits by up to 1.4e-2 (relative L2) from the float64 reference.
    config_path = os.path.join(model_dir, "config.json")
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    config["dtype"] = "float32"
    with open(config_path, "w", encoding="utf-8") as f:
        f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")
    with open(os.path.join(model_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tokenizer_json)
    goldens.dump_json(os.path.join(model_dir, "tokenizer_config.json"),
                      tokenizer_build.tokenizer_config(args.max_position_embeddings))
    goldens.dump_json(os.path.join(model_dir, "generation_config.json"), {
        "bos_token_id": tokenizer_build.BOS_ID,
        "eos_token_id": [tokenizer_build.EOS_ID, tokenizer_build.END_OF_TURN_ID],
        "pad_token_id": tokenizer_build.PAD_ID, "transformers_version": transformers.__version__})
    log(f"saved {model_dir}: {sorted(os.listdir(model_dir))}")


def make_goldens(args, tok, model_dir, fixture_dir, val_docs, log, report, golden_tokens):
    from safetensors.torch import save_file

    # The two longest held-out documents (text the model never trained on): the logits prompt and a greedy one.
    encoded = sorted(((len(ids), i, ids) for i, ids in
                      enumerate(e.ids for e in tok.encode_batch(val_docs, add_special_tokens=False))), reverse=True)
    logits_ids = [tokenizer_build.BOS_ID] + encoded[0][2][:args.logits_prompt_tokens - 1]
    heldout_ids = [tokenizer_build.BOS_ID] + encoded[1][2][:40]
    chat_prompt = tokenizer_build.render_chat(
        [{"role": "user", "content": "Write a Python function fibonacci: Return the n-th Fibonacci number."}],
        add_generation_prompt=True)
    text_prompts = [("fibonacci", "def fibonacci(n):"),
                    ("class", 'class Stack:\n    """A last-in, first-out stack."""\n\n    def __init__(self):\n')]
    prompts = [(name, text, tok.encode(text).ids) for name, text in text_prompts]
    prompts.append(("heldout", tok.decode(heldout_ids, skip_special_tokens=True), heldout_ids))
    prompts.append(("chat", chat_prompt, tok.encode(chat_prompt, add_special_tokens=False).ids))

    os.makedirs(fixture_dir, exist_ok=True)
    golden, tensors = goldens.model_goldens(model_dir, tok, logits_ids, prompts, golden_tokens, "cuda", log)
    goldens.dump_json(os.path.join(fixture_dir, "golden.json"), golden)
    save_file(tensors, os.path.join(fixture_dir, "golden.safetensors"))

    texts = tokenizer_texts()
    tok_cases, mismatches = goldens.tokenizer_cases(tok, texts, model_dir, log)
    goldens.dump_json(os.path.join(fixture_dir, "tokenizer_cases.json"), tok_cases)
    report["transformers_tokenizer_mismatches"] = mismatches
    try:
        chat = goldens.chat_cases(tok, model_dir, goldens.transformers_renderer(model_dir))
        report["chat_cases_renderer"] = "transformers apply_chat_template"
    except Exception as e:  # noqa: BLE001 - fall back to jinja2 configured as transformers configures it
        log(f"chat cases through transformers FAILED ({e!r}); rendering with jinja2")
        chat = goldens.chat_cases(tok, model_dir, tokenizer_build.render_chat)
        report["chat_cases_renderer"] = "jinja2 (transformers failed: " + repr(e) + ")"
    log(f"chat cases: {len(chat['cases'])} ({report['chat_cases_renderer']})")
    goldens.dump_json(os.path.join(fixture_dir, "chat_cases.json"), chat)
    report["goldens"] = {g["name"]: {"min_top2_margin": g["min_top2_margin"],
                                     "hf_bf16_greedy_agree": g["hf_bf16_greedy_agree"], "text": g["text"]}
                         for g in golden["generate"]}
    report["goldens"]["hf_bf16_rel_err"] = golden["cases"][0]["hf_bf16_rel_err"]


# Code-specific strings on top of the reference fixture's (tests/fixtures/tokenizer_cases.json).
CODE_TEXTS = [
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n"
    "    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
    "class Stack:\n\tdef push(self, item):\n\t\tself._items.append(item)  # tabs\n",
    "x = 1234567890 + 3.14e-10 - 0x1F * 1_000_000 // 42 ** 2",
    "if __name__ == '__main__':\r\n    main()\r\n",
    "café = 'naïve façade'; 变量 = \"中文\"; émoji = '🐍🚀'",
    "e\u0301\u0301 combining accents and Å vs A\u030a",
    "    \n\n\n        \t  trailing and leading whitespace runs   \n",
    "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>def f(): pass<|END_OF_TURN_TOKEN|><EOS_TOKEN>",
    "<BOS_TOKEN><BOS_TOKEN>text between<PAD>special tokens<|END_RESPONSE|>",
    "raise ValueError(f\"bad value {value!r} at line {lineno:>4d}\")",
    "@functools.lru_cache(maxsize=None)\nasync def fetch(url: str) -> bytes: ...",
    "''' \"\"\" \\\\ \\n \\t '''",
]


def tokenizer_texts():
    texts = []
    path = os.path.join("tests", "fixtures", "tokenizer_cases.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            texts = [c["text"] for c in json.load(f)["cases"]]
    return texts + CODE_TEXTS


def strip_tied_head(path, log):
    """tide reads tied embeddings from model.embed_tokens.weight; drop an lm_head copy if one was written."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(path, "pt") as f:
        names = list(f.keys())
        metadata = f.metadata()
        if "lm_head.weight" not in names:
            log(f"checkpoint tensors: {len(names)}, no lm_head (tied)")
            return
        tensors = {n: f.get_tensor(n) for n in names if n != "lm_head.weight"}
    save_file(tensors, path, metadata=metadata)
    log("removed lm_head.weight (tied to the embedding)")


def pack(out):
    """model.safetensors on its own and every other file in bundle.tar.gz (the device returns few files)."""
    weights = os.path.join(out, "model", "model.safetensors")
    if os.path.exists(weights):
        shutil.move(weights, os.path.join(out, "model.safetensors"))
    with tarfile.open(os.path.join(out, "bundle.tar.gz"), "w:gz") as tar:
        for sub in ("model", "fixtures"):
            for name in sorted(os.listdir(os.path.join(out, sub))):
                tar.add(os.path.join(out, sub, name), arcname=f"{sub}/{name}")
    shutil.rmtree(os.path.join(out, "model"))
    shutil.rmtree(os.path.join(out, "fixtures"))


if __name__ == "__main__":
    main()
