// Package myagent serves the myagent dialect: the WebSocket protocol of
// github.com/JasonDZS/myagent, so that its clients (its Python scripts, its
// documented Node and Python examples, its React console, its state
// export/restore example) talk to Baton unchanged. It is a translation
// layer: each myagent session is one Baton session over one in-process
// connection to the orchestrator's /ws (internal/inproc), so /ws's
// authentication, limits and behaviour apply unchanged; it knows nothing
// of the orchestrator's insides.
//
// What myagent's clients send (client → server; every frame but
// user.create_session, user.reconnect_with_state and user.ack names its
// session with a top-level session_id; payloads are in content, of any
// JSON type):
//
//	user.create_session [content: init]     → agent.session_created {session_id, metadata: {agent_name, connection_id}}
//	user.message content: "text" | {question, mode?, adaptive?, …}
//	user.solve_tasks content: {tasks, question?, plan_summary?} | [tasks] | task
//	user.response step_id, content: {confirmed, tasks?} (also {action}, {text} for Baton's other kinds)
//	user.cancel                              → … pipeline.cancelled, agent.interrupted
//	user.cancel_task / user.restart_task content: {task_id}
//	user.cancel_plan                         → system.notice {action: cancel_plan, ok}
//	user.replan content: {question}          → system.notice {action: replan, mode: in_run | restart}
//	user.ack content: {last_seq} | {last_event_id} | n
//	user.request_state                       → agent.state_exported {metadata: {signed_state, …}}
//	user.reconnect_with_state signed_state, content: {last_seq | last_event_id}
//	                                         → agent.state_restored, the replay, system.notice "Replay completed"
//
// What they read (server → client): system.connected {connection_id} on
// open; Baton's events under their own names with Baton's seq (per
// session), event_id "<session_id>-<seq>" (Baton's own in
// metadata.orig_event_id) and payloads mirrored into content where
// myagent's clients read them: plan.start {question}, plan.completed
// {tasks, plan_summary}, solver.* {task, result: {output, summary}},
// aggregate.completed {output}; agent.user_confirm with metadata
// requires_confirmation, scope ("plan" for a plan, "tool" with tool_name,
// tool_description and tool_args, "task", "input"); agent.error for every
// error (Baton's system.error; unknown session → "Session not found");
// agent.final_answer "Plan was declined by user." after a declined or
// timed-out plan; agent.interrupted after pipeline.cancelled. Frames the
// dialect makes itself carry no seq.
//
// Signed state: user.request_state signs {session_id, resume_token,
// last_seq, exported_at} with HMAC-SHA256 under Options.StateKey; a
// reconnect verifies it before anything else (a forged or tampered state
// changes nothing) and then resumes /ws with that token, so the
// orchestrator decides as for any resume: the token rotates on each
// resume, and a state exported before the session's latest resume is
// refused once the rotation has committed.
package myagent
