// Package wsproto is Baton's wire vocabulary: the JSON envelope of every frame,
// the event names of the contract, the typed metadata of each event, the
// decoding of client frames into either a typed request or a system.error, the
// validation of client-supplied task lists, and the client-visible session
// state (§6 of the contract) that events fold into.
//
// It knows nothing of sessions, connections, buffers or models: it turns
// values into bytes and bytes into values, and never panics on input.
package wsproto
