// The server under more load than its KV cache holds: an arena of 64 blocks (about four of these requests at
// once) and 64 concurrent streams. Every request finishes with "length" and exactly the ids it gets alone
// (requests wait for room or are preempted and recomputed, never failed); clients that leave mid-stream do not
// disturb the others; a request that could never fit is refused with 400 at once; the blocks come back.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, post, metricValues, waitForIdle } from './harness.mjs';

const kRequests = 64;
const kMaxTokens = 40;

let server;
let client;
before(async () => {
  // cohere2-tiny on the CPU: a block of 2 layers x 16 positions in f32 is 16 KiB, so 1 MiB holds 64 blocks.
  server = await startServer(['--kv-cache-memory', '1MiB']);
  client = server.client();
});
after(async () => {
  assert.equal(await server.stop(), 0);
});

async function metrics() {
  return (await fetch(`${server.base}/metrics`)).text();
}


// Streams request i (greedy, ignore_eos) and returns its token ids and finish reason; `stopAfter` chunks, the
// client leaves.
async function run(i, stopAfter = Infinity) {
  const stream = await client.completions.create({
    model: server.model, prompt: `Request number ${i} says:`, max_tokens: kMaxTokens, temperature: 0,
    ignore_eos: true, logprobs: 0, return_tokens_as_token_ids: true, stream: true,
  });
  const ids = [];
  let finish = null;
  let chunks = 0;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      if (c.logprobs) ids.push(...c.logprobs.tokens.map((t) => Number(t.slice('token_id:'.length))));
      if (c.finish_reason) finish = c.finish_reason;
    }
    if (++chunks === stopAfter) break;  // leaving the iterator closes the connection
  }
  return { ids, finish };
}

let alone;

test('each request alone', async () => {
  alone = [];
  for (let i = 0; i < kRequests; ++i) alone.push(await run(i));
  for (const r of alone) {
    assert.equal(r.finish, 'length');
    assert.equal(r.ids.length, kMaxTokens);
  }
  await waitForIdle(server.base);
});

test('64 concurrent streams in a cache that holds a few: all finish with their own ids', async () => {
  const preemptionsBefore = metricValues(await metrics(), 'tide_num_preemptions_total')[''];
  const results = await Promise.all(Array.from({ length: kRequests }, (_, i) => run(i)));
  for (let i = 0; i < kRequests; ++i) {
    assert.equal(results[i].finish, 'length', `request ${i}`);
    assert.deepEqual(results[i].ids, alone[i].ids, `request ${i}`);
  }
  const text = await waitForIdle(server.base);
  assert.ok(metricValues(text, 'tide_num_preemptions_total')[''] > preemptionsBefore, 'no preemption: no pressure');
  assert.equal(metricValues(text, 'tide_request_success_total')['{finished_reason="error"}'] ?? 0, 0);
});

test('half of the clients leave mid-stream; the others are unaffected', async () => {
  const results = await Promise.all(Array.from({ length: kRequests }, (_, i) => run(i, i % 2 === 0 ? 3 : Infinity)));
  for (let i = 1; i < kRequests; i += 2) {
    assert.equal(results[i].finish, 'length', `request ${i}`);
    assert.deepEqual(results[i].ids, alone[i].ids, `request ${i}`);
  }
  await waitForIdle(server.base);
});

test('a request that could never fit is refused at once; the running ones go on', async () => {
  const running = Array.from({ length: 4 }, (_, i) => run(i));
  const big = await post(server.base, '/v1/completions', { prompt: 'Hello', max_tokens: 3000, ignore_eos: true });
  assert.equal(big.status, 400);
  assert.equal(big.json.error.type, 'invalid_request_error');
  assert.match(big.json.error.message, /KV blocks/);
  for (const [i, r] of (await Promise.all(running)).entries()) {
    assert.equal(r.finish, 'length');
    assert.deepEqual(r.ids, alone[i].ids);
  }
  const text = await waitForIdle(server.base);
  assert.equal(metricValues(text, 'tide_request_success_total')['{finished_reason="abort"}'] ?? 0, kRequests / 2);
});
