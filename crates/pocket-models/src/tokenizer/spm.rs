//! SentencePiece-style merging: highest-scoring adjacent pair first, then re-segmentation with
//! byte fallback (`<0xNN>`) for pieces the vocabulary lacks.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::fxhash::FxHashMap;

struct Sym {
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
}

const NIL: usize = usize::MAX;

struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    // max-heap: higher score first, then lower left index
    fn cmp(&self, o: &Self) -> Ordering {
        self.score
            .total_cmp(&o.score)
            .then_with(|| o.left.cmp(&self.left))
    }
}

/// What the SentencePiece session needs from the vocabulary.
pub(crate) struct SpmVocab<'a> {
    pub token_to_id: &'a FxHashMap<String, u32>,
    pub scores: &'a [f32],
    pub byte_tokens: &'a [Option<u32>; 256],
    pub unk: Option<u32>,
}

/// Tokenizes already-escaped text (spaces as `▁`) and appends ids to `out`.
pub(crate) fn encode(text: &str, v: &SpmVocab<'_>, out: &mut Vec<u32>) {
    if text.is_empty() {
        return;
    }
    let mut syms: Vec<Sym> = Vec::new();
    for (i, (start, c)) in text.char_indices().enumerate() {
        syms.push(Sym {
            start,
            len: c.len_utf8(),
            prev: if i == 0 { NIL } else { i - 1 },
            next: i + 1,
        });
    }
    let n = syms.len();
    syms[n - 1].next = NIL;
    let mut heap = BinaryHeap::new();
    let try_add = |heap: &mut BinaryHeap<Bigram>, syms: &[Sym], l: usize, r: usize| {
        if l == NIL || r == NIL {
            return;
        }
        let piece = &text[syms[l].start..syms[r].start + syms[r].len];
        if let Some(&id) = v.token_to_id.get(piece) {
            let score = v.scores.get(id as usize).copied().unwrap_or(0.0);
            heap.push(Bigram {
                left: l,
                right: r,
                score,
                size: piece.len(),
            });
        }
    };
    for i in 1..n {
        try_add(&mut heap, &syms, i - 1, i);
    }
    while let Some(b) = heap.pop() {
        let (l, r) = (b.left, b.right);
        if syms[l].len == 0 || syms[r].len == 0 || syms[l].len + syms[r].len != b.size {
            continue;
        }
        syms[l].len += syms[r].len;
        syms[r].len = 0;
        let rn = syms[r].next;
        syms[l].next = rn;
        if rn != NIL {
            syms[rn].prev = l;
        }
        let lp = syms[l].prev;
        try_add(&mut heap, &syms, lp, l);
        try_add(&mut heap, &syms, l, rn);
    }
    // Every merged symbol is a vocabulary piece (a pair is only queued when its text is one), so
    // re-segmentation reduces to: the piece's id, else one byte token per byte.
    let mut i = 0;
    while i != NIL {
        let piece = &text[syms[i].start..syms[i].start + syms[i].len];
        match v.token_to_id.get(piece) {
            Some(&id) => out.push(id),
            None => {
                for &byte in piece.as_bytes() {
                    if let Some(id) = v.byte_tokens[byte as usize].or(v.unk) {
                        out.push(id);
                    }
                }
            }
        }
        i = syms[i].next;
    }
}
