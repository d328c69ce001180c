"""The demo model's tokenizer: a byte-level BPE built the way Cohere's is (NFC; Digits with single digits, then
ByteLevel with the GPT-2 regex; <BOS_TOKEN> added by a TemplateProcessing post-processor; ByteLevel decoder;
Cohere's special tokens first), trained with Hugging Face `tokenizers` on the training documents.

It uses only what tide's tokenizer implements (src/tokenizer); check_supported() lists anything else, and the
training report records the list. tokenizer_config.json carries a Cohere-style chat template (the fixtures' one)
and names <|END_OF_TURN_TOKEN|> as the chat EOS, as Cohere's checkpoints do.
"""
import json

# Cohere's special tokens, in Cohere's order (ids 0..16, as in tests/fixtures/cohere2-tiny).
SPECIAL_TOKENS = [
    "<PAD>", "<UNK>", "<CLS>", "<SEP>", "<MASK_TOKEN>", "<BOS_TOKEN>", "<EOS_TOKEN>", "<EOP_TOKEN>",
    "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>",
    "<|SYSTEM_TOKEN|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_THINKING|>", "<|END_THINKING|>",
]
PAD_ID, BOS_ID, EOS_ID, END_OF_TURN_ID = 0, 5, 6, 9

CHAT_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set system_message = messages[0]['content'] %}"
    "{% set loop_messages = messages[1:] %}{% else %}{% set system_message = '' %}{% set loop_messages = messages %}"
    "{% endif %}<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>{{ system_message }}<|END_OF_TURN_TOKEN|>"
    "{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}<|START_OF_TURN_TOKEN|><|USER_TOKEN|>{{ message['content'] | trim }}"
    "<|END_OF_TURN_TOKEN|>{% elif message['role'] == 'assistant' %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
    "<|START_RESPONSE|>{{ message['content'] | trim }}<|END_RESPONSE|><|END_OF_TURN_TOKEN|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_RESPONSE|>{% endif %}"
)


def train(texts, vocab_size):
    """A Cohere-style byte-level BPE of `vocab_size` tokens (special tokens and the 256 bytes included)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    bos = SPECIAL_TOKENS[BOS_ID]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, BOS_ID)])
    for i, name in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(name) == i, (name, tok.token_to_id(name))
    return tok


def check_supported(tokenizer_json):
    """What in the tokenizer.json tide would not read the same way as HF (empty when nothing)."""
    j = json.loads(tokenizer_json)
    problems = []

    def expect(ok, what):
        if not ok:
            problems.append(what)

    expect(j["normalizer"] == {"type": "NFC"}, f"normalizer {j['normalizer']}")
    pre = j["pre_tokenizer"] or {}
    steps = [(p.get("type"), p.get("individual_digits"), p.get("add_prefix_space"), p.get("use_regex"))
             for p in pre.get("pretokenizers", [])]
    expect(pre.get("type") == "Sequence" and
           steps == [("Digits", True, None, None), ("ByteLevel", None, False, True)], f"pre_tokenizer {pre}")
    m = j["model"]
    expect(m["type"] == "BPE" and not m.get("byte_fallback") and m.get("dropout") is None, "model options")
    expect(not m.get("continuing_subword_prefix") and not m.get("end_of_word_suffix"), "subword affixes")
    expect((j["post_processor"] or {}).get("type") == "TemplateProcessing", f"post_processor {j['post_processor']}")
    expect((j["decoder"] or {}).get("type") == "ByteLevel", f"decoder {j['decoder']}")
    for t in j["added_tokens"]:
        expect(t["special"] and not t["normalized"] and not t["lstrip"] and not t["rstrip"], f"added token {t}")
    return problems


def tokenizer_config(model_max_length):
    return {
        "chat_template": CHAT_TEMPLATE,
        "tokenizer_class": "CohereTokenizer",
        "bos_token": SPECIAL_TOKENS[BOS_ID],
        "eos_token": SPECIAL_TOKENS[END_OF_TURN_ID],
        "pad_token": SPECIAL_TOKENS[PAD_ID],
        "unk_token": None,
        "add_bos_token": True,
        "add_eos_token": False,
        "model_max_length": model_max_length,
        "clean_up_tokenization_spaces": False,
    }


def render_chat(messages, add_generation_prompt):
    """The chat template rendered as transformers renders it (sandboxed jinja2, trim_blocks, lstrip_blocks):
    used for the chat-formatted training text; the goldens come from transformers itself."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(CHAT_TEMPLATE).render(
        messages=messages, add_generation_prompt=add_generation_prompt, bos_token=SPECIAL_TOKENS[BOS_ID],
        eos_token=SPECIAL_TOKENS[END_OF_TURN_ID])
