// The official openai SDK's GPT-Live classes against mockai, run by
// mockai/live_sdk_test.go: proof that mockai's Live side is what the SDK
// expects, so gateway tests built on it hold against OpenAI. It prints one
// JSON object of what it saw; the Go test asserts on it.
//
//   MOCK_BASE  http(s)://127.0.0.1:PORT/v1 (the SDK turns it into ws(s):// for sockets)
//   MOCK_KEY   the key mockai accepts
//   SDP_OFFER  the offer for live.create and fork
//   NODE_EXTRA_CA_CERTS  mockai's certificate, with -tls
import OpenAI from 'openai';
import { LiveWS } from 'openai/resources/live/ws';
import { SidebandWS } from 'openai/resources/live/sideband/ws';
import { ForksWS } from 'openai/resources/live/forks/ws';

const base = process.env.MOCK_BASE;
const offer = process.env.SDP_OFFER;
const out = {};
const withTimeout = (p, what) =>
  Promise.race([p, new Promise((_, rej) => setTimeout(() => rej(new Error(`timed out: ${what}`)), 10000))]);
// next resolves with the next event of type on emitter (or rejects on its error).
const next = (emitter, type) => withTimeout(new Promise((res, rej) => {
  emitter.once(type, res);
  emitter.once('error', rej);
}), type);
const closed = (emitter) => withTimeout(new Promise((res) => emitter.on('close', (code, reason) => res({ code, reason }))), 'close');

// 100 ms of 24 kHz PCM16.
const audio = Buffer.alloc(4800, 1).toString('base64');

try {
  const client = new OpenAI({ apiKey: process.env.MOCK_KEY, baseURL: base });

  // The primary WebSocket, delegating to Responses, stored.
  const live = new LiveWS(client);
  out.live_url = live.url.toString().replace(/\/\/[^/]+/, '//HOST');
  const startedP = next(live, 'session.started');
  live.send({ type: 'session.start', event_id: 'evt_sdk', session: {
    model: 'gpt-live-1', instructions: 'From the SDK.', store: true,
    audio: { format: { type: 'audio/pcm', rate: 24000 }, output: { voice: 'marin' } },
    delegation: { type: 'responses', responses: { model: 'gpt-5.2-mini' } },
  } });
  const started = await startedP;
  out.session_id = started.session.id;
  out.model = started.session.model;
  out.expires_in = started.session.expires_at - Math.floor(Date.now() / 1000);
  out.client_event_id = started.client_event_id;

  // A sideband with graceful close.
  const sideband = new SidebandWS(client, { session_id: started.session.id, graceful_close: true });
  out.sideband_url = sideband.url.toString().replace(/\/\/[^/]+/, '//HOST');
  out.sideband_started = (await next(sideband, 'session.started')).session.id;

  const reflectedP = next(sideband, 'session.input_audio.append');
  const outAudioP = next(live, 'session.output_audio.delta');
  const inTextP = next(live, 'session.input_transcript.delta');
  live.send({ type: 'session.input_audio.append', audio });
  const reflected = await reflectedP;
  out.reflected = { same_audio: reflected.audio === audio, start_ms: reflected.start_ms, end_ms: reflected.end_ms };
  out.output_audio_bytes = Buffer.from((await outAudioP).delta, 'base64').length;
  out.input_transcript = (await inTextP).delta;

  // A delegated response: the SDK's response.event, ending in response.completed.
  const completed = withTimeout(new Promise((res) => live.on('response.event', (e) => {
    if (e.event.type === 'response.completed') res(e);
  })), 'response.completed');
  live.send({ type: 'response.create' });
  const done = await completed;
  out.backend_model = done.event.response.model;
  out.backend_total_tokens = done.event.response.usage.total_tokens;

  // session.close: session.closed on both, the primary closed 1000, the sideband too (graceful).
  const liveClosedP = next(live, 'session.closed');
  const sbClosedP = next(sideband, 'session.closed');
  const liveCloseP = closed(live);
  const sbCloseP = closed(sideband);
  live.send({ type: 'session.close' });
  const lc = await liveClosedP;
  out.closed = { reason: lc.reason, seconds: lc.usage.seconds, sideband_reason: (await sbClosedP).reason };
  out.live_close = (await liveCloseP).code;
  out.sideband_close = (await sbCloseP).code;

  // The strict config: an unknown field is an error event the SDK surfaces.
  const bad = new LiveWS(client);
  const errP = withTimeout(new Promise((res) => bad.on('error', res)), 'unknown_parameter');
  bad.send({ type: 'session.start', session: { model: 'gpt-live-1', voice: 'marin' } });
  const err = await errP;
  out.strict = { code: err.error?.error?.code, param: err.error?.error?.param };
  bad.close({ code: 1000, reason: '' });

  // The recording and a fork of the stored, closed session.
  const rec = await client.live.sessions.downloadRecording(started.session.id);
  out.recording = { type: rec.headers.get('content-type'), bytes: (await rec.arrayBuffer()).byteLength };
  const forked = await client.live.sessions.fork(started.session.id, { transport: { type: 'webrtc', sdp: offer } });
  out.fork_id_prefix = forked.session.id.slice(0, 5);
  out.fork_answer_starts = forked.transport.sdp.slice(0, 5);
  const fws = new ForksWS(client, { session_id: started.session.id });
  const fStartedP = next(fws, 'session.started');
  fws.send({ type: 'session.start', session: {} });
  out.fork_ws_model = (await fStartedP).session.model;
  fws.close({ code: 1000, reason: '' });

  // WebRTC: create, then hang up.
  const rtc = await client.live.create({ session: { model: 'gpt-live-1' }, transport: { type: 'webrtc', sdp: offer } });
  out.webrtc = { id_prefix: rtc.session.id.slice(0, 5), answer_starts: rtc.transport.sdp.slice(0, 5), type: rtc.transport.type };
  await client.live.sessions.hangup(rtc.session.id);

  // SIP call controls on calls announced through mockai's hook.
  const incoming = async () => (await (await fetch(base.replace(/\/v1$/, '') + '/mock/live/incoming', { method: 'POST' })).json()).id;
  const call = await incoming();
  await client.live.sessions.accept(call, { session: { type: 'live', model: 'gpt-live-1' } });
  await client.live.sessions.refer(call, { target_uri: 'tel:+15550100' });
  await client.live.sessions.hangup(call);
  await client.live.sessions.reject(await incoming(), { status_code: 486 });
  try {
    await client.live.sessions.reject(await incoming(), { status_code: 200 });
  } catch (e) {
    out.bad_reject = { status: e.status, code: e.code, param: e.param };
  }
  out.sip_ok = true;
} catch (e) {
  out.error = String(e?.stack ?? e?.message ?? e);
}
console.log(JSON.stringify(out));
process.exit(0);
