#!/usr/bin/env python3
"""Renders tide's Jinja2 interpreter test cases with Python jinja2, configured as transformers'
apply_chat_template configures it, and writes tests/fixtures/jinja_cases.json for tests/unit/jinja_test.cpp.

Usage: python3 tools/chat/jinja_cases.py [output.json]   (needs python3-jinja2; CI reads the JSON only)

The cases are jinja_case_list.py's and jinja_case_list_bigint.py's; integers beyond 64 bits are written as JSON
integer literals, which tide reads exactly (parse_json_exact).

Each case: name, template, vars, and either "expected" (the rendered text) or "error" (the exception text) with
"error_type" and, for raise_exception, "exact_error": true (tide must throw exactly that message); syntax errors
carry "error_line". A case where tide deliberately differs carries "tide_divergence" (why tide throws instead).
"""
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jinja_case_list import CASES  # noqa: E402
from jinja_case_list_bigint import CASES as BIGINT_CASES  # noqa: E402


class GenerationTag(Extension):
    """transformers' AssistantTracker without the tracking: {% generation %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def make_env():
    # Mirrors transformers.utils.chat_template_utils._compile_jinja_template.
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_case(env, name, template, variables):
    case = {"name": name, "template": template, "vars": variables}
    try:
        compiled = env.from_string(template)
    except jinja2.exceptions.TemplateSyntaxError as e:
        case.update(error=str(e.message), error_type="TemplateSyntaxError", error_line=e.lineno)
        return case
    except Exception as e:  # TemplateAssertionError (unknown filter / test) and the like
        case.update(error=str(e), error_type=type(e).__name__)
        return case
    try:
        case["expected"] = compiled.render(**variables)
    except jinja2.exceptions.TemplateError as e:
        exact = type(e) is jinja2.exceptions.TemplateError  # raised by raise_exception()
        case.update(error=str(e), error_type=type(e).__name__)
        if exact:
            case["exact_error"] = True
    except Exception as e:
        case.update(error=str(e), error_type=type(e).__name__)
    return case


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "..", "tests", "fixtures", "jinja_cases.json")
    env = make_env()
    names = set()
    cases = []
    for name, template, variables, divergence in CASES + BIGINT_CASES:
        assert name not in names, f"duplicate case name {name}"
        names.add(name)
        cases.append(render_case(env, name, template, variables))
        if divergence:
            cases[-1]["tide_divergence"] = divergence
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"jinja2_version": jinja2.__version__, "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum(1 for c in cases if "error" in c)
    print(f"{len(cases)} cases ({errors} expect an error) -> {os.path.normpath(out)}")


if __name__ == "__main__":
    main()
