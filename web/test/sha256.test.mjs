// The pure-JS SHA-256 (for origins without SubtleCrypto) and the §3.4
// checksum chain, against known vectors, node:crypto and the server's chain.
import test from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";

import { sha256Hex, nextChecksum } from "../static/baton-client.mjs";

const nodeHash = (s) => createHash("sha256").update(s, "utf8").digest("hex");

test("sha256Hex matches the FIPS 180-2 vectors", () => {
  const vectors = [
    ["", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"],
    ["abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"],
    ["abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", // 448 bits
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"],
    ["abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu", // 896 bits
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"],
    ["a".repeat(1_000_000), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"],
  ];
  for (const [input, want] of vectors) {
    assert.equal(sha256Hex(input), want, `sha256 of ${input.length} chars`);
  }
});

test("sha256Hex hashes the UTF-8 bytes of multibyte text", () => {
  // "é" is c3 a9; sha256 of those two bytes:
  assert.equal(sha256Hex("é"), nodeHash(Buffer.from([0xc3, 0xa9])));
  for (const s of ["é", "naïve café", "日本語", "🎉", "𝄞 clef", "mixed é日🎉 text", "\ud800 lone", "end \udfff"]) {
    assert.equal(sha256Hex(s), nodeHash(s), JSON.stringify(s));
  }
});

test("sha256Hex is right at every padding boundary", () => {
  for (let n = 0; n <= 130; n++) {
    const s = "q".repeat(n);
    assert.equal(sha256Hex(s), nodeHash(s), `${n} bytes`);
  }
});

test("sha256Hex without TextEncoder encodes UTF-8 itself", (t) => {
  const saved = Object.getOwnPropertyDescriptor(globalThis, "TextEncoder");
  delete globalThis.TextEncoder;
  t.after(() => Object.defineProperty(globalThis, "TextEncoder", saved));
  assert.equal(typeof globalThis.TextEncoder, "undefined");
  for (const s of ["", "abc", "é", "߿ࠀ", "￿", "𐀀", "日本語 🎉 𝄞", "\ud800", "a\udc00b", "\ud83c"]) {
    assert.equal(sha256Hex(s), nodeHash(s), JSON.stringify(s));
  }
});

const fixture = JSON.parse(readFileSync(new URL("../testdata/checksum-chain.json", import.meta.url), "utf8"));

test("nextChecksum agrees with the server's chain (buffer.NextChecksum)", async () => {
  assert.ok(fixture.chain.length > 10);
  let sum = "";
  for (const [i, link] of fixture.chain.entries()) {
    sum = await nextChecksum(sum, link.event_id);
    assert.equal(sum, link.checksum, `link ${i} (${JSON.stringify(link.event_id)})`);
  }
});

test("nextChecksum without SubtleCrypto falls back to sha256Hex", async (t) => {
  const saved = Object.getOwnPropertyDescriptor(globalThis, "crypto");
  Object.defineProperty(globalThis, "crypto", { value: undefined, configurable: true });
  t.after(() => Object.defineProperty(globalThis, "crypto", saved));
  let sum = "";
  for (const link of fixture.chain) {
    sum = await nextChecksum(sum, link.event_id);
    assert.equal(sum, link.checksum);
  }
});

test("nextChecksum falls back when SubtleCrypto refuses", async (t) => {
  const saved = Object.getOwnPropertyDescriptor(globalThis, "crypto");
  Object.defineProperty(globalThis, "crypto", { value: { subtle: { digest: () => Promise.reject(new Error("insecure")) } }, configurable: true });
  t.after(() => Object.defineProperty(globalThis, "crypto", saved));
  assert.equal(await nextChecksum("", fixture.chain[0].event_id), fixture.chain[0].checksum);
});
