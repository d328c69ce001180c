// One request can never hurt another: sampling values that are fine as JSON numbers but 0 or infinite in the
// f32 the sample op computes with are refused with 400 naming the parameter, while 16 streams running beside
// them finish with the text they give alone; such refusals are not counted as finished requests in /metrics;
// a request asking for more samples (prompts x n) than the server allows is refused naming `n`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, post, metricValues, waitForIdle } from './harness.mjs';

let server;
let client;
before(async () => {
  server = await startServer();
  client = server.client();
});
after(async () => {
  assert.equal(await server.stop(), 0);
});

const poisons = [
  ['repetition_penalty', { repetition_penalty: 1e308 }],
  ['repetition_penalty', { repetition_penalty: 3.5e38 }],
  ['repetition_penalty', { repetition_penalty: 1e-46 }],
  ['top_p', { top_p: 1e-50 }],
  ['temperature', { temperature: 1e-50 }],
];

function streamRequest(i) {
  return {
    model: server.model, prompt: `Isolated ${i}:`, max_tokens: 12, temperature: 0.8, seed: 1000 + i, ignore_eos: true,
  };
}

async function streamed(i) {
  const stream = await client.completions.create({ ...streamRequest(i), stream: true });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish };
}

async function abortCount() {
  const text = await (await fetch(`${server.base}/metrics`)).text();
  return metricValues(text, 'tide_request_success_total')['{finished_reason="abort"}'] ?? 0;
}

test('poisoned sampling values get 400 while 16 concurrent streams finish with their own text', async () => {
  // Each stream's text alone, one at a time.
  const alone = [];
  for (let i = 0; i < 16; ++i) {
    const r = await client.completions.create(streamRequest(i));
    assert.equal(r.choices[0].finish_reason, 'length');
    alone.push(r.choices[0].text);
  }
  const abortsBefore = await abortCount();
  const poisoned = poisons.map(async ([param, values]) => {
    const r = await post(server.base, '/v1/completions', {
      model: server.model, prompt: 'Poison', max_tokens: 12, stream: true, ...values,
    });
    return { param, status: r.status, error: r.json?.error };
  });
  const results = await Promise.all(Array.from({ length: 16 }, (_, i) => streamed(i)));
  for (const [i, r] of results.entries()) {
    assert.equal(r.finish, 'length', `stream ${i}`);
    assert.equal(r.text, alone[i], `stream ${i}`);
  }
  for (const p of await Promise.all(poisoned)) {
    assert.equal(p.status, 400, p.param);
    assert.equal(p.error.param, p.param);
    assert.match(p.error.message, new RegExp(`${p.param}.*must be`));
  }
  await waitForIdle(server.base);
  assert.equal(await abortCount(), abortsBefore);  // refused requests never ran, so none ended
});

test('the chat endpoint checks the same bounds', async () => {
  const r = await post(server.base, '/v1/chat/completions', {
    model: server.model, messages: [{ role: 'user', content: 'hi' }], repetition_penalty: 1e308,
  });
  // The body's checks come before the chat template's.
  assert.equal(r.status, 400);
  assert.equal(r.json.error.param, 'repetition_penalty');
});

test('a request for more samples than the server allows is refused naming n', async () => {
  const prompts = Array.from({ length: 400 }, (_, i) => `p${i}`);
  const r = await post(server.base, '/v1/completions', { model: server.model, prompt: prompts, n: 128, max_tokens: 1 });
  assert.equal(r.status, 400);
  assert.equal(r.json.error.param, 'n');
  assert.match(r.json.error.message, /51200 samples.*at most 256/);
  // At the limit: 2 prompts x n = 128 run.
  const ok = await client.completions.create({ model: server.model, prompt: ['a', 'b'], n: 128, max_tokens: 1 });
  assert.equal(ok.choices.length, 256);
  await waitForIdle(server.base);
});
