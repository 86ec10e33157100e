// The official openai SDK against the gateway, run by server/sdk_test.go.
// It prints one JSON object of what it saw; the Go test asserts on it.
//
//   GATEWAY_BASE  https://127.0.0.1:PORT/v1 (the SDK only dials wss://)
//   GATEWAY_KEY   a gateway key, to mint the client secret and make a call
//   SDP_OFFER     the offer for calls.create
//   NODE_EXTRA_CA_CERTS  the gateway's test certificate
import OpenAI from 'openai';
import { OpenAIRealtimeWebSocket } from 'openai/realtime/websocket';
import WebSocket from 'ws';

// Node 20 has no global WebSocket; the SDK's browser class uses the global.
globalThis.WebSocket ??= WebSocket;

const base = process.env.GATEWAY_BASE;
const out = {};
const withTimeout = (p, what) =>
  Promise.race([p, new Promise((_, rej) => setTimeout(() => rej(new Error(`timed out: ${what}`)), 10000))]);

try {
  const server = new OpenAI({ apiKey: process.env.GATEWAY_KEY, baseURL: base });
  const secret = await server.realtime.clientSecrets.create({
    expires_after: { anchor: 'created_at', seconds: 120 },
    session: { type: 'realtime', model: 'gpt-realtime', instructions: 'From the SDK.' },
  });
  out.secret_is_ek = secret.value.startsWith('ek_');
  out.expires_in = secret.expires_at - Math.floor(Date.now() / 1000);
  out.session_instructions = secret.session?.instructions;

  // The browser class: no headers, the ek_ key in a subprotocol.
  const browser = new OpenAI({ apiKey: secret.value, baseURL: base, dangerouslyAllowBrowser: true });
  const rt = new OpenAIRealtimeWebSocket({ model: 'gpt-realtime' }, browser);
  out.realtime_url_scheme = rt.url.protocol;
  const first = await withTimeout(new Promise((res, rej) => {
    rt.on('event', (e) => res(e));
    rt.on('error', (e) => rej(e));
  }), 'the first realtime event');
  out.first_event = first.type;
  out.first_instructions = first.session?.instructions;
  // Walk away mid-answer: ask for a response, take three of its audio
  // deltas and close. The gateway still bills the response (the test reads
  // the usage record).
  const deltas = withTimeout(new Promise((res) => {
    let n = 0;
    rt.on('response.output_audio.delta', () => { if (++n === 3) res(n); });
  }), 'three audio deltas');
  rt.send({ type: 'response.create' });
  out.deltas_before_close = await deltas;
  rt.socket.close(1000);

  // WebRTC: a bare SDP offer.
  const resp = await server.realtime.calls.create({ sdp: process.env.SDP_OFFER });
  out.call_status = resp.status;
  out.call_location = resp.headers.get('location');
  out.call_answer_starts = (await resp.text()).slice(0, 5);
} catch (e) {
  out.error = String(e?.message ?? e);
}
console.log(JSON.stringify(out));
