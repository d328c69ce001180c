// Reasoning with Command A Reasoning's template on the tiny model (scripted output): the thinking block as
// reasoning_content, streamed apart from the answer; thinking on / off through chat_template_kwargs; the
// thinking budget closing the block after N tokens; include_reasoning false hiding it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, post } from './harness.mjs';
import { reasoningTemplate, scriptedProgram } from './agent_models.mjs';

const THOUGHT = 'The user asks for 6 times 7. 6 * 7 = 42, checked twice.';
const SCRIPTS = {
  201: `<|START_THINKING|>${THOUGHT}<|END_THINKING|><|START_RESPONSE|>The answer is 42.<|END_RESPONSE|>`,
};

let server;
let client;
before(async () => {
  server = await startServer([], { model: reasoningTemplate(), program: scriptedProgram(SCRIPTS) });
  client = server.client();
});
after(async () => {
  assert.equal(await server.stop(), 0);
});

const ask = [{ role: 'user', content: 'What is 6 times 7?' }];

test('reasoning is on by default and off through chat_template_kwargs', async () => {
  const on = await post(server.base, '/tokenize', { messages: ask });
  assert.match(on.json.prompt, /## Reasoning/);
  const off = await post(server.base, '/tokenize', { messages: ask, chat_template_kwargs: { reasoning: false } });
  assert.doesNotMatch(off.json.prompt, /## Reasoning/);
});

test('the thinking block is reasoning_content, the response the content, streamed apart', async () => {
  const r = await client.chat.completions.create({ model: server.model, messages: ask, seed: 201, max_tokens: 300 });
  assert.equal(r.choices[0].message.reasoning_content, THOUGHT);
  assert.equal(r.choices[0].message.content, 'The answer is 42.');
  assert.equal(r.choices[0].finish_reason, 'stop');
  let reasoning = '';
  let content = '';
  let reasoningChunks = 0;
  for await (const chunk of await client.chat.completions.create({
    model: server.model, messages: ask, seed: 201, max_tokens: 300, stream: true,
  })) {
    const d = chunk.choices[0].delta;
    // A chunk carries one or the other, in order: all reasoning before any content.
    if (d.reasoning_content) {
      assert.equal(content, '');
      reasoning += d.reasoning_content;
      reasoningChunks += 1;
    }
    content += d.content || '';
  }
  assert.equal(reasoning, THOUGHT);
  assert.equal(content, 'The answer is 42.');
  assert.ok(reasoningChunks > 3, 'the reasoning streams token by token');
  const hidden = await client.chat.completions.create({
    model: server.model, messages: ask, seed: 201, max_tokens: 300, include_reasoning: false,
  });
  assert.equal(hidden.choices[0].message.reasoning_content, undefined);
  assert.equal(hidden.choices[0].message.content, 'The answer is 42.');
});

test('a thinking budget closes the block after that many tokens', async () => {
  const ids = (await post(server.base, '/tokenize', { prompt: THOUGHT, add_special_tokens: false })).json.tokens;
  for (const budget of [0, 5]) {
    const r = await client.chat.completions.create({
      model: server.model, messages: ask, seed: 201, max_tokens: 300, thinking_budget: budget,
    });
    const kept = (await post(server.base, '/detokenize', { tokens: ids.slice(0, budget) })).json.prompt;
    // The budget's tokens of the thought are the reasoning; the closing marker was forced after them.
    assert.equal(r.choices[0].message.reasoning_content ?? '', kept);
    assert.ok(r.choices[0].message.content.endsWith('The answer is 42.'));
  }
  const bad = await post(server.base, '/v1/chat/completions', { messages: ask, thinking_budget: -1 });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.param, 'thinking_budget');
});
