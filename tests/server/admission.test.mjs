// Admission control and route protection: past --max-pending-samples a generation request gets 429 with
// Retry-After (and is accepted again once the load is gone); --protect-metrics puts /metrics behind the key.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, post, waitForIdle } from './harness.mjs';

let server;
const auth = { Authorization: 'Bearer k' };
before(async () => {
  server = await startServer(['--max-pending-samples', '4', '--api-key', 'k', '--protect-metrics']);
});
after(async () => {
  assert.equal(await server.stop(), 0);
});

test('--protect-metrics: /metrics needs the key, /health does not', async () => {
  assert.equal((await fetch(`${server.base}/metrics`)).status, 401);
  assert.equal((await fetch(`${server.base}/metrics`, { headers: auth })).status, 200);
  assert.equal((await fetch(`${server.base}/health`)).status, 200);
});

test('beyond --max-pending-samples a request gets 429 with Retry-After, and is served once the load is gone', async () => {
  const client = server.client({ apiKey: 'k' });
  const controller = new AbortController();
  const streams = [];
  for (let i = 0; i < 2; ++i) {
    const stream = await client.completions.create({
      model: server.model, prompt: `Busy ${i}`, max_tokens: 8000, ignore_eos: true, n: 2, temperature: 0.5, stream: true,
    }, { signal: controller.signal });
    const it = stream[Symbol.asyncIterator]();
    await it.next();
    streams.push(it);
  }
  const body = { model: server.model, prompt: 'One more', max_tokens: 2 };
  const refused = await fetch(`${server.base}/v1/completions`, {
    method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  assert.equal(refused.status, 429);
  assert.equal(refused.headers.get('retry-after'), '1');
  const error = (await refused.json()).error;
  assert.equal(error.type, 'rate_limit_error');
  assert.match(error.message, /4 samples are waiting or running \(at most 4\)/);
  controller.abort();
  for (const it of streams) await it.next().catch(() => {});
  await waitForIdle(server.base, 30000, auth);
  const ok = await post(server.base, '/v1/completions', body, auth);
  assert.equal(ok.status, 200, ok.text);
});
