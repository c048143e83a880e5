// The joined-text view: exact text, and the token and visible boundaries with their seq and time.
import assert from "node:assert/strict";
import { test } from "node:test";

import { hasVisible, joinedText } from "../src/text.js";

/**
 * @param {string[]} texts
 * @param {{seq0?: number, time0?: number, dt?: number[], type?: "text-chunks" | "reasoning-chunks"}} [options]
 * @returns {import("../src/chunk-rows.js").TextRow}
 */
function textRow(texts, { seq0 = 100, time0 = 5000, dt, type = "text-chunks" } = {}) {
  return { type, seq0, time0, data: { turn: 1, step: 1, index: 0, dt: dt ?? new Array(texts.length - 1).fill(10), texts } };
}

test("joined text concatenates members exactly", () => {
  const view = joinedText(textRow(["Hel", "lo", " wörld", "\n"]));
  assert.equal(view.text, "Hello wörld\n");
  assert.deepEqual([view.tokenStart, view.visibleStart, view.tokenSeq, view.tokenTime], [0, 0, 100, 5000]);
});

test("leading empty and blank members move the boundaries", () => {
  const view = joinedText(textRow(["", "", " ", "\n\t", "x", "y"], { dt: [1, 2, 3, 4, -5] }));
  assert.deepEqual([view.tokenStart, view.tokenSeq, view.tokenTime], [2, 102, 5003]);
  assert.deepEqual([view.visibleStart, view.visibleSeq, view.visibleTime], [4, 104, 5010]);
});

test("a row that never becomes visible has no visible start", () => {
  const view = joinedText(textRow([" ", "\u3000", "\ufeff"], { type: "reasoning-chunks" }));
  assert.deepEqual([view.visibleStart, view.visibleSeq, view.visibleTime, view.tokenStart], [null, null, null, 0]);
});

test("an all-empty row anchors its token at member zero", () => {
  assert.equal(joinedText(textRow(["", "", ""])).tokenStart, 0);
});

for (const [blank, visible] of /** @type {[string, boolean][]} */ ([["\u00a0", false], ["\u2028", false], ["\x1c", true], ["\u200b", true]])) {
  test(`blank follows String.prototype.trim: U+${blank.charCodeAt(0).toString(16).padStart(4, "0")}`, () => {
    assert.equal(joinedText(textRow(["", blank, blank])).visibleStart === 1, visible);
    assert.equal(hasVisible(blank), blank.trim() !== "");
  });
}

test("forty thousand spaces then x, in one pass", () => {
  const members = 40_000;
  const texts = [...new Array(members - 1).fill(" "), "x"];
  const view = joinedText(textRow(texts, { dt: new Array(members - 1).fill(0) }));
  assert.equal(view.visibleStart, members - 1);
  assert.equal(view.tokenStart, 0);
  assert.equal(view.text, " ".repeat(members - 1) + "x");
});

test("tool-call rows anchor at the name or the first fragment", () => {
  const data = { turn: 1, step: 1, index: 0, dt: [1, 1], id: "c", args: ["", "{", "}"] };
  const named = joinedText({ type: "tool-call-chunks", seq0: 7, time0: 0, data: { ...data, name: "run" } });
  const nameless = joinedText({ type: "tool-call-chunks", seq0: 7, time0: 0, data });
  assert.deepEqual([named.text, named.tokenStart, named.visibleStart], ["{}", 0, 0]);
  assert.deepEqual([nameless.tokenStart, nameless.tokenTime, nameless.visibleStart, nameless.visibleSeq], [1, 1, 1, 8]);
});

test("hasVisible uses the same blank set as trim()", () => {
  assert.ok(!hasVisible(" \u3000\ufeff\n") && hasVisible("\x1c") && hasVisible(" x"));
  for (let code = 0; code < 0x3100; code++) {
    const char = String.fromCharCode(code);
    assert.equal(hasVisible(char), char.trim() !== "", `U+${code.toString(16)}`);
  }
});
