/**
 * An incremental `text/event-stream` decoder (the WHATWG event-stream rules), the twin of
 * history_client/sse.py.
 *
 * Chunks go in as they arrive, bytes (`Uint8Array`) or text, cut anywhere; complete
 * events come out. Bytes are decoded as UTF-8, a character split across chunks included,
 * and one leading BOM is dropped. Lines end with CRLF, LF or CR, including a CR at the end
 * of one chunk and its LF at the start of the next. `data` lines are joined with LF,
 * comments are skipped, an `id` holding NUL is ignored, and `retry` is kept for the
 * reconnect delay.
 */

/**
 * One dispatched event, with the stream's last event id and `retry` (ms) when it was dispatched.
 *
 * @typedef {object} ServerSentEvent
 * @property {string} event the event type; `"message"` when the stream named none
 * @property {string} data
 * @property {string | null} id
 * @property {number | null} retry
 */

const LINE_END = /\r\n|\r|\n/g;

export class SSEDecoder {
  constructor() {
    /** @type {string[]} pieces of the line not yet ended */
    this._pending = [];
    this._event = "";
    /** @type {string[]} */
    this._data = [];
    // A CR that ended the last chunk may be the first half of a CRLF split across chunks.
    this._skipLF = false;
    this._started = false;
    this._utf8 = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
    /** @type {string | null} */
    this.lastEventId = null;
    /** @type {number | null} the last `retry` in ms */
    this.retry = null;
  }

  /**
   * Every event the chunk completes, in order.
   *
   * @param {Uint8Array | string} chunk
   * @returns {ServerSentEvent[]}
   */
  feed(chunk) {
    const text = typeof chunk === "string" ? chunk : this._utf8.decode(chunk, { stream: true });
    return this._text(text);
  }

  /**
   * Close the stream: a final partial UTF-8 sequence is decoded; an unterminated last event is dropped, as the rules say.
   *
   * @returns {ServerSentEvent[]}
   */
  end() {
    const out = this._text(this._utf8.decode());
    this._pending = [];
    this._data = [];
    this._event = "";
    return out;
  }

  /**
   * @param {string} text
   * @returns {ServerSentEvent[]}
   */
  _text(text) {
    if (!this._started && text.length > 0) {
      this._started = true;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    if (this._skipLF && text.length > 0) {
      this._skipLF = false;
      if (text.charCodeAt(0) === 0x0a) text = text.slice(1);
    }
    /** @type {ServerSentEvent[]} */
    const out = [];
    let start = 0;
    LINE_END.lastIndex = 0;
    for (let match = LINE_END.exec(text); match !== null; match = LINE_END.exec(text)) {
      let line = text.slice(start, match.index);
      if (this._pending.length > 0) {
        this._pending.push(line);
        line = this._pending.join("");
        this._pending = [];
      }
      start = match.index + match[0].length;
      const event = this._line(line);
      if (event !== null) out.push(event);
    }
    if (start < text.length) {
      this._pending.push(text.slice(start));
    } else if (text.length > 0 && text.charCodeAt(text.length - 1) === 0x0d) {
      this._skipLF = true;
    }
    return out;
  }

  /**
   * @param {string} line
   * @returns {ServerSentEvent | null}
   */
  _line(line) {
    if (line === "") return this._dispatch();
    if (line.charCodeAt(0) === 0x3a) return null;
    const colon = line.indexOf(":");
    const name = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.charCodeAt(0) === 0x20) value = value.slice(1);
    if (name === "data") {
      this._data.push(value);
    } else if (name === "event") {
      this._event = value;
    } else if (name === "id") {
      if (!value.includes("\0")) this.lastEventId = value;
    } else if (name === "retry") {
      if (/^[0-9]+$/.test(value)) this.retry = Number(value);
    }
    return null;
  }

  /** @returns {ServerSentEvent | null} */
  _dispatch() {
    const data = this._data;
    const event = this._event;
    this._data = [];
    this._event = "";
    if (data.length === 0) return null;
    return { event: event || "message", data: data.join("\n"), id: this.lastEventId, retry: this.retry };
  }
}
