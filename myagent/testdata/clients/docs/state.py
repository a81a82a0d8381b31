import asyncio, json, websockets

async def export_and_restore(url: str, signed_state: dict | None = None):
    async with websockets.connect(url) as ws:
        await ws.send(json.dumps({"event": "user.create_session"}))
        session_id = None
        last_event_id = None
        last_seq = 0

        async for raw in ws:
            msg = json.loads(raw)
            last_event_id = msg.get("event_id", last_event_id)
            last_seq = msg.get("seq", last_seq)
            if msg.get("event") == "agent.session_created":
                session_id = msg.get("session_id")
                if signed_state is None:
                    await ws.send(json.dumps({"event": "user.request_state", "session_id": session_id}))
                else:
                    await ws.send(json.dumps({
                        "event": "user.reconnect_with_state",
                        "signed_state": signed_state,
                        "content": {"last_event_id": last_event_id}
                    }))
            elif msg.get("event") == "agent.state_exported":
                return msg["metadata"]["signed_state"]
