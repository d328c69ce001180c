// Bad requests over HTTP: each gets its status code and OpenAI's error shape, and the server keeps answering.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, post } from './harness.mjs';

let server;
let keyed;  // a second server started with --api-key
before(async () => {
  [server, keyed] = await Promise.all([startServer(), startServer(['--api-key', 'sekret', '--served-model-name', 'tiny'])]);
});
after(async () => {
  assert.equal(await server.stop(), 0);
  assert.equal(await keyed.stop(), 0);
});

const user = [{ role: 'user', content: 'hi' }];
const C = '/v1/completions';
const CHAT = '/v1/chat/completions';
const invalidUtf8 = Buffer.concat([Buffer.from('{"prompt": "'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]);

// [name, route, body, status, param]
const cases = [
  ['invalid JSON', C, '{"prompt": ', 400, null],
  ['empty body', C, '', 400, null],
  ['body not an object', C, '[1, 2, 3]', 400, null],
  ['invalid UTF-8', C, new Uint8Array(invalidUtf8), 400, null],
  ['lone surrogate', C, '{"prompt": "\\ud800"}', 400, null],
  ['no prompt', C, {}, 400, 'prompt'],
  ['prompt a number', C, { prompt: 5 }, 400, 'prompt'],
  ['prompt empty list', C, { prompt: [] }, 400, 'prompt'],
  ['prompt mixed list', C, { prompt: ['a', 1] }, 400, 'prompt'],
  ['negative token id', C, { prompt: [5, -1] }, 400, 'prompt'],
  ['token id beyond the vocabulary', C, { prompt: [5, 5000] }, 400, 'prompt'],
  ['unknown model', C, { model: 'gpt-4', prompt: 'x' }, 404, 'model'],
  ['model not a string', C, { model: 7, prompt: 'x' }, 400, 'model'],
  ['max_tokens negative', C, { prompt: 'x', max_tokens: -1 }, 400, 'max_tokens'],
  ['max_tokens a string', C, { prompt: 'x', max_tokens: '5' }, 400, 'max_tokens'],
  ['max_tokens beyond max_model_len', C, { prompt: 'x', max_tokens: 9000 }, 400, 'max_tokens'],
  ['prompt longer than max_model_len', C, { prompt: Array(8200).fill(5) }, 400, 'prompt'],
  ['temperature negative', C, { prompt: 'x', temperature: -1 }, 400, 'temperature'],
  ['temperature a string', C, { prompt: 'x', temperature: 'hot' }, 400, 'temperature'],
  ['top_p zero', C, { prompt: 'x', top_p: 0 }, 400, 'top_p'],
  ['top_k below -1', C, { prompt: 'x', top_k: -5 }, 400, 'top_k'],
  ['min_p above 1', C, { prompt: 'x', min_p: 1.5 }, 400, 'min_p'],
  ['presence_penalty above 2', C, { prompt: 'x', presence_penalty: 2.5 }, 400, 'presence_penalty'],
  ['repetition_penalty zero', C, { prompt: 'x', repetition_penalty: 0 }, 400, 'repetition_penalty'],
  ['n zero', C, { prompt: 'x', n: 0 }, 400, 'n'],
  ['n too large', C, { prompt: 'x', n: 100000 }, 400, 'n'],
  ['logprobs above 20', C, { prompt: 'x', logprobs: 50 }, 400, 'logprobs'],
  ['stop not a string', C, { prompt: 'x', stop: 5 }, 400, 'stop'],
  ['stop empty', C, { prompt: 'x', stop: [''] }, 400, 'stop'],
  ['logit_bias key not an id', C, { prompt: 'x', logit_bias: { abc: 1 } }, 400, 'logit_bias'],
  ['logit_bias out of range', C, { prompt: 'x', logit_bias: { 5: 500 } }, 400, 'logit_bias'],
  ['logit_bias id beyond the vocabulary', C, { prompt: 'x', logit_bias: { 99999: 1 } }, 400, 'prompt'],
  ['stop_token_ids not a list', C, { prompt: 'x', stop_token_ids: 6 }, 400, 'stop_token_ids'],
  ['stream_options without stream', C, { prompt: 'x', stream_options: { include_usage: true } }, 400, 'stream_options'],
  ['stream not a boolean', C, { prompt: 'x', stream: 'yes' }, 400, 'stream'],
  ['min_tokens above max_tokens', C, { prompt: 'x', min_tokens: 9, max_tokens: 2 }, 400, 'min_tokens'],
  ['seed a string', C, { prompt: 'x', seed: 'abc' }, 400, 'seed'],
  ['deeply nested body', C, '['.repeat(5000) + ']'.repeat(5000), 400, null],
  ['chat without messages', CHAT, {}, 400, 'messages'],
  ['chat messages empty', CHAT, { messages: [] }, 400, 'messages'],
  ['chat message without role', CHAT, { messages: [{ content: 'x' }] }, 400, 'messages'],
  ['chat content a number', CHAT, { messages: [{ role: 'user', content: 5 }] }, 400, 'messages'],
  ['chat image part', CHAT, { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 400, 'messages'],
  ['chat top_logprobs without logprobs', CHAT, { messages: user, top_logprobs: 3 }, 400, 'top_logprobs'],
  ['chat unknown model', CHAT, { model: 'nope', messages: user }, 404, 'model'],
  ['chat template error', CHAT, { messages: [{ role: 'assistant', content: 'x' }] }, 400, 'messages'],
  ['chat max_tokens beyond max_model_len', CHAT, { messages: user, max_tokens: 100000 }, 400, 'max_tokens'],
  ['detokenize id beyond the vocabulary', '/detokenize', { tokens: [1, 99999] }, 400, 'tokens'],
  ['tokenize without prompt', '/tokenize', {}, 400, 'prompt'],
];

test(`${cases.length} bad requests get their status and OpenAI's error shape`, async () => {
  assert.ok(cases.length >= 30);
  for (const [name, route, body, status, param] of cases) {
    const r = await post(server.base, route, body);
    assert.equal(r.status, status, `${name}: ${r.text}`);
    assert.ok(r.json && r.json.error, `${name}: ${r.text}`);
    const e = r.json.error;
    assert.equal(typeof e.message, 'string', name);
    assert.ok(e.message.length > 0, name);
    assert.equal(typeof e.type, 'string', name);
    assert.ok('param' in e && 'code' in e, name);
    if (param !== null) assert.equal(e.param, param, `${name}: ${r.text}`);
  }
  // Still answering, and nothing is left running.
  const ok = await post(server.base, C, { prompt: 'Hello', max_tokens: 3 });
  assert.equal(ok.status, 200);
  const metrics = await (await fetch(`${server.base}/metrics`)).text();
  assert.match(metrics, /tide_num_requests_running 0/);
});

test('unknown paths are 404, a wrong method 405, a body too large 413, both in the error shape', async () => {
  const r = await fetch(`${server.base}/v1/nothing`);
  assert.equal(r.status, 404);
  assert.equal((await r.json()).error.type, 'not_found_error');
  const get = await fetch(`${server.base}/v1/completions`);
  assert.equal(get.status, 405);
  assert.equal(get.headers.get('allow'), 'POST');
  const big = await post(server.base, C, JSON.stringify({ prompt: 'x'.repeat(40 << 20) }));
  assert.equal(big.status, 413);
  assert.ok(big.json.error);
  assert.equal((await fetch(`${server.base}/health`)).status, 200);
});

test('--api-key: a missing or wrong key is 401 on every route but /health and /metrics, the right one works', async () => {
  const body = { model: 'tiny', prompt: 'x', max_tokens: 2 };
  const none = await post(keyed.base, C, body);
  assert.equal(none.status, 401);
  assert.equal(none.json.error.type, 'authentication_error');
  const wrong = await post(keyed.base, C, body, { Authorization: 'Bearer nope' });
  assert.equal(wrong.status, 401);
  const right = await post(keyed.base, C, body, { Authorization: 'Bearer sekret' });
  assert.equal(right.status, 200);
  assert.equal(right.json.model, 'tiny');
  const client = keyed.client({ apiKey: 'sekret' });
  const models = await client.models.list();
  assert.equal(models.data[0].id, 'tiny');
  await assert.rejects(keyed.client({ apiKey: 'bad' }).models.list(), (e) => e.status === 401);
  assert.equal((await fetch(`${keyed.base}/health`)).status, 200);
  // Every route but /health and /metrics needs the key; a key that shares a prefix with the right one fails.
  for (const [method, route] of [['POST', '/tokenize'], ['POST', '/detokenize'], ['GET', '/version'],
    ['GET', '/v1/models'], ['POST', '/v1/chat/completions']]) {
    const r = await fetch(`${keyed.base}${route}`, { method, headers: { Authorization: 'Bearer sekre' } });
    assert.equal(r.status, 401, `${method} ${route}`);
  }
  const tok = await post(keyed.base, '/tokenize', { prompt: 'hi' }, { Authorization: 'Bearer sekret' });
  assert.equal(tok.status, 200);
  assert.equal((await fetch(`${keyed.base}/metrics`)).status, 200);
  // --served-model-name: the folder's path is no longer a model name.
  const old = await post(keyed.base, C, { ...body, model: keyed.model }, { Authorization: 'Bearer sekret' });
  assert.equal(old.status, 404);
});
