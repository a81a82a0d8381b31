// Package web holds Baton's browser side, embedded in the binary: the
// dependency-free JavaScript client (static/baton-client.mjs, with its
// TypeScript declarations in baton-client.d.mts; also served as
// baton-client.js and baton-client.d.ts, the same bytes) that any web,
// Node or React Native app can copy, and the UI served at / that renders
// a session live through that client.
//
// It knows nothing of sessions or runs on the server: it only serves
// files, each with a Content-Type from its own table, not the machine's.
// What the client does — resume, dedupe, checksum, ack, the state
// reducer — is tested with Node's test runner and in headless Chromium
// against a real server (this package's tests); that it works copied into
// a fresh npm project, too.
package web
