#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora, tests/fixtures/fuzz/<target>/, from the repository's fixtures and a few
hand-made valid and near-valid inputs. Rerun after changing it; files named regress-* (inputs that once found a
bug) are written by hand and kept."""
import hashlib
import json
import pathlib
import struct

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
OUT = FIX / "fuzz"


def write(target, name, data):
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    (d / name).write_bytes(data)


def compact(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def clear(target):
    d = OUT / target
    if d.exists():
        for f in d.iterdir():
            if not f.name.startswith("regress-"):
                f.unlink()


# --- safetensors: whole files ---
def safetensors(tensors, metadata=None, pad=True, raw_header=None, extra=b""):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, shape, payload) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    text = raw_header if raw_header is not None else compact(header).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data + extra


def seeds_safetensors():
    t = "safetensors"
    clear(t)
    write(t, "empty_header", safetensors({}))
    write(t, "f32_2x2", safetensors({"w": ("F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4))}))
    write(t, "mixed_dtypes_metadata", safetensors({
        "a.bf16": ("BF16", [3], b"\x80\x3f\x00\x40\x40\x40"),
        "b.f16": ("F16", [1, 2], b"\x00\x3c\x00\xc0"),
        "c.fp8": ("F8_E4M3", [4], b"\x38\x40\xb8\x7e"),
        "d.i32": ("I32", [], struct.pack("<i", -7)),
        "e.i64": ("I64", [2], struct.pack("<2q", 1, -1)),
        "f.empty": ("F32", [0, 5], b""),
    }, metadata={"format": "pt", "note": "seed"}))
    write(t, "unpadded_trailing_bytes", safetensors({"x": ("F32", [1], b"\0\0\x80\x3f")}, pad=False, extra=b"tail"))
    # Near-valid: each breaks one rule of the reader.
    write(t, "overlap", safetensors({}, raw_header=compact({
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}).encode(), extra=b"\0" * 12))
    write(t, "size_mismatch", safetensors({}, raw_header=compact({
        "a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}).encode(), extra=b"\0" * 8))
    write(t, "huge_shape", safetensors({}, raw_header=compact({
        "a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}}).encode()))
    write(t, "bad_dtype", safetensors({"a": ("BOOL", [1], b"\1")}))
    write(t, "header_past_end", struct.pack("<Q", 1 << 20) + b"{}")
    write(t, "short", b"\x02\0\0\0")
    # The first entries of a real checkpoint's header (cohere2-tiny), their data replaced by zeros.
    real = (FIX / "cohere2-tiny" / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", real[:8])[0]
    header = json.loads(real[8:8 + n])
    small = {}
    for name, entry in sorted(header.items()):
        if name != "__metadata__" and entry["data_offsets"][1] - entry["data_offsets"][0] <= 2048:
            small[name] = entry
        if len(small) == 4:
            break
    tensors = {}
    for name, entry in small.items():
        size = entry["data_offsets"][1] - entry["data_offsets"][0]
        tensors[name] = (entry["dtype"], entry["shape"], b"\0" * size)
    write(t, "real_names", safetensors(tensors, metadata=header.get("__metadata__")))


# --- config.json ---
def seeds_config():
    t = "config"
    clear(t)
    for folder in ["cohere2-tiny", "cohere2-tiny-hd128"]:
        write(t, folder, compact(json.loads((FIX / folder / "config.json").read_text())))
    write(t, "tide-demo", compact(json.loads((ROOT / "models" / "tide-demo" / "config.json").read_text())))
    for model in ["command-r7b-12-2024", "command-a-03-2025"]:
        write(t, model, compact(json.loads((ROOT / "bench" / "models" / model / "config.json").read_text())))
    base = json.loads((FIX / "cohere2-tiny" / "config.json").read_text())
    fp8 = dict(base)
    q = {"num_bits": 8, "type": "float", "symmetric": True}
    fp8["quantization_config"] = {"quant_method": "compressed-tensors", "format": "float-quantized",
                                  "config_groups": {"group_0": {"targets": ["Linear"],
                                                                "weights": dict(q, strategy="channel", dynamic=False),
                                                                "input_activations": dict(q, strategy="token", dynamic=True)}},
                                  "ignore": ["lm_head"], "kv_cache_scheme": None}
    write(t, "fp8", compact(fp8))
    odd = dict(base, num_hidden_layers=3, sliding_window_pattern=2, eos_token_id=[6, 7], head_dim=999)
    write(t, "odd_layers", compact(odd))
    write(t, "zero_heads", compact(dict(base, num_attention_heads=0)))


# --- tokenizer.json (+ NUL + tokenizer_config.json + NUL + text) ---
def small_tokenizer(full, keep_merges):
    """The fixture's tokenizer cut down to the byte alphabet, its added tokens and the first merges."""
    vocab = full["model"]["vocab"]
    merges = full["model"]["merges"][:keep_merges]
    keep = {tok for tok, i in vocab.items() if len(tok) == 1}
    for a, b in merges:
        keep |= {a, b, a + b}
    small = dict(full)
    model = dict(full["model"])
    model["vocab"] = {tok: i for tok, i in vocab.items() if tok in keep}
    model["merges"] = merges
    small["model"] = model
    return small


def seeds_tokenizer():
    t = "tokenizer"
    clear(t)
    full = json.loads((FIX / "cohere2-tiny" / "tokenizer.json").read_text())
    config = compact(json.loads((FIX / "cohere2-tiny" / "tokenizer_config.json").read_text()))
    small = small_tokenizer(full, 40)
    text = "Hello world 2024 <BOS_TOKEN> héllo\n  x"
    write(t, "small_with_config", compact(small) + "\0" + config + "\0" + text)
    write(t, "small_alone", compact(small))
    write(t, "full", compact(full) + "\0\0" + "The quick brown fox 12345")
    variant = json.loads(compact(small))
    variant["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKD"}, {"type": "NFC"}]}
    variant["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": False}
    variant["post_processor"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False}
    variant["decoder"] = None
    variant["added_tokens"] = variant["added_tokens"][:3] + [
        {"id": 2000, "content": "<x>", "single_word": True, "lstrip": True, "rstrip": True, "normalized": True,
         "special": False}]
    write(t, "variant", compact(variant) + "\0\0" + "a <x> b <PAD>")
    merges_as_strings = json.loads(compact(small))
    merges_as_strings["model"]["merges"] = [" ".join(m) for m in small["model"]["merges"]]
    write(t, "merges_as_strings", compact(merges_as_strings))


# --- text for the fixture tokenizer (+ NUL + id bytes + NUL + stop strings joined by 0x1F) ---
def seeds_tokenizer_text():
    t = "tokenizer_text"
    clear(t)
    texts = []
    for path in [FIX / "tokenizer_cases.json", FIX / "tide-demo" / "tokenizer_cases.json"]:
        cases = json.loads(path.read_text())
        cases = cases["cases"] if isinstance(cases, dict) else cases
        texts += [c["text"] for c in cases]
    for i, text in enumerate(texts[:60]):
        ids = struct.pack("<8H", *[(i * 37 + k * 101) % 1030 for k in range(8)])
        stops = "\x1f".join([text[1:4], "\n", "é"]) if i % 2 else ""
        write(t, f"case{i:02d}", text + ("\0" + ids.decode("latin-1") + "\0" + stops if i % 3 else ""))
    write(t, "invalid_utf8", b"abc\xff\xc3(\xe2\x82\0" + bytes(range(0, 40)))
    write(t, "split_character", b"\0" + struct.pack("<4H", 195, 169, 240, 159) + b"\0\xc3\xa9")


# --- Jinja templates ---
def seeds_chat_template():
    t = "chat_template"
    clear(t)
    cases = json.loads((FIX / "jinja_cases.json").read_text())["cases"]
    seen = set()
    for case in cases:
        key = hashlib.sha1(case["template"].encode()).hexdigest()[:10]
        if key not in seen:
            seen.add(key)
            write(t, f"jinja_{case['name'][:40]}", case["template"])
    config = json.loads((FIX / "cohere2-tiny" / "tokenizer_config.json").read_text())
    write(t, "cohere_chat_template", config["chat_template"])


# --- chat messages (JSON) through the fixture's template ---
def seeds_chat_messages():
    t = "chat_messages"
    clear(t)
    n = 0
    for folder in ["cohere2-tiny", "tide-demo"]:
        cases = json.loads((FIX / folder / "chat_cases.json").read_text())
        cases = cases["cases"] if isinstance(cases, dict) else cases
        for case in cases:
            write(t, f"{folder}_{n:02d}", compact({"messages": case["messages"],
                                                   "add_generation_prompt": case.get("add_generation_prompt", True)}))
            n += 1
    write(t, "array_only", compact([{"role": "user", "content": "hi"}]))
    write(t, "odd_types", compact({"messages": [{"role": 7, "content": None}, {"role": "assistant", "content": [1, {}]}],
                                   "tools": [{"type": "function"}], "documents": "x",
                                   "chat_template_kwargs": {"bos_token": {"a": 1}}}))
    write(t, "system_only", compact({"messages": [{"role": "system", "content": "s"}], "add_generation_prompt": False}))


# --- Cohere generations (byte 0: format and options, byte 1 and on: the split, then the text) ---
LEGACY, TOOLS, REASONING, CITATIONS, IN_THINKING = 1, 2, 4, 8, 16
HELD_64, HELD_5 = 4 << 5, 7 << 5  # max_held_bytes 64 and 5 (fuzz/cohere_output.cpp's kMaxHeld)
ALL = TOOLS | REASONING | CITATIONS


def cohere_input(mode, text, pieces=(), by_character=False):
    assert len(pieces) < 32 and all(0 <= n < 256 for n in pieces)
    data = text if isinstance(text, bytes) else text.encode()
    return bytes([mode, len(pieces) | (0x20 if by_character else 0)] + list(pieces)) + data


def seeds_cohere_output():
    t = "cohere_output"
    clear(t)
    action = compact([{"tool_call_id": "0", "tool_name": "search",
                       "parameters": {"query": "tide \u00e9t\u00e9", "n": 2 ** 70, "neg": -(2 ** 65), "f": 1.5}},
                      {"tool_call_id": 1, "tool_name": "lookup"}])
    cases = {
        "think_then_action": (ALL, "<|START_THINKING|>I will search.<|END_THINKING|><|START_ACTION|>" + action +
                              "<|END_ACTION|>", (5, 17, 3), False),
        "response_citations": (ALL, "<|START_RESPONSE|>The sky is <co: 0:[0]>blue</co: 0:[0]> and <co>grass is "
                               "green \U0001F600</co: 1:[0,1],2:[3]>.<|END_RESPONSE|><|END_OF_TURN_TOKEN|>",
                               (2, 30, 1), True),
        "reasoning_citations": (ALL | IN_THINKING, "I read <co: 0:[1]>the doc \u00e9</co: 0:[1]> well."
                                "<|END_THINKING|><|START_RESPONSE|>Answer <co: 0 : [ 2 , 3 ] , 1:[0]>x</co>"
                                "<|END_RESPONSE|>", (), True),
        "citations_off": (TOOLS | REASONING, "<|START_RESPONSE|>a <co: 0:[0]>b</co: 0:[0]> c<|END_RESPONSE|>",
                          (4, 4), False),
        "unclosed_citation": (ALL, "text <co: 0:[0]>never closed <co>twice</co: 1:[2]> end </co: 9:[]>", (9,), False),
        "bad_tags": (ALL, "<co: >x</co: 0:[a]> <co:0:[1]y</co: 0:[1]> <cox> </co: 0:[1234567890123456]> <", (), True),
        "tools_off": (REASONING | CITATIONS, "<|START_ACTION|>" + action + "<|END_ACTION|>after", (16,), False),
        "malformed_actions": (ALL, "<|START_ACTION|>[{\"tool_name\": \"\"}]<|END_ACTION|>mid<|START_ACTION|>[]"
                              "<|END_ACTION|><|START_ACTION|>[{\"tool_name\": \"x\", \"parameters\": [1]}]"
                              "<|END_ACTION|>", (20, 20), False),
        "marker_in_action_string": (ALL, "<|START_ACTION|>[{\"tool_name\": \"s\", \"parameters\": {\"t\": "
                                    "\"<|END_ACTION|> \\\" ```\"}}]<|END_ACTION|>", (), True),
        "truncated_action": (ALL, "<|START_RESPONSE|>ok<|END_RESPONSE|><|START_ACTION|>[{\"tool_name\": \"a\", "
                             "\"parameters\": {\"x\": 1}}", (7,), False),
        "unclosed_action": (ALL, "<|START_ACTION|>[{\"tool_call_id\": \"7\", \"tool_name\": \"a\", "
                            "\"parameters\": {\"big\": 1e300, \"s\": \"\\ud83d\\ude00\"}}]  ", (), True),
        "float_overflow": (ALL, "<|START_ACTION|>[{\"tool_name\": \"a\", \"parameters\": {\"x\": 1e400}}]"
                           "<|END_ACTION|>", (), False),
        "duplicate_parameters": (ALL, "<|START_ACTION|>[{\"tool_name\": \"a\", \"parameters\": {\"x\": 1}, "
                                 "\"param\\u0065ters\": {\"y\": [2, {}]}}]<|END_ACTION|>", (), False),
        "legacy_plan_action": (LEGACY | ALL, "Plan: I will search for it.\nAction: ```json\n" + action +
                               "\n```\nGrounded answer: <co: 0:[0]>x</co: 0:[0]>", (3, 1, 8), False),
        "legacy_action_only": (LEGACY | TOOLS, "  \nAction:\n  ```json\n[{\"tool_name\": \"a\"}]\n```", (), True),
        "legacy_invalid_action": (LEGACY | ALL, "Plan: hmm\nAction: ```json\n[not json]\n```\nAction: ```json\n"
                                  "[{\"tool_name\": \"b\", \"parameters\": null}]\n```\nthe end", (12,), False),
        "legacy_thinking": (LEGACY | ALL | IN_THINKING, "Plan: inside thinking\nAction: ```json\n[]\n```"
                            "<|END_THINKING|>Action: ```json\n[{\"tool_name\": \"c\"}]\n```", (), False),
        "held_64": (ALL | HELD_64, "<|START_ACTION|>[{\"tool_name\": \"long\", \"parameters\": {\"text\": \"" +
                    "\u00e9" * 40 + "\"}}]<|END_ACTION|><co: 0:[0]>" + "\u20ac" * 40 + "</co: 0:[0]>",
                    (10, 10, 10), False),
        "held_64_legacy": (LEGACY | ALL | HELD_64, "Plan: " + "plan " * 20 + "\nAction: ```json\n[{\"tool_name\": "
                           "\"x\"}]\n```", (), True),
        "held_5": (ALL | HELD_5, "<co: 0:[0]>abcdef</co: 0:[0]><|START_ACTION|>[{\"tool_name\": \"x\"}]"
                   "<|END_ACTION|>", (1, 2, 3), False),
        "stray_markers": (ALL, "<|END_ACTION|>a<|END_THINKING|>b<|END_RESPONSE|>c<|FOO|>d<EOS_TOKEN><|START_", (),
                          True),
        "reasoning_off": (TOOLS | CITATIONS, "<|START_THINKING|>secret <co: 0:[0]>x</co: 0:[0]><|END_THINKING|>"
                          "shown", (6,), False),
        "invalid_utf8": (ALL, b"a\xff<|START_RESPONSE|>\xc3(<co: 0:[0]>\xe2\x82</co: 0:[0]>", (), True),
    }
    for name, (mode, text, pieces, by_character) in cases.items():
        write(t, name, cohere_input(mode, text, pieces, by_character))


# --- request bodies ---
def seeds_request():
    t = "request"
    clear(t)
    bodies = {
        "completion_text": {"model": "tide-demo", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0.7,
                            "top_p": 0.9, "top_k": 40, "seed": 3, "stop": ["\n", "The"], "logprobs": 2, "n": 2},
        "completion_ids": {"prompt": [5, 100, 200, 300], "max_tokens": 4, "echo": True, "stream": True,
                           "stream_options": {"include_usage": True}},
        "completion_batch": {"prompt": [[5, 6], [7, 8, 9]], "ignore_eos": True, "min_tokens": 2, "min_p": 0.1},
        "completion_strings": {"prompt": ["a", "b <BOS_TOKEN> c"], "logit_bias": {"17": -100, "18": 5.5},
                               "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.2},
        "chat_basic": {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                       "max_completion_tokens": 16, "logprobs": True, "top_logprobs": 3, "stop": "END"},
        "chat_parts": {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                 {"type": "text", "text": "b"}]}],
                       "chat_template_kwargs": {"x": 1}, "add_generation_prompt": False},
        "chat_tools": {"messages": [{"role": "user", "content": "add"},
                                    {"role": "assistant", "content": None, "tool_calls": [
                                        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}]},
                                    {"role": "tool", "tool_call_id": "c1", "content": "3"}],
                       "tools": [{"type": "function", "function": {"name": "add", "parameters": {}}}],
                       "documents": [{"text": "d"}], "stop_token_ids": [6], "skip_special_tokens": False,
                       "include_stop_str_in_output": True, "return_tokens_as_token_ids": True},
        "tokenize_prompt": {"prompt": "hello <BOS_TOKEN>", "add_special_tokens": False},
        "tokenize_messages": {"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": True},
        "detokenize": {"tokens": [5, 100, 1023, 0]},
        "bad_types": {"prompt": {"a": 1}, "max_tokens": -1, "temperature": "hot", "n": 0},
        "bad_numbers": {"prompt": "x", "max_tokens": 1e300, "top_p": 1.5, "seed": -1, "logit_bias": {"x": 1}},
    }
    big = 2 ** 90  # beyond 64 bits: the parsers keep its digits (json_exact), the templates print them
    tool = {"type": "function", "function": {"name": "search", "description": "Searches.", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}, "n": {"type": "integer", "maximum": big}},
        "required": ["query"]}}}
    call = {"id": "call_1", "type": "function",
            "function": {"name": "search", "arguments": compact({"query": "tide", "n": big, "m": -(2 ** 70)})}}
    bodies.update({
        # OpenAI chat with tools and the server's chat extensions.
        "chat_tool_calls": {"messages": [{"role": "user", "content": "find"},
                                         {"role": "assistant", "content": None, "tool_calls": [call]},
                                         {"role": "tool", "tool_call_id": "call_1",
                                          "content": [{"type": "text", "text": "{\"title\": \"r\"}"}]}],
                            "tools": [tool], "tool_choice": "auto", "chat_template": "rag",
                            "thinking_budget": 64, "include_reasoning": False,
                            "chat_template_kwargs": {"enable_citations": True, "reasoning": True}},
        "chat_grounded": {"messages": [{"role": "user", "content": "Q"}], "tools": [tool],
                          "documents": [{"id": "d", "text": "fact"}], "thinking_budget": 0,
                          "chat_template_kwargs": {"enable_citations": True, "n": big}},
        "chat_tool_choice_none": {"messages": [{"role": "user", "content": "x"}], "tools": [tool],
                                  "tool_choice": "none", "chat_template": "{{ messages[0].content }}",
                                  "documents": [{"title": "t", "text": "d"}, "plain"],
                                  "chat_template_kwargs": {"enable_citations": False}},
        "chat_tool_choice_named": {"messages": [{"role": "user", "content": "x"}], "tools": [tool],
                                   "tool_choice": {"type": "function", "function": {"name": "search"}}},
        "chat_bad_arguments": {"messages": [{"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1, 2"}},
            {"id": "d", "type": "function", "function": {"name": "g", "arguments": {"already": "object"}}}]}],
            "tool_choice": "required", "thinking_budget": -1, "chat_template": 5},
        # Cohere's /v2/chat.
        "cohere_basic": {"model": "command-a", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]}],
            "temperature": 0.5, "p": 0.9, "k": 10, "seed": 7, "max_tokens": 32, "stop_sequences": ["END"],
            "frequency_penalty": 0.1, "presence_penalty": 0.2, "stream": True},
        "cohere_tools_documents": {"messages": [
            {"role": "user", "content": "Search."},
            {"role": "assistant", "tool_plan": "I will search.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": [
                {"type": "document", "document": {"id": "r0", "data": {"title": "t", "snippet": "s", "n": big}}},
                {"type": "text", "text": "plain result"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Found it."}]}],
            "tools": [tool], "documents": ["a string document", {"id": "d1", "data": {"title": "T", "text": "x"}},
                                           {"data": "string data"}],
            "citation_options": {"mode": "ACCURATE"}, "safety_mode": "CONTEXTUAL",
            "thinking": {"type": "enabled", "token_budget": 100}, "response_format": {"type": "text"}},
        # Alternating turns, which the tiny model's template renders (it refuses tool turns).
        "cohere_grounded": {"messages": [
            {"role": "system", "content": [{"type": "text", "text": "Cite."}]},
            {"role": "user", "content": "Q1"}, {"role": "assistant", "content": [{"type": "text", "text": "A1"}]},
            {"role": "user", "content": [{"type": "text", "text": "Q2"}]}],
            "documents": [{"id": "d0", "data": {"text": "fact", "n": big}}, "second"],
            "citation_options": {"mode": "FAST"}, "safety_mode": "OFF", "thinking": {"type": "enabled"},
            "tools": [tool], "stop_sequences": ["<co"]},
        "cohere_options_off": {"messages": [{"role": "user", "content": "x"}], "tools": [tool],
                               "tool_choice": "NONE", "citation_options": {"mode": "OFF"}, "safety_mode": "STRICT",
                               "thinking": {"type": "disabled"}, "strict_tools": False, "logprobs": False},
        "cohere_refused": {"messages": [{"role": "user", "content": "x"}], "tool_choice": "REQUIRED",
                           "strict_tools": True, "response_format": {"type": "json_object"}, "logprobs": True},
        "cohere_bad_fields": {"messages": [{"role": "chatbot", "content": "x"}, {"role": "tool", "content": []}],
                              "documents": [{"id": 7, "data": {}}, {"text": "no data"}],
                              "citation_options": {"mode": "SLOW"}, "safety_mode": "NONE",
                              "thinking": {"type": "maybe", "token_budget": big}, "k": 501, "p": 0},
    })
    for name, body in bodies.items():
        write(t, name, compact(body))
    write(t, "not_json", "{\"prompt\": \"x\",")
    write(t, "deep", "[" * 70 + "]" * 70)


# --- SSE bodies (first byte: status and how the body is cut) ---
def seeds_sse():
    t = "sse"
    clear(t)

    def chunk(text, finish=None):
        return compact({"id": "cmpl-1", "object": "text_completion", "choices": [
            {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]})

    good = "".join(f"data: {chunk(w)}\n\n" for w in ["Hello", " world"]) + f"data: {chunk('', 'stop')}\n\n"
    good += "data: " + compact({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2,
                                                        "prompt_tokens_details": {"cached_tokens": 2}}}) + "\n\n"
    good += "data: [DONE]\n\n"
    write(t, "good", "\x03" + good)
    write(t, "good_crlf_pieces", "\x00" + good.replace("\n", "\r\n"))
    write(t, "good_cr", "\x05" + good.replace("\n", "\r"))
    write(t, "comments_fields", "\x02: ping\nevent: x\nid: 1\nretry: 10\ndata:" + chunk("a") + "\ndata\n\ndata: [DONE]")
    write(t, "multiline", "\x04data: {\"choices\":\ndata: []}\n\ndata: [DONE]\n\n")
    write(t, "error_event", "\x01data: " + compact({"error": {"message": "boom", "code": 500}}) + "\n\n")
    write(t, "finish_error", "\x06data: " + chunk("", "error") + "\n\ndata: [DONE]\n\n")
    write(t, "not_json", "\x07data: {oops\n\n")
    write(t, "http_error", "\x80" + compact({"error": {"message": "bad request", "type": "invalid_request_error"}}))
    write(t, "no_done", "\x03data: " + chunk("x") + "\n\n")


# --- grammar sources (byte 0: 0 JSON Schema, 1 GBNF, 2 regex, 3 choices; byte 1: the walk's seed) ---
def seeds_grammar():
    t = "grammar"
    clear(t)
    write(t, "schema_object", "\x00\x05" + compact({"type": "object", "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"enum": ["x", "é"]}}, "required": ["a"]}))
    write(t, "schema_string", "\x00\x11" + compact({"type": "string", "maxLength": 4, "pattern": "^[a-c]+$"}))
    write(t, "schema_ref", "\x00\x07" + compact({"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"},
                                                             "maxItems": 2}}, "$ref": "#/$defs/n"}))
    write(t, "schema_number", "\x00\x02" + compact({"anyOf": [{"type": "number"}, {"type": "null"},
                                                               {"type": "boolean"}]}))
    write(t, "schema_refused", "\x00\x01" + compact({"type": "object", "not": {}}))
    write(t, "gbnf_json", "\x01\x09" + 'root ::= value\nvalue ::= obj | arr | "true" | [0-9]+\n'
          'obj ::= "{" (str ": " value)? "}"\narr ::= "[" (value (", " value)*)? "]"\nstr ::= "\\"" [^"\\\\]* "\\""')
    write(t, "gbnf_unicode", "\x01\x03" + 'root ::= [à-ÿ€]{1,3} "🎉"?')
    write(t, "gbnf_left_recursive", "\x01\x00" + 'root ::= root "a"')
    write(t, "regex_simple", "\x02\x04" + "[0-9]{2,3}-(ab|cd)*\\.")
    write(t, "regex_classes", "\x02\x06" + "\\d+\\s?[^\\W_]{0,5}")
    write(t, "regex_backref", "\x02\x00" + "(a)\\1")
    write(t, "choice", "\x03\x08" + "yes\nno\nmaybe €\n")


if __name__ == "__main__":
    for f in [seeds_safetensors, seeds_config, seeds_tokenizer, seeds_tokenizer_text, seeds_chat_template,
              seeds_chat_messages, seeds_cohere_output, seeds_request, seeds_sse, seeds_grammar]:
        f()
