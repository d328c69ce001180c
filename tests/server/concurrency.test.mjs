// 64 concurrent streaming clients all complete; clients that go away mid-stream (streaming or not) cancel their
// requests, and the KV blocks come back (seen in /metrics).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
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

async function metrics() {
  return (await fetch(`${server.base}/metrics`)).text();
}


test('64 concurrent streaming clients all complete', async () => {
  const one = async (i) => {
    const stream = await client.completions.create({
      model: server.model, prompt: `Request ${i}:`, max_tokens: 24, temperature: 0.8, seed: i, ignore_eos: true,
      stream: true, stream_options: { include_usage: true },
    });
    let tokens = 0;
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) if (c.finish_reason) finish = c.finish_reason;
      tokens += 1;
    }
    return { finish, usage, tokens };
  };
  const results = await Promise.all(Array.from({ length: 64 }, (_, i) => one(i)));
  for (const r of results) {
    assert.equal(r.finish, 'length');
    assert.equal(r.usage.completion_tokens, 24);
  }
  await waitForIdle(server.base);
});

test('clients killed mid-stream cancel their requests and free their blocks', async () => {
  const before = metricValues(await metrics(), 'tide_request_success_total')['{finished_reason="abort"}'] ?? 0;
  const killed = 8;
  const streams = await Promise.all(Array.from({ length: killed }, (_, i) => client.completions.create({
    model: server.model, prompt: `Long ${i}`, max_tokens: 8000, temperature: 0, ignore_eos: true, stream: true,
  })));
  // Read a few chunks of each, then drop the connection.
  await Promise.all(streams.map(async (stream) => {
    let n = 0;
    for await (const chunk of stream) {
      if (++n === 3) break;  // breaking out of the iterator aborts the request
    }
  }));
  // A non-streaming client killed while it waits (its socket closed).
  await new Promise((resolve) => {
    const req = http.request(`${server.base}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' } });
    req.on('error', () => resolve());
    req.end(JSON.stringify({ model: server.model, prompt: 'Patience', max_tokens: 8000, temperature: 0, ignore_eos: true }));
    setTimeout(() => {
      req.destroy();
      resolve();
    }, 1500);
  });

  const text = await waitForIdle(server.base);
  const aborted = metricValues(text, 'tide_request_success_total')['{finished_reason="abort"}'] ?? 0;
  assert.equal(aborted - before, killed + 1);
  // And the server still answers.
  const ok = await post(server.base, '/v1/completions', { prompt: 'Hello', max_tokens: 2 });
  assert.equal(ok.status, 200);
});
