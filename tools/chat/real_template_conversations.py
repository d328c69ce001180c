"""The conversations tools/chat/real_template_cases.py renders with Cohere's real chat templates: (name, variables)
where variables holds what transformers' apply_chat_template passes: messages, tools, documents,
add_generation_prompt and the extra keyword arguments (chat_template_kwargs). Messages, tools and documents are
given as an OpenAI-compatible server (vLLM) hands them to the template: tool-call arguments as dicts, content as
sent (a string, a list of parts, or missing), integers as Python ints of any size."""

BIG_UINT64 = 2**64 - 1  # beyond int64, within uint64
BIG = 2**64 + 1  # beyond uint64
HUGE = 10**400  # beyond a double
NEG_BIG = -(2**70)

# Text with what templates and JSON must carry through unchanged: CJK, emoji (with a ZWJ sequence), quotes,
# backslashes, newlines, tabs, control characters, and code points Python's repr escapes.
UNI = "日本語テキスト 中文 한국어 😀👩‍💻 \"quoted\" 'single' back\\slash\nnew line\ttab \x01 \u2028 \xa0 é"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Gets the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_web",
        "description": "Searches the web and returns snippets.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "max_results": {"type": "integer", "default": 5}},
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}
BIG_TOOL = {
    "type": "function",
    "function": {
        "name": "count_grains",
        "description": "Counts with numbers of any size.",
        "parameters": {
            "type": "object",
            "properties": {
                "n": {
                    "type": "integer",
                    "minimum": NEG_BIG,
                    "maximum": BIG,
                    "default": 2**63,
                    "multipleOf": 10**30,
                    "examples": [2**63 - 1, -(2**63), BIG_UINT64, HUGE, 0, -1, 1.5, 1e100, 0.1, None, True],
                },
            },
            "required": ["n"],
        },
    },
}
UNICODE_TOOL = {
    "type": "function",
    "function": {
        "name": "查询_天气",
        "description": "天気を調べる 🌦️ \"quoted\" back\\slash",
        "parameters": {
            "type": "object",
            "properties": {"城市": {"type": "string", "description": UNI}},
            "required": ["城市"],
        },
    },
}

SYSTEM = {"role": "system", "content": "You are a concise assistant."}
USER = {"role": "user", "content": "What's the weather in Paris?"}


def call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CALL_PARIS = call("call_1", "get_weather", {"city": "Paris", "unit": "celsius"})
CALL_TOKYO = call("call_2", "get_weather", {"city": "Tokyo"})
ASSISTANT_CALL = {"role": "assistant", "tool_calls": [CALL_PARIS]}  # no content key, as vLLM may pass it
ASSISTANT_CALL_NULL = {"role": "assistant", "content": None, "tool_calls": [CALL_PARIS]}
ASSISTANT_CALL_PLAN = {"role": "assistant", "tool_plan": "I will look up the weather in Paris.",
                       "tool_calls": [CALL_PARIS]}
ASSISTANT_TWO_CALLS = {"role": "assistant", "tool_plan": "I will check both cities.",
                       "tool_calls": [CALL_PARIS, CALL_TOKYO]}
TOOL_PARIS = {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 21, \"sky\": \"sunny\"}"}
TOOL_TOKYO = {"role": "tool", "tool_call_id": "call_2", "content": "{\"temperature\": 17}"}
TOOL_PARIS_LIST = {"role": "tool", "tool_call_id": "call_1",
                   "content": [{"type": "text", "text": "21 degrees"}, {"type": "text", "text": "sunny"}]}
TOOL_PARIS_DICT = {"role": "tool", "tool_call_id": "call_1", "content": {"temperature": 21, "count": BIG}}
FINAL = {"role": "assistant", "content": "It is 21 °C and sunny in Paris."}

DOCS_STRINGS = ["Paris is the capital of France.", "東京は日本の首都です。🗼"]
DOCS_OBJECTS = [
    {"id": "doc-1", "title": "Tall buildings", "text": "The Burj Khalifa is 828 m tall.", "year": 2010},
    {"id": "doc-2", "title": "Big numbers", "text": "Counts beyond 64 bits.", "views": BIG, "delta": NEG_BIG,
     "max_u64": BIG_UINT64, "huge": HUGE, "ratio": 0.25},
]
DOCS_UNICODE = [{"id": "文档-1", "title": UNI, "snippet": "😀 " + UNI}]

PARTS_USER = {"role": "user", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}]}
PARTS_SYSTEM = {"role": "system", "content": [{"type": "text", "text": "Be brief."}]}
PARTS_ASSISTANT = {"role": "assistant", "content": [{"type": "text", "text": "Sure."}]}

CONVERSATIONS = []


def conversation(name, messages, tools=None, documents=None, add_generation_prompt=True, **kwargs):
    CONVERSATIONS.append((name, {"messages": messages, "tools": tools, "documents": documents,
                                 "add_generation_prompt": add_generation_prompt, "kwargs": kwargs}))


# --- plain chat ---
conversation("plain", [USER])
conversation("plain_no_generation_prompt", [USER], add_generation_prompt=False)
conversation("system", [SYSTEM, USER])
conversation("multi_turn", [SYSTEM, USER, FINAL, {"role": "user", "content": "And tomorrow?"}])
conversation("multi_turn_no_generation_prompt", [USER, FINAL], add_generation_prompt=False)
conversation("roles_not_alternating", [USER, {"role": "user", "content": "Hello again"}])
conversation("system_only", [SYSTEM])
conversation("chatbot_role", [USER, {"role": "chatbot", "content": "Hi!"}, {"role": "user", "content": "Bye"}])
conversation("uppercase_roles", [{"role": "SYSTEM", "content": "Sys"}, {"role": "User", "content": "Hi"}])
conversation("whitespace_content", [{"role": "user", "content": "  padded \n"}])
conversation("empty_content", [{"role": "user", "content": ""}])
conversation("unicode_chat", [{"role": "system", "content": UNI}, {"role": "user", "content": UNI},
                              {"role": "assistant", "content": UNI}, {"role": "user", "content": "再见 👋"}])

# --- content as a list of parts ---
conversation("parts_user", [PARTS_USER])
conversation("parts_all_roles", [PARTS_SYSTEM, PARTS_USER, PARTS_ASSISTANT, {"role": "user", "content": "ok"}])
conversation("parts_unicode", [{"role": "user", "content": [{"type": "text", "text": UNI}]}])
conversation("parts_with_image", [{"role": "user", "content": [{"type": "text", "text": "Look:"},
                                                               {"type": "image", "data": "<image>"},
                                                               {"type": "text", "text": "What is it?"}]}])

# --- tools ---
conversation("tools", [USER], tools=[WEATHER_TOOL, SEARCH_TOOL])
conversation("tools_system", [SYSTEM, USER], tools=[WEATHER_TOOL])
conversation("tools_empty_list", [USER], tools=[])
conversation("tool_call_no_content", [USER, ASSISTANT_CALL], tools=[WEATHER_TOOL])
conversation("tool_call_null_content", [USER, ASSISTANT_CALL_NULL], tools=[WEATHER_TOOL])
conversation("tool_call_with_plan", [USER, ASSISTANT_CALL_PLAN], tools=[WEATHER_TOOL])
conversation("tool_result_string", [USER, ASSISTANT_CALL_PLAN, TOOL_PARIS], tools=[WEATHER_TOOL])
conversation("tool_result_list", [USER, ASSISTANT_CALL_PLAN, TOOL_PARIS_LIST], tools=[WEATHER_TOOL])
conversation("tool_result_dict", [USER, ASSISTANT_CALL_PLAN, TOOL_PARIS_DICT], tools=[WEATHER_TOOL])
conversation("tool_results_in_a_row", [SYSTEM, USER, ASSISTANT_TWO_CALLS, TOOL_PARIS, TOOL_TOKYO, FINAL],
             tools=[WEATHER_TOOL])
conversation("tool_results_in_a_row_list", [USER, ASSISTANT_TWO_CALLS, TOOL_PARIS_LIST, TOOL_TOKYO],
             tools=[WEATHER_TOOL])
conversation("tool_round_trip_then_user", [USER, ASSISTANT_CALL_PLAN, TOOL_PARIS, FINAL,
                                           {"role": "user", "content": "Thanks!"}], tools=[WEATHER_TOOL, SEARCH_TOOL])
conversation("tool_round_trip_no_generation_prompt", [USER, ASSISTANT_CALL_PLAN, TOOL_PARIS, FINAL],
             tools=[WEATHER_TOOL], add_generation_prompt=False)
conversation("tool_call_unknown_id", [USER, ASSISTANT_CALL_PLAN,
                                      {"role": "tool", "tool_call_id": "nope", "content": "x"}], tools=[WEATHER_TOOL])
conversation("tools_big_integers", [USER, {"role": "assistant", "tool_plan": "Count.", "tool_calls": [
    call("call_9", "count_grains", {"n": BIG, "m": NEG_BIG, "u": BIG_UINT64, "h": HUGE, "i": 2**63 - 1})]},
    {"role": "tool", "tool_call_id": "call_9", "content": [{"count": BIG}, {"count": HUGE}]}], tools=[BIG_TOOL])
conversation("tools_unicode", [{"role": "system", "content": UNI}, {"role": "user", "content": UNI},
                               {"role": "assistant", "tool_plan": UNI, "tool_calls": [
                                   call("呼叫-1", "查询_天气", {"城市": UNI, "emoji": "🌧️"})]},
                               {"role": "tool", "tool_call_id": "呼叫-1", "content": UNI}], tools=[UNICODE_TOOL])

# --- documents ---
conversation("documents_strings", [USER], documents=DOCS_STRINGS)
conversation("documents_objects", [SYSTEM, USER], documents=DOCS_OBJECTS)
conversation("documents_unicode", [{"role": "user", "content": UNI}], documents=DOCS_UNICODE)
conversation("documents_multi_turn", [USER, FINAL, {"role": "user", "content": "More?"}], documents=DOCS_STRINGS)
conversation("documents_and_tools", [USER], tools=[SEARCH_TOOL], documents=DOCS_OBJECTS)
conversation("documents_and_tool_round_trip", [USER, ASSISTANT_CALL_PLAN, TOOL_PARIS, FINAL], tools=[WEATHER_TOOL],
             documents=DOCS_STRINGS)
conversation("documents_empty_list", [USER], documents=[])
conversation("documents_no_generation_prompt", [USER, FINAL], documents=DOCS_STRINGS, add_generation_prompt=False)

# --- keyword arguments: citations, safety modes, reasoning, response formats ---
conversation("citations", [USER], documents=DOCS_STRINGS, enable_citations=True)
conversation("citations_tools", [USER], tools=[WEATHER_TOOL], enable_citations=True)
conversation("safety_strict", [USER], safety_mode="STRICT")
conversation("safety_contextual_lower", [USER], safety_mode="contextual")
conversation("safety_none", [SYSTEM, USER], safety_mode="NONE")
conversation("reasoning_off", [USER], reasoning=False)
conversation("reasoning_on", [USER], reasoning=True)
conversation("reasoning_off_tools", [USER, ASSISTANT_CALL_PLAN, TOOL_PARIS], tools=[WEATHER_TOOL], reasoning=False)
conversation("skip_thinking", [USER], reasoning=True, skip_thinking=True)
conversation("thinking_history", [USER, {"role": "assistant", "thinking": "The user greets me.", "content": "Hi!"},
                                  {"role": "user", "content": "Again"}])
conversation("thinking_history_skipped", [USER, {"role": "assistant", "thinking": "Hidden.", "content": "Hi!"},
                                          {"role": "user", "content": "Again"}], skip_thinking=True)
conversation("thinking_in_parts", [USER, {"role": "assistant", "content": [
    {"type": "text", "text": "Hello.", "thinking": "Think in parts."}]}, {"role": "user", "content": "Next"}])
conversation("thinking_tool_call", [USER, {"role": "assistant", "thinking": "Need weather.",
                                           "tool_calls": [CALL_PARIS]}, TOOL_PARIS], tools=[WEATHER_TOOL])
conversation("regen_tool_call_ids_off", [USER, ASSISTANT_TWO_CALLS, TOOL_PARIS, TOOL_TOKYO], tools=[WEATHER_TOOL],
             regen_tool_call_ids=False)
conversation("response_format_json_object", [USER], response_format={"type": "json_object"})
conversation("response_format_json_schema", [SYSTEM, USER], response_format={
    "type": "json_schema",
    "json_schema": {"name": "answer", "schema": {"type": "object", "properties": {
        "city": {"type": "string", "description": "城市 ✓ 'q'"}, "n": {"type": "integer", "maximum": BIG}},
        "required": ["city"]}}})
conversation("response_format_schema_key", [USER], response_format={"type": "json_schema", "schema": {
    "type": "array", "items": {"type": "number", "minimum": NEG_BIG}}})
conversation("response_format_text", [USER], response_format={"type": "text"})
conversation("everything", [PARTS_SYSTEM, USER, ASSISTANT_TWO_CALLS, TOOL_PARIS_LIST, TOOL_TOKYO, FINAL,
                            {"role": "user", "content": UNI}],
             tools=[WEATHER_TOOL, BIG_TOOL, UNICODE_TOOL], documents=DOCS_OBJECTS + DOCS_UNICODE,
             enable_citations=True, safety_mode="STRICT", reasoning=False,
             response_format={"type": "json_object"})

# --- edge cases ---
conversation("no_messages", [])
conversation("missing_content", [{"role": "user"}])
conversation("null_content", [{"role": "user", "content": None}])
conversation("integer_content", [{"role": "user", "content": BIG}])
