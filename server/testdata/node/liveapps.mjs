// The official openai SDK's GPT-Live WebRTC, sideband, recording, fork and
// SIP calls through the gateway, run by server/liveapps_test.go. It prints
// one JSON object of what it saw; the Go test asserts on it.
//
//   GATEWAY_BASE  https://127.0.0.1:PORT/v1
//   GATEWAY_KEY   a gateway key
//   SIP_CALL      a ringing inbound SIP call the gateway never saw (made through mockai's hook)
//   SDP_OFFER     the offer
//   NODE_EXTRA_CA_CERTS  the gateway's (and mockai's) test certificates
import OpenAI from 'openai';
import { SidebandWS } from 'openai/resources/live/sideband/ws';
import { ForksWS } from 'openai/resources/live/forks/ws';

const offer = process.env.SDP_OFFER;
const out = {};
const withTimeout = (p, what) =>
  Promise.race([p, new Promise((_, rej) => setTimeout(() => rej(new Error(`timed out: ${what}`)), 10000))]);
const next = (emitter, type) => withTimeout(new Promise((res, rej) => {
  emitter.once(type, res);
  emitter.once('error', rej);
}), type);
const closed = (emitter) => withTimeout(new Promise((res) => emitter.on('close', (code) => res(code))), 'close');

try {
  const client = new OpenAI({ apiKey: process.env.GATEWAY_KEY, baseURL: process.env.GATEWAY_BASE });

  // WebRTC: the app's server creates the session (the alias group gpt-live).
  const rtc = await client.live.create({ session: { model: 'gpt-live', store: true }, transport: { type: 'webrtc', sdp: offer } });
  out.webrtc = { id: rtc.session.id, answer_starts: rtc.transport.sdp.slice(0, 5), type: rtc.transport.type };

  // The app's sideband, through the gateway, with graceful close.
  const sideband = new SidebandWS(client, { session_id: rtc.session.id, graceful_close: true });
  out.sideband_path = sideband.url.pathname;
  out.sideband_started = (await next(sideband, 'session.started')).session.id;
  out.reflected = (await next(sideband, 'session.input_audio.append')).audio.length > 0;
  await next(sideband, 'session.usage.updated');
  const closedP = next(sideband, 'session.closed');
  const closeP = closed(sideband);
  sideband.send({ type: 'session.close' });
  const c = await closedP;
  out.closed = { reason: c.reason, seconds: c.usage.seconds };
  out.sideband_close = await closeP;

  // Its recording, streamed through, and a fork of it.
  const rec = await client.live.sessions.downloadRecording(rtc.session.id);
  out.recording = { type: rec.headers.get('content-type'), bytes: (await rec.arrayBuffer()).byteLength };
  const forked = await client.live.sessions.fork(rtc.session.id, { transport: { type: 'webrtc', sdp: offer } });
  out.fork = { id_prefix: forked.session.id.slice(0, 5), answer_starts: forked.transport.sdp.slice(0, 5) };
  await client.live.sessions.hangup(forked.session.id);

  // The same stored session forked over WebSocket (ForksWS): a Live
  // session of its own through the gateway, closed with session.close.
  const fws = new ForksWS(client, { session_id: rtc.session.id });
  fws.send({ type: 'session.start', session: {} });
  const fstarted = await next(fws, 'session.started');
  const fclosedP = next(fws, 'session.closed');
  fws.send({ type: 'session.close' });
  out.ws_fork = { id_prefix: fstarted.session.id.slice(0, 5), distinct: fstarted.session.id !== rtc.session.id,
    closed: (await fclosedP).reason };

  // An inbound SIP call the gateway never saw: accepted by model, then its own.
  const call = process.env.SIP_CALL;
  await client.live.sessions.accept(call, { session: { type: 'live', model: 'gpt-live' } });
  await client.live.sessions.refer(call, { target_uri: 'tel:+15550100' });
  await client.live.sessions.hangup(call);
  out.sip_call = call;
  out.sip_ok = true;
} catch (e) {
  out.error = String(e?.stack ?? e?.message ?? e);
}
console.log(JSON.stringify(out));
process.exit(0);
