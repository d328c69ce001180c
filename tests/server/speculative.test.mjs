// `tide serve --speculative-config` (prompt lookup): greedy completions keep the golden ids, with and without a
// request's own `"speculative": false`, and /metrics counts drafts per draft position consistently with the
// totals.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, golden, metricValues } from './harness.mjs';

let server;
let client;
before(async () => {
  server = await startServer(['--speculative-config',
    '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}']);
  client = server.client();
});
after(async () => {
  assert.equal(await server.stop(), 0);
});

async function greedyIds(g, extra = {}) {
  const r = await client.completions.create({
    model: server.model, prompt: g.prompt_ids, max_tokens: g.greedy_ids.length, temperature: 0, ignore_eos: true,
    logprobs: 0, return_tokens_as_token_ids: true, ...extra,
  });
  return r.choices[0].logprobs.tokens.map((t) => Number(t.slice('token_id:'.length)));
}

async function specMetrics() {
  const text = await (await fetch(`${server.base}/metrics`)).text();
  const perPosition = (name) => {
    const out = [];
    for (const [labels, v] of Object.entries(metricValues(text, name))) {
      out[Number(labels.match(/position="(\d+)"/)[1])] = v;
    }
    return out;
  };
  return {
    drafts: metricValues(text, 'tide_spec_decode_num_drafts_total')[''],
    draftTokens: metricValues(text, 'tide_spec_decode_num_draft_tokens_total')[''],
    accepted: metricValues(text, 'tide_spec_decode_num_accepted_tokens_total')[''],
    draftedAt: perPosition('tide_spec_decode_num_draft_tokens_per_pos'),
    acceptedAt: perPosition('tide_spec_decode_num_accepted_tokens_per_pos'),
  };
}

test('greedy ids are the golden ones; drafts are counted per position', async () => {
  for (const g of golden.generate) assert.deepEqual(await greedyIds(g), g.greedy_ids);
  const m = await specMetrics();
  assert.ok(m.drafts > 0, 'some step verified drafts');
  assert.equal(m.draftedAt.length, 3);
  assert.equal(m.acceptedAt.length, 3);
  assert.equal(m.draftedAt[0], m.drafts);  // every verification drafts position 0
  assert.equal(m.draftedAt.reduce((a, b) => a + b, 0), m.draftTokens);
  assert.equal(m.acceptedAt.reduce((a, b) => a + b, 0), m.accepted);
  for (let i = 0; i < 3; ++i) {
    assert.ok(m.acceptedAt[i] <= m.draftedAt[i], `position ${i}`);
    if (i > 0) assert.ok(m.draftedAt[i] <= m.draftedAt[i - 1] && m.acceptedAt[i] <= m.acceptedAt[i - 1], `position ${i}`);
  }
});

test('"speculative": false keeps the ids and drafts nothing', async () => {
  const before = await specMetrics();
  for (const g of golden.generate) assert.deepEqual(await greedyIds(g, { speculative: false }), g.greedy_ids);
  const after = await specMetrics();
  assert.equal(after.drafts, before.drafts);
  assert.deepEqual(after.draftedAt, before.draftedAt);
});
