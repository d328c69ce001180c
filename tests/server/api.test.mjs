// The endpoints through the official openai client: completions (every prompt shape), chat, streaming with
// usage, greedy output against the golden reference, and the prefix cache seen through cached_tokens.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, golden, post, metricValues } from './harness.mjs';

let server;
let client;
before(async () => {
  server = await startServer();
  client = server.client();
});
after(async () => {
  assert.equal(await server.stop(), 0);
});

// First in the file, so the cache holds nothing else: A, then B sharing 49 tokens with it.
test('prefix caching: B after A reuses whole blocks and matches the golden B', async () => {
  const c = golden.prefix_sharing[1];
  const a = await client.completions.create({ model: server.model, prompt: c.a_ids, max_tokens: 2, temperature: 0 });
  assert.equal(a.usage.prompt_tokens_details.cached_tokens, 0);
  const b = await client.completions.create({
    model: server.model, prompt: c.b_ids, max_tokens: c.b_greedy_ids.length, temperature: 0, ignore_eos: true,
    logprobs: 0, return_tokens_as_token_ids: true,
  });
  assert.equal(b.usage.prompt_tokens_details.cached_tokens, Math.floor(c.shared_prefix / 16) * 16);
  assert.deepEqual(b.choices[0].logprobs.tokens.map((t) => Number(t.slice('token_id:'.length))), c.b_greedy_ids);
});

test('greedy completions equal the golden reference', async () => {
  for (const g of golden.generate) {
    const r = await client.completions.create({
      model: server.model, prompt: g.prompt_ids, max_tokens: g.greedy_ids.length, temperature: 0, ignore_eos: true,
      logprobs: 0, return_tokens_as_token_ids: true,
    });
    const ids = r.choices[0].logprobs.tokens.map((t) => Number(t.slice('token_id:'.length)));
    assert.deepEqual(ids, g.greedy_ids);
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, g.greedy_ids.length);
    assert.equal(r.usage.prompt_tokens, g.prompt_ids.length);
    const text = await post(server.base, '/detokenize', { tokens: g.greedy_ids });
    assert.equal(text.status, 200);
  }
});

test('completions accept a string, strings, ids and lists of ids', async () => {
  const one = await client.completions.create({ model: server.model, prompt: 'Hello', max_tokens: 4, temperature: 0 });
  assert.equal(one.object, 'text_completion');
  assert.equal(one.choices.length, 1);
  assert.equal(typeof one.choices[0].text, 'string');
  assert.equal(one.usage.completion_tokens, 4);
  assert.equal(one.usage.total_tokens, one.usage.prompt_tokens + 4);
  assert.equal(typeof one.usage.prompt_tokens_details.cached_tokens, 'number');

  const many = await client.completions.create({ model: server.model, prompt: ['Hello', 'def f(x):'], max_tokens: 3, temperature: 0 });
  assert.deepEqual(many.choices.map((c) => c.index), [0, 1]);
  assert.equal(many.choices[0].text, one.choices[0].text.slice(0, many.choices[0].text.length));

  const tok = await post(server.base, '/tokenize', { prompt: 'Hello' });
  assert.equal(tok.status, 200);
  const ids = await client.completions.create({ model: server.model, prompt: tok.json.tokens, max_tokens: 4, temperature: 0 });
  assert.equal(ids.choices[0].text, one.choices[0].text);
  const lists = await client.completions.create({ model: server.model, prompt: [tok.json.tokens, [5, 6]], max_tokens: 4, temperature: 0, n: 2 });
  assert.equal(lists.choices.length, 4);
  assert.equal(lists.choices[0].text, one.choices[0].text);
  assert.equal(lists.choices[1].text, one.choices[0].text);  // greedy: both samples agree
});

test('completions: OpenAI defaults (16 tokens), stop strings, echo, seeds', async () => {
  const r = await client.completions.create({ model: server.model, prompt: [5, 6, 7], ignore_eos: true, seed: 3 });
  assert.equal(r.usage.completion_tokens, 16);
  const again = await client.completions.create({ model: server.model, prompt: [5, 6, 7], ignore_eos: true, seed: 3 });
  assert.equal(again.choices[0].text, r.choices[0].text);
  const echo = await client.completions.create({ model: server.model, prompt: 'Hello', max_tokens: 2, temperature: 0, echo: true });
  assert.ok(echo.choices[0].text.startsWith('Hello'));
});

test('streaming completions with include_usage', async () => {
  const full = await client.completions.create({ model: server.model, prompt: 'Hello', max_tokens: 12, temperature: 0, ignore_eos: true });
  const stream = await client.completions.create({
    model: server.model, prompt: 'Hello', max_tokens: 12, temperature: 0, ignore_eos: true, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, full.choices[0].text);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 12);
  assert.equal(usage.prompt_tokens, full.usage.prompt_tokens);
  assert.equal(typeof usage.prompt_tokens_details.cached_tokens, 'number');
});

test('chat completions render the template and stream the same text', async () => {
  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello there' }];
  const r = await client.chat.completions.create({ model: server.model, messages, max_tokens: 8, temperature: 0, ignore_eos: true });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.usage.completion_tokens, 8);
  const tok = await post(server.base, '/tokenize', { messages });
  assert.equal(tok.status, 200);
  assert.equal(r.usage.prompt_tokens, tok.json.count);
  // The same prompt ids through completions give the same greedy text.
  const same = await client.completions.create({ model: server.model, prompt: tok.json.tokens, max_tokens: 8, temperature: 0, ignore_eos: true });
  assert.equal(r.choices[0].message.content, same.choices[0].text);

  const stream = await client.chat.completions.create({
    model: server.model, messages, max_tokens: 8, temperature: 0, ignore_eos: true, stream: true,
    stream_options: { include_usage: true },
  });
  let content = '';
  let role = null;
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      content += c.delta.content ?? '';
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(content, r.choices[0].message.content);
  assert.equal(usage.completion_tokens, 8);
  // The system prompt is cached now.
  assert.ok(usage.prompt_tokens_details.cached_tokens >= 0);

  const lp = await client.chat.completions.create({ model: server.model, messages, max_tokens: 3, temperature: 0, logprobs: true, top_logprobs: 2 });
  assert.equal(lp.choices[0].logprobs.content.length, 3);
  assert.equal(lp.choices[0].logprobs.content[0].top_logprobs.length, 2);
});

test('a template error (roles not alternating) is a 400', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: server.model, messages: [{ role: 'assistant', content: 'x' }], max_tokens: 2 }),
    (e) => e.status === 400 && /alternate/.test(e.message),
  );
});

test('models, version, tokenize, detokenize, metrics', async () => {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].id, server.model);
  assert.equal(models.data[0].max_model_len, 8192);
  const version = await (await fetch(`${server.base}/version`)).json();
  assert.equal(typeof version.version, 'string');
  const tok = await post(server.base, '/tokenize', { prompt: 'Hello world' });
  assert.equal(tok.json.count, tok.json.tokens.length);
  const detok = await post(server.base, '/detokenize', { tokens: tok.json.tokens.slice(1) });
  assert.equal(detok.json.prompt, 'Hello world');
  const metrics = await (await fetch(`${server.base}/metrics`)).text();
  for (const name of ['tide_num_requests_running', 'tide_num_requests_waiting', 'tide_kv_cache_usage_ratio',
    'tide_prefix_cache_queries_total', 'tide_prefix_cache_hits_total', 'tide_prompt_tokens_total',
    'tide_generation_tokens_total', 'tide_num_preemptions_total']) {
    assert.ok(Object.keys(metricValues(metrics, name)).length > 0, name);
  }
  for (const h of ['tide_time_to_first_token_seconds', 'tide_inter_token_latency_seconds', 'tide_e2e_request_latency_seconds']) {
    assert.ok(metricValues(metrics, `${h}_count`)[''] > 0, h);
  }
  // Per layer group, labelled with the group's index and window; the arena as a whole has no label.
  const globalHits = Object.entries(metricValues(metrics, 'tide_prefix_cache_hits_total'))
    .filter(([labels]) => labels.includes('window="global"'));
  assert.ok(globalHits.length > 0 && globalHits.every(([, v]) => v > 0));
  assert.ok(metricValues(metrics, 'tide_kv_cache_blocks_capacity')[''] > 0);
});
