"""Big-integer cases tools/chat/jinja_cases.py renders (same shape as jinja_case_list.CASES): integers beyond 64
bits given as variables (from JSON, as a request's tools or documents carry them) print, serialize, compare and
test exactly as Python's ints. Arithmetic on them is left out: tide converts them to float there."""

U = 2**64 - 1  # beyond int64, within uint64
B = 2**64 + 1  # beyond uint64
N = -(2**70)
H = 10**400  # beyond a double
NUMS = {"u": U, "b": B, "n": N, "h": H, "b2": 2**64 + 1, "p64": 2**64, "edge": 2**63, "low": -(2**63),
        "below": -(2**63) - 1}

CASES = []


def case(case_name, template, divergence=None, **variables):
    CASES.append((case_name, template, {**NUMS, **variables}, divergence))


case("bigint_print", "{{ u }} {{ b }} {{ n }} {{ edge }} {{ low }} {{ below }}")
case("bigint_print_huge", "{{ h }}")
case("bigint_string_filter", "{{ b|string }}|{{ n|string|length }}|{{ b ~ '!' }}|{{ 'x' ~ u }}")
case("bigint_tojson", "{{ b|tojson }} {{ [u, n, 1, 1.5]|tojson }} {{ {'k': b}|tojson(indent=2) }}")
case("bigint_tojson_key", "{{ {b: 'v', 1: 'w'}|tojson }} {{ {b: 'v'}|tojson(sort_keys=true) }}")
case("bigint_tojson_huge", "{{ [h, -1]|tojson }}")
case("bigint_repr_in_containers", "{{ [b, 'x', n] }} {{ {'k': u} }} {{ (b,) }}")
case("bigint_equality", "{{ b == b2 }} {{ b != b2 }} {{ b == u }} {{ b == 1 }} {{ p64 == 18446744073709551616.0 }} "
     "{{ b == 18446744073709551616.0 }} {{ u == 1.8446744073709552e19 }} {{ edge == 9.223372036854775808e18 }}")
case("bigint_ordering", "{{ b > u }} {{ u > 9223372036854775807 }} {{ n < low }} {{ below < low }} {{ b < 1e300 }} "
     "{{ n > -1e300 }} {{ b > 1.5 }} {{ h > 1e308 }} {{ -h < -1e308 }} {{ b >= b2 }} {{ b <= b2 }}")
case("bigint_sort_and_minmax", "{{ [b, 3, n, 2.5, u, below]|sort }} {{ [b, 3, u]|max }} {{ [n, 3, below]|min }}")
case("bigint_in_and_dict_keys", "{{ b in [1, b2] }} {{ u in [b] }} {{ {b: 'x'}[b2] }} {{ {p64: 'f'}[18446744073709551616.0] }} "
     "{{ [b, b2, u, 1]|unique|list }}")
case("bigint_tests", "{{ b is integer }} {{ b is number }} {{ b is float }} {{ b is odd }} {{ b is even }} "
     "{{ n is even }} {{ u is odd }} {{ h is even }} {{ b is defined }} {{ b is string }}")
case("bigint_negate_abs", "{{ -b }} {{ -n }} {{ n|abs }} {{ b|abs }} {{ -low }} {{ low|abs }} {{ +b }} {{ -(-edge) }}")
case("bigint_int_float_round", "{{ b|int }} {{ b|float }} {{ n|float }} {{ b|round }} {{ u|round(2) }} {{ b|round|int }}")
case("bigint_float_of_huge", "{{ h|float }}")
case("bigint_truthiness", "{{ 'yes' if b else 'no' }} {{ b and 'and' }} {{ not n }}")
case("bigint_percent_and_format", "{{ '%d' % b }} {{ '%s|%r' % (n, u) }} {{ '%+d' % b }} {{ '%i' % n }} "
     "{{ '{}'.format(b) }} {{ '{:d}'.format(n) }} {{ '{0}-{1}'.format(u, h) }}")
case("bigint_percent_float", "{{ '%.3e' % b }} {{ '{:.2f}'.format(u) }}")
case("bigint_in_tools_tojson", "{% for t in tools %}{{ t.function.parameters|tojson }}{% endfor %}",
     tools=[{"type": "function", "function": {"name": "f", "parameters": {"maximum": B, "minimum": N,
                                                                          "default": U, "other": 1.0}}}])
case("bigint_length_error", "{{ b|length }}")
case("bigint_as_index_error", "{{ range(b)|list }}")
