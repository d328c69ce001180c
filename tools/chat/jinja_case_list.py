"""The cases tools/chat/jinja_cases.py renders: (name, template, variables, divergence). Names are unique
identifiers; `divergence` (None for almost all) says why tide deliberately throws where jinja2 renders."""

MSGS = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello! How can I help?"},
    {"role": "user", "content": "What's 2+2?"},
]
PEOPLE = [
    {"name": "bob", "age": 31, "city": "Oslo"},
    {"name": "Alice", "age": 25, "city": "Paris"},
    {"name": "carol", "age": 31},
]

CASES = []


def case(case_name, template, divergence=None, **variables):
    CASES.append((case_name, template, variables, divergence))


# --- lexer and whitespace control ---
case("text_only", "Hello, world!")
case("trailing_newline_dropped", "line\n")
case("two_trailing_newlines_keep_one", "line\n\n")
case("crlf_normalized", "a\r\nb\rc\r\n")
case("trim_blocks", "{% if true %}\nyes\n{% endif %}\nafter")
case("lstrip_blocks", "  {% if true %}\n  x\n  {% endif %}\nend")
case("lstrip_tabs", "\t\t{% if true %}\n\tx\n\t{% endif %}")
case("lstrip_not_first_on_line", "a  {% if true %}b{% endif %}  c")
case("lstrip_not_for_variables", "  {{ 'x' }}\n  {{ 'y' }}")
case("dash_strips_before", "a   \n\n  {%- if true %}b{% endif %}")
case("dash_strips_after", "{% if true -%}  \n\n  b{% endif %}")
case("dash_variable_both", "a  {{- 'b' -}}  \n c")
case("plus_keeps_lstrip", "  {%+ if true %}x{% endif %}")
case("plus_keeps_newline", "{% if true +%}\nx{% endif %}")
case("comment_removed", "a{# comment #}b")
case("comment_trim_newline", "a\n{# comment #}\nb")
case("comment_multiline_dash", "a  {#- multi\nline -#}  b")
case("comment_lstrip", "a\n    {# c #}\nb")
case("raw_block", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}")
case("raw_block_dash", "x  {%- raw -%}  {{ y }}  {%- endraw -%}  z")
case("raw_block_newlines", "{% raw %}\nkept\n{% endraw %}\nafter")
case("braces_in_string", "{{ '}}' ~ \"{%\" }}")
case("nested_dict_literal", "{{ {'a': {'b': 1}} }}")
case("block_tags_chain", "{%- for i in range(3) -%}\n  {{ i }}\n{%- endfor -%}\n")
case("whitespace_mix", "<s>\n{%- for m in msgs %}\n  [{{ m }}]\n{% endfor %}\n</s>", msgs=["a", "b"])

# --- literals and printing ---
case("print_none_bool", "{{ none }} {{ None }} {{ true }} {{ False }}")
case("print_ints", "{{ 42 }} {{ -7 }} {{ 0x1F }} {{ 1_000_000 }} {{ 0o17 }} {{ 0b101 }}")
case("print_floats", "{{ 1.0 }} {{ 2.5 }} {{ 1e16 }} {{ 1e15 }} {{ 1.5e-7 }} {{ 0.0001 }} {{ 0.1 + 0.2 }} {{ -0.0 }}")
case("print_float_big", "{{ 123456789.125 }} {{ 1e100 }} {{ 3.14159e-5 }}")
case("string_escapes", "{{ 'a\\tb\\\\c\\'d\\x41\\u00e9' }}|{{ \"line\\nnext\" }}|{{ 'keep\\d' }}")
case("adjacent_strings", "{{ 'a' 'b' \"c\" }}")
case("list_repr", "{{ [1, 'two', none, true, 2.5, [3]] }}")
case("tuple_repr", "{{ (1,) }} {{ (1, 'a') }} {{ () }}")
case("dict_repr", "{{ {'a': 1, 'b': [1, 2], 3: none} }}")
case("string_repr_quotes", "{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\there'] }}")
case("print_tuple_without_parens", "{{ 1, 2 }}")
case("print_var_types", "{{ s }} {{ i }} {{ f }} {{ b }} {{ n }} {{ l }} {{ d }}",
     s="str", i=3, f=2.0, b=True, n=None, l=[1, "x"], d={"k": "v"})
case("unicode_passthrough", "{{ s }}|{{ s|length }}|{{ s[1] }}|{{ s|upper }}", s="héllo wörld ✓")

# --- operators ---
case("arith_basic", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 - 10 }} {{ 2 ** 10 }} {{ 2 ** -1 }}")
case("arith_division", "{{ 7 / 2 }} {{ 6 / 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }}")
case("arith_float", "{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1.5 * 2 }} {{ 1 + 1.0 }} {{ 10 / 4.0 }}")
case("arith_bool_as_int", "{{ true + 1 }} {{ false * 5 }} {{ true + true }}")
case("unary_minus_precedence", "{{ -2 ** 2 }} {{ -3|abs }} {{ - 1 + 2 }} {{ +5 }}")
case("concat_tilde", "{{ 'a' ~ 1 ~ none ~ true ~ undefined_thing ~ [1] }}")
case("string_plus", "{{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ 2 * 'x' }} {{ 'x' * 0 }}")
case("list_plus_times", "{{ [1, 2] + [3] }} {{ [0] * 3 }} {{ (1,) + (2,) }}")
case("compare_ops", "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 3 > 4 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 1 != 2 }} {{ [1, 2] < [1, 3] }}")
case("compare_chain", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1 == 1 }}")
case("in_operator", "{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 5 not in [1] }} {{ 'x' not in 'xyz' }}")
case("and_or_values", "{{ 0 or 'fallback' }} {{ 'x' and 'y' }} {{ '' and 'y' }} {{ none or [] }} {{ 1 and 0 }}")
case("not_precedence", "{{ not 1 == 2 }} {{ not true and false }} {{ not (true and false) }}")
case("ternary", "{{ 'yes' if x else 'no' }} {{ 'a' if false }}|{{ 1 if 0 else 2 if 0 else 3 }}", x=1)
case("equality_types", "{{ none == none }} {{ 1 == true }} {{ '1' == 1 }} {{ [1] == [1] }} {{ {'a': 1} == {'a': 1} }} {{ (1,) == [1] }}")
case("undefined_equality", "{{ nope == nope2 }} {{ nope == none }} {{ nope is none }}")

# --- attribute and item access ---
case("dict_access", "{{ d.a }} {{ d['a'] }} {{ d.missing }}|{{ d['missing'] }}|{{ d.b.c }}", d={"a": 1, "b": {"c": "deep"}})
case("list_index", "{{ l[0] }} {{ l[-1] }} {{ l[5] }}|{{ l.0 }}", l=["x", "y", "z"])
case("string_index", "{{ s[0] }}{{ s[-1] }}|{{ s[10] }}|", s="hello")
case("slices", "{{ l[1:] }} {{ l[:2] }} {{ l[::2] }} {{ l[::-1] }} {{ l[-2:] }} {{ l[1:-1] }} {{ l[5:] }} {{ l[3:1:-1] }}",
     l=[0, 1, 2, 3, 4])
case("string_slices", "{{ s[1:3] }}|{{ s[::-1] }}|{{ s[-3:] }}|{{ s[:0] }}", s="héllo")
case("messages_slice", "{% for m in messages[1:] %}{{ m.role }};{% endfor %}", messages=MSGS)
case("dict_key_shadowed_by_method", "{{ d['items'] }} {{ d.get('items') }} {{ d.values()|list }}", d={"items": 5})
case("none_attribute", "[{{ n.foo }}]", n=None)
case("dict_int_keys", "{{ d[1] }} {{ d[1.0] }} {{ d[true] }}", d={"1": "string-key"})

# --- if / for ---
case("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %};{% endfor %}")
case("if_truthiness", "{% for v in values %}{% if v %}T{% else %}F{% endif %}{% endfor %}",
     values=[0, 1, "", "a", [], [0], {}, {"a": 1}, None, 0.0, 0.5, False, True])
case("if_undefined", "{% if nope %}yes{% else %}no{% endif %}{% if nope is defined %}d{% endif %}")
case("for_loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
     "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}")
case("for_prev_next", "{% for x in [1, 2, 3] %}[{{ loop.previtem }}|{{ x }}|{{ loop.nextitem }}]{% endfor %}")
case("for_cycle", "{% for x in range(5) %}{{ loop.cycle('odd', 'even') }} {% endfor %}")
case("for_else", "{% for x in [] %}{{ x }}{% else %}empty{% endfor %}|{% for x in [1] %}{{ x }}{% else %}empty{% endfor %}")
case("for_if_filter", "{% for x in range(10) if x % 3 == 0 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}")
case("for_unpack_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", d={"b": 1, "a": 2, "c": [3]})
case("for_unpack_pairs", "{% for a, b in [[1, 2], (3, 4), 'xy'] %}{{ a }}-{{ b }} {% endfor %}")
case("for_nested_unpack", "{% for a, (b, c) in [(1, (2, 3))] %}{{ a }}{{ b }}{{ c }}{% endfor %}")
case("for_dict_keys", "{% for k in d %}{{ k }}{% endfor %}", d={"z": 1, "y": 2})
case("for_undefined_empty", "[{% for x in nope %}{{ x }}{% endfor %}]")
case("for_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}")
case("for_nested_outer_loop", "{% for a in [1, 2] %}{% set outer = loop %}{% for b in [1, 2] %}{{ outer.index }}{{ loop.index }} {% endfor %}{% endfor %}")
case("for_loop_shadowing", "{% for a in [1, 2] %}{% for b in [3] %}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}")
case("for_set_does_not_leak", "{% set x = 'outer' %}{% for i in [1, 2] %}{% set x = i %}{{ x }}{% endfor %}{{ x }}")
case("for_set_per_iteration", "{% set x = 9 %}{% for i in range(3) %}{{ x }}{% set x = i %}{% endfor %}{{ x }}")
case("if_set_leaks", "{% if true %}{% set x = 'inner' %}{% endif %}{{ x }}")
case("loop_changed", "{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}")
case("loop_over_string_chars", "{% for c in 'héllo' %}[{{ c }}]{% endfor %}")
case("range_forms", "{{ range(3)|list }} {{ range(1, 4)|list }} {{ range(10, 0, -3)|list }} {{ range(0)|list }}")

# --- set, namespace, with ---
case("set_simple", "{% set x = 1 + 2 %}{{ x }}")
case("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}")
case("set_block", "{% set body %}Hello {{ name }}!{% endset %}[{{ body }}]", name="Bob")
case("set_block_filter", "{% set body | upper | trim %}  shout  {% endset %}[{{ body }}]")
case("namespace_counter", "{% set ns = namespace(count=0, items=[]) %}{% for x in range(4) %}{% set ns.count = ns.count + x %}"
     "{% set ns.items = ns.items + [x] %}{% endfor %}{{ ns.count }} {{ ns.items }}")
case("namespace_flag", "{% set ns = namespace(found=false) %}{% for m in messages %}{% if m.role == 'assistant' %}"
     "{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}", messages=MSGS)
case("namespace_missing_attr", "[{{ namespace(a=1).b }}]{{ namespace(a=1).a }}")
case("with_block", "{% with a = 1, b = 'x' %}{{ a }}{{ b }}{% endwith %}[{{ a }}]")
case("generation_block", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% endif %}{% endfor %}",
     messages=MSGS)

# --- macros, call, filter blocks ---
case("macro_defaults_kwargs", "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}"
     "{{ greet('Ann') }} {{ greet('Bo', 'Hi') }} {{ greet(name='Cy', punct='?') }} {{ greet() }}")
case("macro_varargs_kwargs", "{% macro m(a) %}{{ a }}|{{ varargs }}|{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}")
case("macro_sees_globals", "{% macro f() %}{{ y }}{% endmacro %}{% set y = 1 %}{{ f() }}{% set y = 2 %}{{ f() }}")
case("macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}")
case("macro_returns_string", "{% macro two() %}2{% endmacro %}{{ two() ~ two() }} {{ two()|int + 1 }}")
case("macro_whitespace", "{%- macro item(x) -%}\n  <{{ x }}>\n{%- endmacro -%}\n{{ item(1) }}{{ item(2) }}")
case("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}")
case("call_block_args", "{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}"
     "{% call(x) each([1, 2]) %}[{{ x }}]{% endcall %}")
case("filter_block", "{% filter upper %}hello {{ 'world' }}{% endfilter %}")
case("macro_in_loop_closure", "{% for i in range(2) %}{% set y = i %}{% macro f() %}{{ y }}{% endmacro %}{{ f() }}{% endfor %}")

# --- filters ---
case("f_trim", "[{{ '  a b  '|trim }}][{{ 'xxhixx'|trim('x') }}][{{ '\\n\\t x \\u3000'|trim }}]")
case("f_length", "{{ [1, 2]|length }} {{ 'héllo'|length }} {{ {'a': 1}|length }} {{ nope|length }} {{ (1, 2, 3)|count }}")
case("f_upper_lower", "{{ 'MiXed'|upper }} {{ 'MiXed'|lower }} {{ 5|upper }} {{ none|lower }}")
case("f_capitalize_title", "{{ 'hELLO wORLD'|capitalize }}|{{ 'hello wORLD-foo (bar) it\\'s'|title }}")
case("f_replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'abc'|replace('', '-') }}")
case("f_join", "{{ [1, 2, 3]|join(', ') }} {{ ['a', 'b']|join }} {{ people|join('/', attribute='name') }}", people=PEOPLE)
case("f_default", "{{ nope|default('d') }} {{ none|default('d') }} {{ ''|default('d', true) }} {{ 0|d('zero', boolean=true) }} {{ 'v'|d('x') }}")
case("f_first_last", "{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} {{ 'abc'|last }} [{{ []|first }}] {{ {'k': 1, 'j': 2}|first }}")
case("f_list_string", "{{ 'abc'|list }} {{ {'a': 1}|list }} {{ 42|string ~ '!' }} {{ [1]|string }}")
case("f_int", "{{ '42'|int }} {{ '3.7'|int }} {{ 3.9|int }} {{ 'abc'|int }} {{ 'abc'|int(7) }} {{ none|int }} {{ true|int }} {{ ' 12 '|int }} {{ 'ff'|int(base=16) }}")
case("f_float", "{{ '2.5'|float }} {{ 3|float }} {{ 'x'|float }} {{ 'x'|float(1.5) }} {{ '1e3'|float }}")
case("f_abs", "{{ -3|abs }} {{ (-2.5)|abs }} {{ 4|abs }}")
case("f_round", "{{ 2.5|round }} {{ 3.5|round }} {{ 3|round }} {{ 2.675|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(method='floor') }} {{ 1234|round(-2) }} {{ 1.23456|round(3) }}")
case("f_map_attribute", "{{ people|map(attribute='name')|list }} {{ people|map(attribute='city', default='?')|join(',') }}", people=PEOPLE)
case("f_map_filter", "{{ ['a', 'b']|map('upper')|list }} {{ [1.5, 2.5]|map('round')|list }} {{ ['x']|map('replace', 'x', 'y')|list }}")
case("f_select_reject", "{{ range(10)|select('odd')|list }} {{ range(10)|reject('even')|list }} {{ [0, 1, '', 'a', none]|select|list }} {{ [1, 2, 3]|select('gt', 1)|list }}")
case("f_selectattr", "{{ people|selectattr('age', 'equalto', 31)|map(attribute='name')|list }} {{ people|rejectattr('city')|map(attribute='name')|list }} {{ people|selectattr('city', 'defined')|list|length }}",
     people=PEOPLE)
case("f_selectattr_messages", "{{ messages|selectattr('role', 'eq', 'user')|list|length }} {{ (messages|selectattr('role', '==', 'system')|first).content }}",
     messages=MSGS)
case("f_unique", "{{ ['a', 'A', 'b', 'a']|unique|list }} {{ ['a', 'A']|unique(case_sensitive=true)|list }} {{ [1, 1.0, true, 2]|unique|list }} {{ people|unique(attribute='age')|map(attribute='name')|list }}",
     people=PEOPLE)
case("f_sort", "{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ [3, 1, 2]|sort(reverse=true) }} {{ people|sort(attribute='age')|map(attribute='name')|list }} {{ people|sort(attribute='age', reverse=true)|map(attribute='name')|list }}",
     people=PEOPLE)
case("f_sort_stable_names", "{{ people|sort(attribute='name')|map(attribute='name')|join(',') }}", people=PEOPLE)
case("f_dictsort", "{{ d|dictsort }} {{ d|dictsort(by='value') }} {{ d|dictsort(reverse=true) }}", d={"b": 2, "A": 3, "c": 1})
case("f_indent", "[{{ 'a\\nb\\n\\nc'|indent }}][{{ 'a\\nb'|indent(2, true) }}][{{ 'a\\n\\nb'|indent(width='> ', blank=true) }}][{{ 'x'|indent(first=true) }}]")
case("f_wordcount_center", "{{ 'one two, three_four 5'|wordcount }}|{{ 'ab'|center(6) }}|{{ 'abc'|center(6) }}|")
case("f_escape_safe", "{{ '<a href=\"x\">&\\'</a>'|e }} {{ '<b>'|escape }} {{ '<i>'|safe }}")
case("f_batch", "{% for row in range(7)|batch(3) %}{{ row }}{% endfor %} {% for row in 'abcd'|batch(3, '-') %}{{ row|join }};{% endfor %}")
case("f_sum_min_max", "{{ [1, 2, 3]|sum }} {{ [1.5, 2]|sum(start=10) }} {{ people|sum(attribute='age') }} {{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ ['b', 'A', 'c']|max }} {{ people|min(attribute='age') }} [{{ []|max }}]",
     people=PEOPLE)
case("f_reverse", "{{ 'abc'|reverse }} {{ [1, 2, 3]|reverse|list }} {{ [1, 2]|reverse|join(',') }}")
case("f_items", "{% for k, v in d|items %}{{ k }}:{{ v }} {% endfor %}[{% for k, v in nope|items %}x{% endfor %}]", d={"x": 1, "y": 2})
case("f_attr", "{{ d|attr('a') }} [{{ d|attr('zz') }}]", d={"a": 1})
case("f_format", "{{ '%s is %d years'|format('Bob', 31) }} {{ '%.2f%%'|format(12.3456) }} {{ '%5s|%-5s|%05d'|format('a', 'b', 42) }} {{ '%r'|format('q') }}")
case("f_tojson_basic", "{{ d|tojson }}", d={"b": 1, "a": [1.0, None, True, "é\n\"q\"\t<>&'", {"x": -2.5e-10}]})
case("f_tojson_indent", "{{ d|tojson(indent=2) }}|{{ [1, [2, []], {}]|tojson(indent=4) }}", d={"name": "f", "params": {"type": "object", "required": ["a"]}})
case("f_tojson_options", "{{ d|tojson(separators=(',', ':')) }} {{ d|tojson(sort_keys=true) }} {{ 'x'|tojson }} {{ none|tojson }} {{ 3|tojson }} {{ (1, 2)|tojson }}",
     d={"z": 1, "a": {"c": 2, "b": 3}})
case("f_tojson_control_chars", "{{ s|tojson }}", s="a\x00b\x1fc\x7fd\u2028e")
case("f_tojson_string_indent", "{{ {'a': [1]}|tojson(indent='\\t') }}")
case("f_tojson_int_keys", "{{ {1: 'a', true: 'b', none: 'c', 2.5: 'd'}|tojson }}")
case("f_chained", "{{ messages|map(attribute='content')|map('lower')|select('ne', 'hi there')|join(' | ')|upper }}", messages=MSGS)

# --- tests ---
case("t_defined", "{{ x is defined }} {{ nope is defined }} {{ nope is undefined }} {{ none is defined }}", x=0)
case("t_none_bool", "{{ none is none }} {{ 0 is none }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ true is boolean }} {{ 1 is boolean }}")
case("t_types", "{{ 'a' is string }} {{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ {} is mapping }} {{ [] is mapping }}")
case("t_iterable_sequence", "{{ [] is iterable }} {{ 'a' is iterable }} {{ {} is iterable }} {{ 1 is iterable }} {{ none is iterable }} {{ nope is iterable }} {{ [] is sequence }} {{ 'a' is sequence }} {{ {} is sequence }} {{ 1 is sequence }}")
case("t_numbers", "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 10 is divisibleby(4) }} {{ 0 is even }}")
case("t_compare", "{{ 1 is eq 1 }} {{ 1 is equalto 2 }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 2 is le 2 }} {{ 3 is gt 2 }} {{ 3 is ge 4 }} {{ 2 is in [1, 2] }} {{ 'x' is in 'abc' }}")
case("t_not", "{{ x is not none }} {{ x is not string }} {% if x is not defined %}undef{% else %}def{% endif %}", x="s")
case("t_callable_case", "{{ range is callable }} {{ 1 is callable }} {{ 'ABC' is upper }} {{ 'abc' is lower }} {{ 'aB' is lower }}")
case("t_in_if", "{% if messages[0].role == 'system' and messages[0].content is string %}sys{% endif %}", messages=MSGS)
case("t_sameas", "{{ none is sameas none }} {{ true is sameas true }} {{ 1 is sameas true }}")
case("t_filter_test", "{{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }}")

# --- string, dict and list methods ---
case("m_strip_split", "[{{ '  a  '.strip() }}][{{ 'xax'.strip('x') }}][{{ '  a '.lstrip() }}][{{ ' a  '.rstrip() }}] {{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }}")
case("m_case", "{{ 'abc'.upper() }} {{ 'ABC'.lower() }} {{ 'hello world'.title() }} {{ \"they're bill's\".title() }} {{ 'hELLO'.capitalize() }}")
case("m_starts_ends", "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'hello'.endswith('x') }}")
case("m_replace_find", "{{ 'aXbX'.replace('X', '-') }} {{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'héllo'.find('l') }} {{ 'banana'.count('a') }}")
case("m_join_format", "{{ ', '.join(['a', 'b']) }} {{ '{} and {}'.format(1, 'two') }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{name}!'.format(name='Zed') }} {{ '{:>5}|{:<4}|{:^5}|'.format('r', 'l', 'c') }} {{ '{:.2f} {:5d} {:05.1f} {:,}'.format(3.14159, 42, 2.5, 1234567) }}")
case("m_format_misc", "{{ '{{}} {!r}'.format('x') }} {{ '{0[0]} {0[1]}'.format(['a', 'b']) }} {{ '{:x} {:b} {:+d}'.format(255, 5, 3) }} {{ '{}'.format(none) }} {{ '{:%}'.format(0.25) }}")
case("m_is_checks", "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'a1'.isalnum() }} {{ '  '.isspace() }} {{ 'ABC'.isupper() }} {{ 'abc'.islower() }} {{ ''.isdigit() }}")
case("m_splitlines_affix", "{{ 'a\\nb\\r\\nc'.splitlines() }} {{ 'prefix-x'.removeprefix('prefix-') }} {{ 'x.txt'.removesuffix('.txt') }}")
case("m_dict_methods", "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }}", d={"a": 1, "b": 2})
case("m_list_methods", "{{ [1, 2, 1].count(1) }} {{ ['a', 'b'].index('b') }}")
case("m_justify", "[{{ 'a'.ljust(3) }}][{{ 'a'.rjust(3, '*') }}][{{ 'ab'.center(5, '.') }}]")
case("m_unsafe_attribute_prints_empty", "[{{ l.append }}]", l=[1])

# --- globals ---
case("g_dict", "{{ dict(a=1, b='x') }} {{ dict({'k': 1}, z=2) }}")
case("g_joiner", "{% set comma = joiner(', ') %}{% for x in [1, 2, 3] %}{{ comma() }}{{ x }}{% endfor %}")
case("g_raise_exception", "{% if messages|length < 10 %}{{ raise_exception('Need at least 10 messages, got ' ~ messages|length) }}{% endif %}", messages=MSGS)
case("g_raise_exception_in_macro", "{% macro check(r) %}{% if r not in ['user', 'assistant'] %}{{ raise_exception('Unknown role: ' + r) }}{% endif %}{% endmacro %}{% for m in messages %}{{ check(m.role) }}{% endfor %}",
     messages=[{"role": "user"}, {"role": "robot"}])
case("g_strftime_empty_format", "[{{ strftime_now('') }}]")

# --- errors ---
case("err_syntax_unclosed_if", "{% if true %}never closed")
case("err_syntax_unexpected_end", "a\n{% endfor %}")
case("err_syntax_bad_expression", "line1\n{{ 1 + }}")
case("err_syntax_unterminated_string", "x\ny\n{{ 'abc }}")
case("err_syntax_unknown_tag", "{% frobnicate %}")
case("err_syntax_missing_endmacro", "{% macro m() %}x")
case("err_syntax_unbalanced", "{{ (1 + 2 }}")
case("err_syntax_unclosed_comment", "a {# never")
case("err_syntax_break_outside_loop", "{% break %}")
case("err_unknown_filter", "{{ 'x'|frobnicate }}")
case("err_unknown_test", "{{ 'x' is frobnicate }}")
case("err_undefined_attribute_chain", "{{ nope.attr }}")
case("err_undefined_nested_key", "{{ d.a.b }}", d={})
case("err_call_undefined", "{{ nope() }}")
case("err_int_plus_str", "{{ 1 + 'a' }}")
case("err_none_plus", "{{ none + 1 }}")
case("err_undefined_arith", "{{ nope + 1 }}")
case("err_list_append_unsafe", "{% set x = [] %}{% set _ = x.append(1) %}{{ x }}")
case("err_dict_update_unsafe", "{% set d = {} %}{{ d.update({'a': 1}) }}")
case("err_range_too_big", "{{ range(1000000)|length }}")
case("err_division_by_zero", "{{ 1 / 0 }}")
case("err_floor_division_by_zero", "{{ 1 // 0 }}")
case("err_macro_too_many_args", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}")
case("err_macro_unknown_kwarg", "{% macro m(a) %}{% endmacro %}{{ m(b=1) }}")
case("err_iterate_int", "{% for x in 5 %}{% endfor %}")
case("err_length_of_generator", "{{ [1, 2]|map('string')|length }}")
case("err_compare_str_int", "{{ 'a' < 1 }}")
case("err_in_string_non_string", "{{ 1 in 'abc' }}")
case("err_unpack_mismatch", "{% for a, b in [[1, 2, 3]] %}{% endfor %}")
case("err_tojson_undefined", "{{ nope|tojson }}")
case("err_set_attr_non_namespace", "{% set d = {} %}{% set d.x = 1 %}")
case("err_raise_exception_plain", "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}")

# --- Cohere-style templates (written for these tests) ---

COMMAND_R_RAG = """{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set preamble = messages[0]['content'] %}{% set loop_messages = messages[1:] %}{% else %}{% set preamble = 'You are a helpful assistant.' %}{% set loop_messages = messages %}{% endif %}
<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|># Preamble
{{ preamble }}
{% if documents %}

## Documents
{% for doc in documents %}
Document: {{ loop.index0 }}
{% for key, value in doc.items() %}
{{ key | title }}: {{ value }}
{% endfor %}
{% if not loop.last %}

{% endif %}
{% endfor %}
{% endif %}<|END_OF_TURN_TOKEN|>
{%- for message in loop_messages %}
{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
{%- endif -%}
<|START_OF_TURN_TOKEN|>{{ '<|USER_TOKEN|>' if message['role'] == 'user' else '<|CHATBOT_TOKEN|>' }}{{ message['content'] | trim }}<|END_OF_TURN_TOKEN|>
{%- endfor %}
{%- if add_generation_prompt %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{% endif %}
"""

DOCS = [
    {"title": "Tall penguins", "snippet": "Emperor penguins are the tallest, growing up to 122 cm."},
    {"title": "Penguin habitats", "snippet": "Emperor penguins only live in Antarctica.", "url": "https://example.com/p?q=1&r=\"2\""},
]
RAG_MSGS = [{"role": "user", "content": "Whats the biggest penguin in the world?"}]
SPECIAL = {"bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>"}

case("cohere_rag_documents", COMMAND_R_RAG, messages=RAG_MSGS, documents=DOCS, add_generation_prompt=True, **SPECIAL)
case("cohere_rag_no_documents", COMMAND_R_RAG, messages=MSGS, documents=None, add_generation_prompt=False, **SPECIAL)
case("cohere_rag_role_error", COMMAND_R_RAG, messages=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
     documents=None, add_generation_prompt=True, **SPECIAL)

COMMAND_R7B_TOOLS = """{{ bos_token }}{%- macro tool_call_index(messages, call_id) %}
{%- set counter = namespace(value=0, found=false) %}
{%- for msg in messages %}
    {%- for tc in (msg.tool_calls or []) %}
        {%- if tc.id == call_id and not counter.found -%}
            {{ counter.value }}
            {%- set counter.found = true %}
        {%- endif %}
        {%- set counter.value = counter.value + 1 %}
    {%- endfor %}
{%- endfor %}
{%- endmacro %}
{%- macro render_tool(tool) -%}
    {"name": "{{ tool.function.name }}", "description": {{ tool.function.description | tojson }}, "parameters": {{ tool.function.parameters | tojson }}}
{%- endmacro -%}
{%- if messages and messages[0].role | lower == 'system' %}{% set developer = messages[0].content %}{% set loop_messages = messages[1:] %}{% else %}{% set loop_messages = messages %}{% endif %}
{%- set state = namespace(call_idx=0, seen=[]) %}
<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|># System Preamble
You are a careful assistant.
{% if tools %}

## Available Tools
```json
[
{% for tool in tools %}
    {{ render_tool(tool) }}{% if not loop.last %},{% endif %}

{% endfor %}
]
```
{% endif %}
{%- if developer %}

# Developer Preamble
{{ developer }}
{%- endif -%}
<|END_OF_TURN_TOKEN|>
{%- for message in loop_messages %}
    {%- if message.role | lower == 'user' %}
<|START_OF_TURN_TOKEN|><|USER_TOKEN|>{{ message.content }}<|END_OF_TURN_TOKEN|>
    {%- elif message.role | lower in ['assistant', 'chatbot'] %}
<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>
        {%- if message.tool_calls -%}
<|START_THINKING|>{{ message.tool_plan | default('') }}<|END_THINKING|><|START_ACTION|>[
            {%- for tc in message.tool_calls %}
    {"tool_call_id": "{{ state.call_idx }}", "tool_name": "{{ tc.function.name }}", "parameters": {{ tc.function.arguments if tc.function.arguments is string else tc.function.arguments | tojson }}}{{ ',' if not loop.last }}
                {%- set state.call_idx = state.call_idx + 1 %}
            {%- endfor %}
]<|END_ACTION|><|END_OF_TURN_TOKEN|>
        {%- else -%}
<|START_RESPONSE|>{{ message.content | trim }}<|END_RESPONSE|><|END_OF_TURN_TOKEN|>
        {%- endif %}
    {%- elif message.role | lower == 'tool' and message.tool_call_id not in state.seen %}
<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|START_TOOL_RESULT|>[
        {%- for msg in loop_messages[loop.index0:] %}
            {%- if msg.role | lower == 'tool' %}
                {%- set state.seen = state.seen + [msg.tool_call_id] %}
    {"tool_call_id": "{{ tool_call_index(loop_messages, msg.tool_call_id) }}", "results": {"0": {{ msg.content | tojson }}}, "is_error": null}{{ ',' if not loop.last and loop_messages[loop.index0 + loop.index] is defined and loop_messages[loop.index0 + loop.index].role == 'tool' }}
            {%- else %}
                {%- break %}
            {%- endif %}
        {%- endfor %}
]<|END_TOOL_RESULT|><|END_OF_TURN_TOKEN|>
    {%- elif message.role | lower not in ['tool', 'system'] %}
        {{- raise_exception('Unexpected role: ' ~ message.role) }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{% endif %}
"""

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a \"city\".",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                                                                     "unit": {"type": "string", "enum": ["c", "f"]}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Search the web",
                                      "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}},
]
TOOL_MSGS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris and news?"},
    {"role": "assistant", "tool_plan": "I will call two tools.", "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}},
        {"id": "call_b", "type": "function", "function": {"name": "search", "arguments": "{\"q\": \"news\"}"}}]},
    {"role": "tool", "tool_call_id": "call_a", "content": "18°C, sunny"},
    {"role": "tool", "tool_call_id": "call_b", "content": "{\"headline\": \"Nothing happened\"}"},
    {"role": "assistant", "content": "  Paris: 18°C and sunny. Nothing happened.  "},
    {"role": "user", "content": "Thanks!"},
]
case("cohere_tools_full", COMMAND_R7B_TOOLS, messages=TOOL_MSGS, tools=TOOLS, add_generation_prompt=True, **SPECIAL)
case("cohere_tools_no_tools", COMMAND_R7B_TOOLS, messages=MSGS, tools=None, add_generation_prompt=True, **SPECIAL)
case("cohere_tools_bad_role", COMMAND_R7B_TOOLS, messages=[{"role": "user", "content": "x"}, {"role": "robot", "content": "y"}],
     tools=None, add_generation_prompt=False, **SPECIAL)

COMMAND_A_STYLE = """{%- set ns = namespace(system='', turns=0, last_user=-1) -%}
{%- for m in messages -%}
  {%- if m.role == 'system' -%}
    {%- set ns.system = ns.system ~ ('\\n' if ns.system else '') ~ m.content -%}
  {%- elif m.role == 'user' -%}
    {%- set ns.last_user = loop.index0 -%}
  {%- endif -%}
{%- endfor -%}
{{- bos_token -}}
<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>
{%- if ns.system %}{{ ns.system }}{% else %}You are Command.{% endif -%}
{%- if documents %}

<documents>
{%- for d in documents %}
{{ {'id': loop.index0} | tojson }} {{ d | tojson }}
{%- endfor %}
</documents>
{%- endif -%}
<|END_OF_TURN_TOKEN|>
{%- for m in messages if m.role != 'system' -%}
  {%- set ns.turns = ns.turns + 1 -%}
  {%- if m.role == 'user' -%}
<|START_OF_TURN_TOKEN|><|USER_TOKEN|>{{ m.content if m.content is string else m.content | map(attribute='text') | join('\\n') }}<|END_OF_TURN_TOKEN|>
  {%- else -%}
<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_RESPONSE|>{{ m.content }}<|END_RESPONSE|><|END_OF_TURN_TOKEN|>
  {%- endif -%}
  {%- if loop.last and add_generation_prompt -%}
<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>
  {%- endif -%}
{%- endfor -%}
{#- turns: {{ ns.turns }} -#}
"""
case("command_a_plain", COMMAND_A_STYLE, messages=MSGS, documents=None, add_generation_prompt=True, **SPECIAL)
case("command_a_docs_multi_system", COMMAND_A_STYLE, messages=[
    {"role": "system", "content": "Rule one."}, {"role": "system", "content": "Rule two."},
    {"role": "user", "content": [{"type": "text", "text": "part A"}, {"type": "text", "text": "part B"}]}],
    documents=DOCS, add_generation_prompt=True, **SPECIAL)
case("command_a_no_gen_prompt", COMMAND_A_STYLE, messages=MSGS[1:3], documents=[], add_generation_prompt=False, **SPECIAL)

CHATML = """{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"""
case("chatml", CHATML, messages=MSGS, add_generation_prompt=True)

TOOLS_INDENT = """{%- if tools %}
# Tools
{% for t in tools %}
## {{ t.function.name }}
{{ t.function.parameters | tojson(indent=4) }}
{% endfor %}
{%- endif %}
{%- for m in messages %}
{{ m.role | upper }}: {{ m.content | default('', true) }}
{%- if m.tool_calls is defined %}
{%- for c in m.tool_calls %}
CALL {{ c.function.name }}({% for k, v in (c.function.arguments.items() if c.function.arguments is mapping else []) %}{{ k }}={{ v | tojson }}{{ ', ' if not loop.last }}{% endfor %})
{%- endfor %}
{%- endif %}
{%- endfor %}
"""
case("tools_indent_json", TOOLS_INDENT, messages=TOOL_MSGS, tools=TOOLS)

# --- more corners ---
case("percent_operator", "{{ '%s-%s' % (1, 'b') }} {{ '%05.1f' % 2.25 }} {{ '%d%%' % 50 }} {{ 'x=%r' % 'y' }}")
case("float_results", "{{ 1 / 3 }} {{ 2 ** 0.5 }} {{ 10 / 3 * 3 }} {{ 1e308 * 10 }} {{ -1e308 * 10 }} {{ 0.1 * 3 }}")
case("tuple_index_and_items", "{{ (1, 2)[0] }} {{ d.items()|list|first }} {{ (d.items()|list)[1][0] }}", d={"k": "v", "j": "w"})
case("defined_and_truthy", "{{ 'a' if x is defined and x else 'b' }}{{ 'a' if y is defined and y else 'b' }}", x="", y="ok")
case("set_in_nested_blocks", "{% set ns = namespace(out='') %}{% for m in messages %}{% if m.role != 'system' %}{% set ns.out = ns.out ~ m.role[0] %}{% endif %}{% endfor %}{{ ns.out }}",
     messages=MSGS)
case("tojson_unicode_keys", "{{ {'clé': 'välue', 'emoji': '🎉'}|tojson }}")
case("whitespace_realistic", """{%- for m in messages -%}
  {#- a comment line -#}
  {%- if m.role == 'user' %}
    USER: {{ m.content }}
  {%- elif m.role == 'assistant' %}
    BOT: {{ m.content }}
  {% endif %}
{%- endfor %}
""", messages=MSGS)
case("lstrip_after_expression_line", "{{ 'a' }}\n    {% if true %}b{% endif %}\n  {# c #}  d")
case("string_multiplication_in_loop", "{% for i in range(3) %}{{ '-' * loop.index }}|{% endfor %}")
case("undefined_in_string_filters", "[{{ nope|trim }}][{{ nope|upper }}][{{ nope|string }}][{{ nope|default('x')|upper }}]")
case("dict_iteration_order", "{% for k, v in d.items() %}{{ k }}{% endfor %}|{{ d|dictsort|first }}", d={"zeta": 1, "alpha": 2, "mid": 3})
case("none_content_handling", "{% for m in messages %}[{{ m.content if m.content is not none else '' }}]{% endfor %}",
     messages=[{"role": "assistant", "content": None}, {"role": "user", "content": "x"}])
case("content_list_parts", "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content if p.type == 'text' %}{{ p.text }}{% endfor %}{% endif %}|{% endfor %}",
     messages=[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "describe"}]}, {"role": "user", "content": "plain"}])
case("int_overflow_pow", "{{ 10 ** 20 }}", divergence="tide's integers are 64-bit: overflow is an error")
