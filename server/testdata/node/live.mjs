// The official openai SDK's GPT-Live WebSocket (LiveWS) against the gateway,
// run by server/sdk_test.go's TestLiveNodeSDK: a session routed by its
// session.start, audio, a delegated response, session.close; the strict
// config's error and a model the gateway does not serve, as the SDK
// surfaces them. It prints one JSON object of what it saw.
//
//   GATEWAY_BASE  http(s)://127.0.0.1:PORT/v1 (the SDK makes it ws(s)://…/live/sessions)
//   GATEWAY_KEY   a gateway key
//   NODE_EXTRA_CA_CERTS  the gateway's certificate, for https://
import OpenAI from 'openai';
import { LiveWS } from 'openai/resources/live/ws';

const out = {};
const withTimeout = (p, what) =>
  Promise.race([p, new Promise((_, rej) => setTimeout(() => rej(new Error(`timed out: ${what}`)), 10000))]);
const next = (emitter, type) => withTimeout(new Promise((res, rej) => {
  emitter.once(type, res);
  emitter.once('error', rej);
}), type);
const closed = (emitter) => withTimeout(new Promise((res) => emitter.on('close', (code, reason) => res({ code, reason: String(reason ?? '') }))), 'close');

// 100 ms of 24 kHz PCM16.
const audio = Buffer.alloc(4800, 1).toString('base64');

try {
  const client = new OpenAI({ apiKey: process.env.GATEWAY_KEY, baseURL: process.env.GATEWAY_BASE });

  const live = new LiveWS(client);
  out.live_url = live.url.toString().replace(/\/\/[^/]+/, '//HOST');
  const startedP = next(live, 'session.started');
  live.send({ type: 'session.start', event_id: 'evt_sdk', session: {
    model: 'gpt-live-1', instructions: 'From the SDK, through the gateway.',
    audio: { format: { type: 'audio/pcm', rate: 24000 }, output: { voice: 'marin' } },
    delegation: { type: 'responses', responses: { model: 'gpt-realtime-mini' } },
  } });
  const started = await startedP;
  out.session_id = started.session.id;
  out.model = started.session.model;
  out.client_event_id = started.client_event_id;

  const outAudioP = next(live, 'session.output_audio.delta');
  live.send({ type: 'session.input_audio.append', audio });
  out.output_audio_bytes = Buffer.from((await outAudioP).delta, 'base64').length;

  const completed = withTimeout(new Promise((res) => live.on('response.event', (e) => {
    if (e.event.type === 'response.completed') res(e);
  })), 'response.completed');
  live.send({ type: 'response.create' });
  out.backend_total_tokens = (await completed).event.response.usage.total_tokens;

  const closedP = next(live, 'session.closed');
  const closeP = closed(live);
  live.send({ type: 'session.close' });
  const lc = await closedP;
  out.closed = { reason: lc.reason, seconds: lc.usage.seconds };
  out.live_close = (await closeP).code;

  // The upstream's strict config check, relayed: the SDK's error event.
  const bad = new LiveWS(client);
  const errP = withTimeout(new Promise((res) => bad.on('error', res)), 'unknown_parameter');
  bad.send({ type: 'session.start', session: { model: 'gpt-live-1', voice: 'marin' } });
  const err = await errP;
  out.strict = { code: err.error?.error?.code, param: err.error?.error?.param };
  bad.close({ code: 1000, reason: '' });

  // A model the gateway does not serve: its refusal, then close 1008.
  const unknown = new LiveWS(client);
  const uErrP = withTimeout(new Promise((res) => unknown.on('error', res)), 'model_not_found');
  const uCloseP = closed(unknown);
  unknown.send({ type: 'session.start', event_id: 'evt_unknown', session: { model: 'gpt-live-9' } });
  const uErr = await uErrP;
  out.unknown = { code: uErr.error?.error?.code, close: (await uCloseP).code };
} catch (e) {
  out.error = String(e?.stack ?? e?.message ?? e);
}
console.log(JSON.stringify(out));
process.exit(0);
