// A Socket.IO server with connection state recovery that answers a
// Baton-style run request with the events of a Baton tasks=1 run: the
// comparison bench/run.sh measures beside Baton and bench/bare.
//
//   node bench/socketio/server.js [port]     # 127.0.0.1, default 18494
//
// A client emits "message" with a Baton client frame: user.solve_tasks
// {tasks} starts a run, whose events come back as "event" emits of Baton's
// frames ({event, event_id, seq, session_id, step_id?, timestamp, content,
// metadata}), built as objects per event and sent as the pipeline would,
// one emit each; user.ack is accepted and ignored. With connection state
// recovery every emit goes through the adapter, which keeps it (for two
// minutes) to replay to a client that reconnects: Socket.IO's counterpart
// of Baton's ring. GET /healthz answers {"status":"ok","connections":N}.

import { createServer } from "node:http";
import { randomBytes, randomUUID } from "node:crypto";
import { Server } from "socket.io";
import { isoMicro, now, solveEvents, waves } from "./script.js";

const port = Number(process.argv[2] ?? 18494);

const http = createServer((req, res) => {
  if (req.url === "/healthz") {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ status: "ok", connections: io.engine.clientsCount }) + "\n");
    return;
  }
  res.writeHead(404).end();
});

const io = new Server(http, {
  serveClient: false,
  transports: ["websocket"], // as Baton: no long-polling fallback
  connectionStateRecovery: { maxDisconnectionDuration: 2 * 60 * 1000 },
});

io.on("connection", (socket) => {
  const session = "sess_" + randomUUID();
  let seq = 0;
  let busy = false;
  const send = (ev) => {
    const frame = { event: ev.event, event_id: randomUUID(), seq: ++seq, session_id: session };
    if (ev.step_id) frame.step_id = ev.step_id;
    frame.timestamp = isoMicro(now());
    frame.content = ev.content;
    frame.metadata = ev.metadata;
    socket.emit("event", frame);
  };
  const error = (code, ref, message) => socket.emit("event", {
    event: "system.error", event_id: randomUUID(), session_id: session, timestamp: isoMicro(now()),
    content: message, metadata: { code, message, ref_type: ref },
  });

  socket.emit("event", {
    event: "system.connected", event_id: randomUUID(), session_id: session, timestamp: isoMicro(now()), content: "connected",
    metadata: { session_id: session, resume_token: randomBytes(32).toString("base64url"), resumed: false, last_seq: 0,
      state_checksum: "", buffer_capacity: 1000 },
  });

  socket.on("message", (f) => {
    switch (f?.event) {
      case "user.ack":
        return;
      case "user.solve_tasks": {
        const tasks = f.metadata?.tasks;
        const order = Array.isArray(tasks) && tasks.length > 0 ? waves(tasks) : null;
        if (!order) return error("invalid_tasks", f.event, "want tasks whose dependencies exist and form no cycle");
        if (busy) return error("busy", f.event, "a run is already active in this session");
        busy = true;
        const evs = solveEvents(tasks, order);
        // The events leave as the pipeline makes them, each its own emit;
        // the next run may start once the last is sent.
        for (const ev of evs) send(ev);
        busy = false;
        return;
      }
      default:
        return error("unknown_type", f?.event, "unknown event " + f?.event);
    }
  });
});

http.listen(port, "127.0.0.1", () => {
  process.stderr.write(`socket.io server listening on ws://127.0.0.1:${port}/socket.io/\n`);
});
process.on("SIGTERM", () => process.exit(0));
