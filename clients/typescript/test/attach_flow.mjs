// Attach to a terminal session over the daemon's WebSocket (run with a
// global WebSocket: Node 22+, or Node 20 with --experimental-websocket).
//   node attach_flow.mjs SANDBOX_ID    (connection: $STASIS_URL, $STASIS_TOKEN_FILE)
import { Sandbox } from 'stasis-client';

const sbx = await Sandbox.connect(process.argv[2]);
const pty = await sbx.pty(['sh'], { cols: 80, rows: 24 });
let out = '';
const a = await pty.attach({ onData: (d) => (out += Buffer.from(d).toString()) });
a.resize(132, 43);
a.write('stty size; echo attached-$((6*7))\n');
const deadline = Date.now() + 30_000;
while (!out.includes('attached-42') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
a.write('exit 3\n');
const end = await a.done;
console.log(JSON.stringify({ end, sawSize: out.includes('43 132'), sawEcho: out.includes('attached-42') }));
