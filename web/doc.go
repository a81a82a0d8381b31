// Package web holds Baton's browser side, embedded in the binary: the
// dependency-free JavaScript client (static/baton-client.js, with its
// TypeScript declarations) that any web or React Native app can copy, and
// the UI served at / that renders a session live through that client.
//
// It knows nothing of sessions or runs on the server: it only serves
// files. What the client does — resume, dedupe, checksum, ack, the state
// reducer — is tested with Node's test runner and in headless Chromium
// against a real server (this package's tests).
package web
