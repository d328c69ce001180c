// Tool calling, reasoning and citations through the openai client: the tiny model with Command R7B's named
// templates, its output scripted per seed (agent_models.mjs), parsed into tool_calls, reasoning_content and
// citations, streamed and not; the round trip of tool results; the template chosen by the request.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, post } from './harness.mjs';
import { r7bTemplates, scriptedProgram, weatherTool } from './agent_models.mjs';

const PLAN = 'I will look up the weather in Paris.';
const ARGS = '{"city": "Paris", "days": 3, "big": 123456789012345678901234567890}';
const SCRIPTS = {
  101: `<|START_THINKING|>${PLAN}<|END_THINKING|><|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": ${ARGS}}\n]<|END_ACTION|>`,
  102: '<|START_RESPONSE|>It is sunny in Paris, 24 °C.<|END_RESPONSE|>',
  103: '<|START_THINKING|>Two cities.<|END_THINKING|><|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", '
    + '"parameters": {"city": "Paris"}}, {"tool_call_id": "1", "tool_name": "get_weather", "parameters": {"city": "Oslo"}}]<|END_ACTION|>',
  104: '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Par<|END_ACTION|>',
  105: '<|START_RESPONSE|>The sky is <co>blue</co: 0:[0]> and the grass is <co>green</co: 0:[1]>.<|END_RESPONSE|>',
};

let server;
let client;
before(async () => {
  server = await startServer([], { model: r7bTemplates(), program: scriptedProgram(SCRIPTS) });
  client = server.client();
});
after(async () => {
  assert.equal(await server.stop(), 0);
});

const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];

test('a request with tools renders the tool_use template, with big integers exact', async () => {
  const body = `{"messages": ${JSON.stringify(ask)}, "tools": [${JSON.stringify(weatherTool).replace(
    '"type":"integer"', '"type":"integer","maximum":123456789012345678901234567890')}]}`;
  const withTools = await post(server.base, '/tokenize', body);
  assert.equal(withTools.status, 200, withTools.text);
  assert.match(withTools.json.prompt, /## Available Tools/);
  assert.match(withTools.json.prompt, /"name": "get_weather"/);
  assert.match(withTools.json.prompt, /"maximum": 123456789012345678901234567890/);
  const plain = await post(server.base, '/tokenize', { messages: ask });
  assert.doesNotMatch(plain.json.prompt, /Available Tools/);
  assert.ok(withTools.json.count > plain.json.count + 100);
  // tool_choice "none": the tools are not offered.
  const none = await post(server.base, '/tokenize', { messages: ask, tools: [weatherTool], tool_choice: 'none' });
  assert.equal(none.json.prompt, plain.json.prompt);
});

test('a Cohere action becomes tool_calls with the plan in reasoning_content', async () => {
  const r = await client.chat.completions.create({
    model: server.model, messages: ask, tools: [weatherTool], seed: 101, max_tokens: 200,
  });
  const choice = r.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.content, null);
  assert.equal(choice.message.reasoning_content, PLAN);
  assert.equal(choice.message.tool_calls.length, 1);
  const call = choice.message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  assert.match(call.id, /^call_[0-9a-f]{24}$/);
  // The arguments are the model's JSON text, big integer digits included.
  assert.equal(call.function.arguments, ARGS);
});

test('streamed: reasoning deltas, then tool_calls deltas by index, and finish_reason tool_calls', async () => {
  const stream = await client.chat.completions.create({
    model: server.model, messages: ask, tools: [weatherTool], seed: 103, max_tokens: 200, stream: true,
  });
  let reasoning = '';
  let content = '';
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    const d = chunk.choices[0].delta;
    reasoning += d.reasoning_content || '';
    content += d.content || '';
    for (const tc of d.tool_calls || []) {
      calls[tc.index] ??= { id: '', name: '', arguments: '' };
      calls[tc.index].id += tc.id || '';
      calls[tc.index].name += tc.function?.name || '';
      calls[tc.index].arguments += tc.function?.arguments || '';
    }
    finish = chunk.choices[0].finish_reason || finish;
  }
  assert.equal(reasoning, 'Two cities.');
  assert.equal(content, '');
  assert.equal(finish, 'tool_calls');
  assert.deepEqual(calls.map((c) => [c.name, JSON.parse(c.arguments)]),
    [['get_weather', { city: 'Paris' }], ['get_weather', { city: 'Oslo' }]]);
  assert.notEqual(calls[0].id, calls[1].id);
});

test('the round trip: assistant tool_calls and tool results render, and the answer is clean text', async () => {
  const first = await client.chat.completions.create({
    model: server.model, messages: ask, tools: [weatherTool], seed: 101, max_tokens: 200,
  });
  const call = first.choices[0].message.tool_calls[0];
  const messages = [
    ...ask,
    { role: 'assistant', tool_calls: [call] },  // no content key: the template must not print "None"
    { role: 'tool', tool_call_id: call.id, content: '{"temperature": 24, "sky": "sunny"}' },
  ];
  const rendered = await post(server.base, '/tokenize', { messages, tools: [weatherTool] });
  assert.equal(rendered.status, 200, rendered.text);
  assert.match(rendered.json.prompt, /<\|START_ACTION\|>\[\s*\{"tool_call_id": "0", "tool_name": "get_weather", "parameters": \{"city": "Paris"/);
  assert.match(rendered.json.prompt, /<\|START_TOOL_RESULT\|>/);
  assert.doesNotMatch(rendered.json.prompt, /None/);
  const answer = await client.chat.completions.create({
    model: server.model, messages, tools: [weatherTool], seed: 102, max_tokens: 100,
  });
  assert.equal(answer.choices[0].message.content, 'It is sunny in Paris, 24 °C.');
  assert.equal(answer.choices[0].finish_reason, 'stop');
  assert.equal(answer.choices[0].message.tool_calls, undefined);
});

test('a truncated action stays text, never an error', async () => {
  const r = await client.chat.completions.create({
    model: server.model, messages: ask, tools: [weatherTool], seed: 104, max_tokens: 200,
  });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].message.tool_calls, undefined);
  assert.match(r.choices[0].message.content, /"city": "Par/);
});

test('without tools, an action is not parsed as a call', async () => {
  const r = await client.chat.completions.create({ model: server.model, messages: ask, seed: 101, max_tokens: 200 });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].message.tool_calls, undefined);
  assert.match(r.choices[0].message.content, /get_weather/);
});

test('grounded answers: citations with their documents, tags removed from the text', async () => {
  const documents = [{ id: 'sky', text: 'The sky is blue.' }, { text: 'Grass is green.' }];
  const rendered = await post(server.base, '/tokenize', { messages: ask, documents });
  assert.match(rendered.json.prompt, /The sky is blue\./);  // documents without tools: the rag template
  for (const stream of [false, true]) {
    const body = {
      model: server.model, messages: ask, documents, seed: 105, max_tokens: 200, stream,
      chat_template_kwargs: { enable_citations: true },
    };
    let content = '';
    let citations = [];
    if (!stream) {
      const r = await client.chat.completions.create(body);
      content = r.choices[0].message.content;
      citations = r.choices[0].message.citations;
    } else {
      for await (const chunk of await client.chat.completions.create(body)) {
        content += chunk.choices[0].delta.content || '';
        citations = citations.concat(chunk.choices[0].delta.citations || []);
      }
    }
    assert.equal(content, 'The sky is blue and the grass is green.');
    assert.deepEqual(citations.map((c) => [c.start, c.end, c.text, c.type]),
      [[11, 15, 'blue', 'TEXT_CONTENT'], [33, 38, 'green', 'TEXT_CONTENT']]);
    assert.deepEqual(citations[0].sources, [{ type: 'document', id: 'sky', document: documents[0] }]);
    assert.deepEqual(citations[1].sources, [{ type: 'document', id: 'doc:1', document: documents[1] }]);
  }
  // Not asked for: the tags are the model's text.
  const raw = await client.chat.completions.create({ model: server.model, messages: ask, documents, seed: 105, max_tokens: 200 });
  assert.match(raw.choices[0].message.content, /<co>blue<\/co: 0:\[0\]>/);
});

test('the template can be chosen per request; unknown template and tool names are refused', async () => {
  const rag = await post(server.base, '/tokenize', { messages: ask, chat_template: 'rag' });
  assert.equal(rag.status, 200, rag.text);
  const unknown = await post(server.base, '/tokenize', { messages: ask, chat_template: 'nope' });
  assert.equal(unknown.status, 400);
  assert.match(unknown.json.error.message, /default, rag, tool_use/);
  const jinja = await post(server.base, '/tokenize', { messages: ask, chat_template: '{{ messages[0].content }}' });
  assert.equal(jinja.status, 400);
  assert.match(jinja.json.error.message, /--trust-request-chat-template/);
  const unknownTool = await post(server.base, '/v1/chat/completions', {
    messages: ask, tools: [weatherTool], tool_choice: { type: 'function', function: { name: 'nope' } },
  });
  assert.equal(unknownTool.status, 400);
  assert.equal(unknownTool.json.error.param, 'tool_choice');
});
