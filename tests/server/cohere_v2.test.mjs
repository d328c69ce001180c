// Cohere's POST /v2/chat on the tiny model with Command R7B's templates (scripted output): tool calls with their
// plan, grounded answers with citations, the response and the stream of typed events in Cohere's shapes, and
// refusals naming the field.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, post } from './harness.mjs';
import { r7bTemplates, scriptedProgram, weatherTool, readEvents } from './agent_models.mjs';

const SCRIPTS = {
  301: '<|START_THINKING|>I will check Paris.<|END_THINKING|><|START_ACTION|>[{"tool_call_id": "0", "tool_name": '
    + '"get_weather", "parameters": {"city": "Paris"}}]<|END_ACTION|>',
  302: '<|START_RESPONSE|>Paris is <co>sunny</co: 0:[0]> today.<|END_RESPONSE|>',
  303: '<|START_RESPONSE|>Emperor penguins are <co>the tallest</co: 0:[0]>.<|END_RESPONSE|>',
};

let server;
before(async () => {
  server = await startServer([], { model: r7bTemplates(), program: scriptedProgram(SCRIPTS) });
});
after(async () => {
  assert.equal(await server.stop(), 0);
});

const ask = [{ role: 'user', content: [{ type: 'text', text: 'Weather in Paris?' }] }];

test('tool calls: tool_plan, tool_calls and finish_reason TOOL_CALL; then the answer grounded on the result', async () => {
  const r = await post(server.base, '/v2/chat', { model: server.model, messages: ask, tools: [weatherTool], seed: 301 });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.finish_reason, 'TOOL_CALL');
  assert.equal(r.json.message.role, 'assistant');
  assert.equal(r.json.message.tool_plan, 'I will check Paris.');
  const call = r.json.message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' });
  assert.ok(r.json.usage.billed_units.input_tokens > 100);
  assert.equal(r.json.usage.tokens.output_tokens, r.json.usage.billed_units.output_tokens);

  const messages = [
    ...ask,
    { role: 'assistant', tool_plan: 'I will check Paris.', tool_calls: [call] },
    { role: 'tool', tool_call_id: call.id, content: [{ type: 'document', document: { data: { sky: 'sunny' } } }] },
  ];
  const answer = await post(server.base, '/v2/chat', { messages, tools: [weatherTool], seed: 302 });
  assert.equal(answer.status, 200, answer.text);
  assert.equal(answer.json.finish_reason, 'COMPLETE');
  assert.deepEqual(answer.json.message.content, [{ type: 'text', text: 'Paris is sunny today.' }]);
  const [citation] = answer.json.message.citations;
  assert.deepEqual([citation.start, citation.end, citation.text, citation.type], [9, 14, 'sunny', 'TEXT_CONTENT']);
  assert.deepEqual(citation.sources, [{ type: 'tool', id: `${call.id}:0`, tool_output: { sky: 'sunny' } }]);
});

test('documents: citations name the documents by id; citation_options OFF keeps the tags', async () => {
  const documents = [{ id: 'penguins', data: { title: 'Penguins', snippet: 'Emperor penguins are the tallest.' } }];
  const r = await post(server.base, '/v2/chat', { messages: ask, documents, seed: 303 });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json.message.content, [{ type: 'text', text: 'Emperor penguins are the tallest.' }]);
  assert.deepEqual(r.json.message.citations[0].sources,
    [{ type: 'document', id: 'penguins', document: { title: 'Penguins', snippet: 'Emperor penguins are the tallest.', id: 'penguins' } }]);
  const off = await post(server.base, '/v2/chat', { messages: ask, documents, seed: 303, citation_options: { mode: 'OFF' } });
  assert.match(off.json.message.content[0].text, /<co>the tallest<\/co: 0:\[0\]>/);
  assert.equal(off.json.message.citations, undefined);
});

test('streaming: typed events in order, ending with message-end', async () => {
  const res = await fetch(`${server.base}/v2/chat`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: ask, tools: [weatherTool], seed: 301, stream: true }),
  });
  assert.equal(res.status, 200);
  const events = await readEvents(res);
  for (const e of events) assert.equal(e.event, e.data.type);
  const types = events.map((e) => e.data.type);
  assert.equal(types[0], 'message-start');
  assert.equal(types.at(-1), 'message-end');
  assert.ok(!types.includes('[DONE]'));
  const plan = events.filter((e) => e.data.type === 'tool-plan-delta').map((e) => e.data.delta.message.tool_plan).join('');
  assert.equal(plan, 'I will check Paris.');
  const start = events.find((e) => e.data.type === 'tool-call-start').data;
  assert.equal(start.index, 0);
  assert.equal(start.delta.message.tool_calls.function.name, 'get_weather');
  const args = events.filter((e) => e.data.type === 'tool-call-delta')
    .map((e) => e.data.delta.message.tool_calls.function.arguments).join('');
  assert.deepEqual(JSON.parse(args), { city: 'Paris' });
  assert.deepEqual(types.slice(-4), ['tool-call-start', 'tool-call-delta', 'tool-call-end', 'message-end']);
  const end = events.at(-1).data.delta;
  assert.equal(end.finish_reason, 'TOOL_CALL');
  assert.ok(end.usage.billed_units.output_tokens > 10);

  const docs = await fetch(`${server.base}/v2/chat`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: ask, documents: ['Emperor penguins are the tallest.'], seed: 303, stream: true }),
  });
  const docEvents = (await readEvents(docs)).map((e) => e.data);
  const text = docEvents.filter((e) => e.type === 'content-delta').map((e) => e.delta.message.content.text).join('');
  assert.equal(text, 'Emperor penguins are the tallest.');
  assert.deepEqual(docEvents.filter((e) => e.type.startsWith('content-') || e.type.startsWith('citation-'))
    .map((e) => e.type).filter((t, i, all) => t !== 'content-delta' || all[i - 1] !== 'content-delta'),
  ['content-start', 'content-delta', 'citation-start', 'citation-end', 'content-delta', 'content-end']);
  const citation = docEvents.find((e) => e.type === 'citation-start').delta.message.citations;
  assert.deepEqual(citation.sources, [{ type: 'document', id: 'doc:0', document: { id: 'doc:0', text: 'Emperor penguins are the tallest.' } }]);
});

test('refusals name the field', async () => {
  const cases = [
    [{ messages: ask, tool_choice: 'SOMETIMES', tools: [weatherTool] }, 'tool_choice'],
    [{ messages: ask, tool_choice: 'REQUIRED' }, 'tool_choice'],
    [{ messages: ask, response_format: { type: 'xml' } }, 'response_format'],
    [{ messages: ask, response_format: { type: 'json_object', json_schema: { type: 'object', not: {} } } }, 'response_format'],
    [{ messages: [{ role: 'robot', content: 'x' }] }, 'messages'],
    [{ messages: ask, citation_options: { mode: 'SOMETIMES' } }, 'citation_options'],
    [{ messages: ask, thinking: { type: 'maybe' } }, 'thinking'],
    [{ messages: ask, documents: [{ id: 'x' }] }, 'documents'],
    [{ messages: ask, k: 501 }, 'k'],
  ];
  for (const [body, param] of cases) {
    const r = await post(server.base, '/v2/chat', body);
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.equal(r.json.error.param, param, JSON.stringify(body));
  }
});
