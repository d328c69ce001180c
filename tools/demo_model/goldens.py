"""Golden data of the demo model, made the way the fixtures in tests/fixtures were (tests/fixtures/README.md):
transformers in float64 with eager attention (exact sliding windows), no KV cache, from the bf16 weights as saved.

- cases[]: all-position logits of one prompt (float32 [T, vocab] in golden.safetensors), argmax per position,
  and hf_bf16_rel_err: ||transformers bf16 on this GPU (sdpa) - reference|| / ||reference||.
- generate[]: greedy continuations by full recomputation at each step, with each step's top-2 margin and the rms
  of that step's logits (the bf16 rule: a bf16 engine may leave the reference only at a step whose margin is
  below noise x rms), the decoded text, and how many leading tokens transformers in bf16 itself agrees on.
- tokenizer_cases.json: HF `tokenizers` ids and decodings; chat_cases.json: transformers' apply_chat_template.
"""
import json

import torch


def load_reference(model_dir, dtype, attn, device):
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation=attn)
    except TypeError:  # older spelling
        model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dtype, attn_implementation=attn)
    return model.to(device).eval()


@torch.no_grad()
def all_logits(model, ids):
    device = next(model.parameters()).device
    return model(input_ids=torch.tensor([ids], device=device), use_cache=False).logits[0]


@torch.no_grad()
def greedy(model, prompt_ids, num_tokens, with_margins):
    """Greedy ids by full recomputation; with_margins adds each step's top-2 margin and logit rms."""
    context = list(prompt_ids)
    ids, margins, rms = [], [], []
    for _ in range(num_tokens):
        logits = all_logits(model, context)[-1].double()
        next_id = int(torch.argmax(logits))  # the lowest index among equal maxima, as tide's argmax
        if with_margins:
            top2 = torch.topk(logits, 2).values
            margins.append(float(top2[0] - top2[1]))
            rms.append(float(logits.pow(2).mean().sqrt()))
        ids.append(next_id)
        context.append(next_id)
    return ids, margins, rms


def leading_agreement(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def model_goldens(model_dir, tok, logits_prompt_ids, generate_prompts, num_tokens, device, log):
    """golden.json's content and golden.safetensors' tensors. generate_prompts: (name, prompt text, ids)."""
    ref = load_reference(model_dir, torch.float64, "eager", device)
    bf16 = load_reference(model_dir, torch.bfloat16, "sdpa", device)

    golden = {"note": ("Reference: transformers Cohere2ForCausalLM in float64 (eager attention, no KV cache) from "
                       "the bf16 weights of models/tide-demo; logits tensors in golden.safetensors are float32 "
                       "[T, vocab]. hf_bf16_rel_err = ||transformers bf16 (GPU, sdpa) - reference|| / "
                       "||reference||. generate[].margins[i] / logit_rms[i]: the reference's top-2 logit gap and "
                       "logit rms at greedy step i; hf_bf16_greedy_agree: leading tokens transformers in bf16 "
                       "(GPU, sdpa, full recomputation) shares with greedy_ids."),
              "cases": [], "generate": []}
    tensors = {}

    ids = list(logits_prompt_ids)
    want = all_logits(ref, ids).double()
    got = all_logits(bf16, ids).double()
    rel = float((got - want).norm() / want.norm())
    tensors["case0_logits"] = want.float().cpu().contiguous()
    golden["cases"].append({"name": "heldout", "prompt_ids": ids, "logits_tensor": "case0_logits",
                            "argmax": [int(i) for i in want.argmax(-1).tolist()], "hf_bf16_rel_err": rel})
    log(f"logits case: {len(ids)} tokens, transformers bf16 rel err {rel:.4g}")

    for name, prompt, prompt_ids in generate_prompts:
        greedy_ids, margins, rms = greedy(ref, prompt_ids, num_tokens, with_margins=True)
        bf16_ids, _, _ = greedy(bf16, prompt_ids, num_tokens, with_margins=False)
        agree = leading_agreement(bf16_ids, greedy_ids)
        golden["generate"].append({
            "name": name, "prompt": prompt, "prompt_ids": list(prompt_ids), "greedy_ids": greedy_ids,
            "text": tok.decode(greedy_ids, skip_special_tokens=True),
            "margins": margins, "logit_rms": rms, "min_top2_margin": min(margins),
            "hf_bf16_greedy_agree": agree})
        log(f"greedy '{name}': {len(prompt_ids)} + {num_tokens} tokens, min margin {min(margins):.4g}, "
            f"transformers bf16 agrees on {agree}")
    del ref, bf16
    torch.cuda.empty_cache()
    return golden, tensors


def tokenizer_cases(tok, texts, model_dir, log):
    """HF tokenizers' ids and decodings of `texts`; also compares transformers' AutoTokenizer."""
    from transformers import AutoTokenizer

    cases, mismatches = [], []
    try:
        hf = AutoTokenizer.from_pretrained(model_dir)
    except Exception as e:  # noqa: BLE001 - recorded, the raw tokenizers ids are the golden
        hf = None
        mismatches.append("AutoTokenizer failed to load: " + repr(e))
    for text in texts:
        ids = tok.encode(text).ids
        case = {"text": text, "ids": ids, "ids_no_special": tok.encode(text, add_special_tokens=False).ids,
                "decoded": tok.decode(ids, skip_special_tokens=True),
                "decoded_with_special": tok.decode(ids, skip_special_tokens=False)}
        cases.append(case)
        if hf is not None and hf.encode(text) != ids:
            mismatches.append({"text": text, "transformers": hf.encode(text), "tokenizers": ids})
    log(f"tokenizer cases: {len(cases)}, transformers vs tokenizers mismatches: {len(mismatches)}")
    return {"cases": cases}, mismatches


CHAT_CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are a terse assistant."},
     {"role": "user", "content": "  Write a Python function that returns the n-th Fibonacci number.  "}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Sort a list of numbers in Montréal 🙂"}],
    [{"role": "user", "content": "Write a Python function is_palindrome: Return True if s reads the same "
                                 "backwards."}],
]


def transformers_renderer(model_dir):
    """render(messages, add_generation_prompt) through transformers' apply_chat_template."""
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(model_dir)

    def render(messages, add_generation_prompt):
        return hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)

    return render


def chat_cases(tok, model_dir, render):
    """Renderings of CHAT_CONVERSATIONS by `render` and their ids (no special tokens added), plus the error of
    a conversation whose roles do not alternate."""
    cases = []
    for messages in CHAT_CONVERSATIONS:
        for add_generation_prompt in (True, False):
            text = render(messages, add_generation_prompt)
            cases.append({"messages": messages, "add_generation_prompt": add_generation_prompt, "text": text,
                          "ids": tok.encode(text, add_special_tokens=False).ids})
    bad = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    try:
        render(bad, True)
    except Exception as e:  # noqa: BLE001 - jinja2's TemplateError; its message is the golden
        cases.append({"messages": bad, "add_generation_prompt": True, "expect_error": str(e)})
    else:
        raise AssertionError("the template accepted roles that do not alternate")
    return {"cases": cases}


def dump_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False, indent=1)
        f.write("\n")
