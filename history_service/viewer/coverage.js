// Which seqs the edits and replacements seen so far hide, as sorted disjoint pieces.
//
// A piece remembers the range that covered it first, so an item is attributed to the first
// range that arrived among those that touch it. Adding a range returns only the pieces of it
// nothing covered before: the items there are the only ones it can newly hide.

/** @typedef {{start: number, end: number, why: string}} Range */
/** @typedef {{start: number, end: number, why: string, order: number}} Piece */

/**
 * The index of the first piece that ends at or after `seq`.
 * @param {Piece[]} pieces @param {number} seq
 */
function firstEndingFrom(pieces, seq) {
  let low = 0;
  let high = pieces.length;
  while (low < high) {
    const mid = (low + high) >>> 1;
    if (pieces[mid].end < seq) low = mid + 1;
    else high = mid;
  }
  return low;
}

export class Coverage {
  constructor() {
    /** @type {Piece[]} */
    this.pieces = [];
    this.added = 0;
  }

  get empty() {
    return this.pieces.length === 0;
  }

  /**
   * Cover `range`; returns the parts of it that were not covered yet.
   * @param {Range} range
   * @returns {Piece[]}
   */
  add(range) {
    const order = this.added++;
    const first = firstEndingFrom(this.pieces, range.start);
    /** @type {Piece[]} */
    const fresh = [];
    /** @type {Piece[]} */
    const merged = [];
    let at = range.start;
    let next = first;
    for (; next < this.pieces.length && this.pieces[next].start <= range.end; next++) {
      const piece = this.pieces[next];
      if (piece.start > at) {
        const gap = { start: at, end: piece.start - 1, why: range.why, order };
        fresh.push(gap);
        merged.push(gap);
      }
      merged.push(piece);
      at = Math.max(at, piece.end + 1);
    }
    if (at <= range.end) {
      const tail = { start: at, end: range.end, why: range.why, order };
      fresh.push(tail);
      merged.push(tail);
    }
    // Not splice(...merged): a spread of very many pieces would overflow the argument list.
    if (fresh.length) this.pieces = this.pieces.slice(0, first).concat(merged, this.pieces.slice(next));
    return fresh;
  }

  /**
   * Why an item spanning `seq0..seq1` is hidden (by the first range that arrived among those
   * touching it), or undefined.
   * @param {number} seq0 @param {number} seq1
   */
  why(seq0, seq1) {
    /** @type {Piece | undefined} */
    let found;
    for (let k = firstEndingFrom(this.pieces, seq0); k < this.pieces.length && this.pieces[k].start <= seq1; k++) {
      if (found === undefined || this.pieces[k].order < found.order) found = this.pieces[k];
    }
    return found?.why;
  }
}
