#!/usr/bin/env python3
"""Renders Cohere's real chat templates (tests/fixtures/chat-templates/*.jinja) over the conversations of
real_template_conversations.py with Python jinja2, configured as transformers' apply_chat_template configures
it (the environment of jinja_cases.py), and writes tests/fixtures/chat-templates/cases.json for
tests/unit/real_templates_test.cpp.

Usage: python3 tools/chat/real_template_cases.py [output.json]   (needs python3-jinja2; CI reads the JSON only)

Each case: name, template (the file's stem, "<model>.<template name>"), messages, tools, documents,
add_generation_prompt, kwargs (the extra keyword arguments) and special_tokens, rendered as transformers does:
template.render(messages=..., tools=..., documents=..., add_generation_prompt=..., **special_tokens, **kwargs);
then "expected" (the text) or "error" and "error_type" ("exact_error": true for raise_exception, whose message
tide must reproduce). A case of a model with several templates carries "selected": whether a request with these
tools and documents gets this template (tool_use with tools, else rag with documents, else default; tools and
documents count when not None, as transformers tests them).
"""
import json
import os
import sys

import jinja2

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from jinja_cases import make_env  # noqa: E402
from real_template_conversations import CONVERSATIONS  # noqa: E402

TEMPLATES_DIR = os.path.join(HERE, "..", "..", "tests", "fixtures", "chat-templates")

# Cohere's special tokens (tokenizer_config.json of Command R7B and Command A), as transformers'
# special_tokens_map hands them to the template.
SPECIAL_TOKENS = {
    "bos_token": "<BOS_TOKEN>",
    "eos_token": "<|END_OF_TURN_TOKEN|>",
    "unk_token": "<UNK>",
    "sep_token": "<SEP>",
    "pad_token": "<PAD>",
    "cls_token": "<CLS>",
    "mask_token": "<MASK_TOKEN>",
}


def selected_name(names, tools, documents):
    if tools is not None and "tool_use" in names:
        return "tool_use"
    if documents is not None and tools is None and "rag" in names:
        return "rag"
    return "default"


def render_case(compiled, variables):
    case = {}
    try:
        case["expected"] = compiled.render(
            messages=variables["messages"], tools=variables["tools"], documents=variables["documents"],
            add_generation_prompt=variables["add_generation_prompt"], **{**SPECIAL_TOKENS, **variables["kwargs"]})
    except jinja2.exceptions.TemplateError as e:
        case.update(error=str(e), error_type=type(e).__name__)
        if type(e) is jinja2.exceptions.TemplateError:  # raised by raise_exception()
            case["exact_error"] = True
    except Exception as e:  # TypeError and the like, from Python operations inside the template
        case.update(error=str(e), error_type=type(e).__name__)
    return case


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(TEMPLATES_DIR, "cases.json")
    env = make_env()
    stems = sorted(f[:-len(".jinja")] for f in os.listdir(TEMPLATES_DIR) if f.endswith(".jinja"))
    names_of_model = {}
    for stem in stems:
        model, name = stem.rsplit(".", 1)
        names_of_model.setdefault(model, set()).add(name)
    cases = []
    for stem in stems:
        model, name = stem.rsplit(".", 1)
        with open(os.path.join(TEMPLATES_DIR, stem + ".jinja"), encoding="utf-8") as f:
            compiled = env.from_string(f.read())
        for conversation_name, variables in CONVERSATIONS:
            case = {"name": f"{stem}.{conversation_name}", "template": stem, **variables,
                    "special_tokens": SPECIAL_TOKENS}
            if len(names_of_model[model]) > 1:
                case["selected"] = selected_name(names_of_model[model], variables["tools"],
                                                 variables["documents"]) == name
            case.update(render_case(compiled, variables))
            cases.append(case)
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"jinja2_version": jinja2.__version__, "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum(1 for c in cases if "error" in c)
    print(f"{len(cases)} cases ({errors} expect an error) -> {os.path.normpath(out)}")


if __name__ == "__main__":
    main()
