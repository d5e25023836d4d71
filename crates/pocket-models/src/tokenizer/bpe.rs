//! Byte-level BPE merging over token ids (rank-ordered, leftmost first on ties).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::fxhash::FxHashMap;

/// Merge table: `(left id, right id) -> (rank, merged id)`.
pub(crate) type MergeTable = FxHashMap<(u32, u32), (u32, u32)>;

/// Sentinel for a character that has no token of its own.
pub(crate) const NO_TOKEN: u32 = u32::MAX;

struct Sym {
    id: u32,
    prev: usize,
    next: usize,
    alive: bool,
}

const NIL: usize = usize::MAX;

/// A queued merge: (rank, left index, right index, left id, right id), lowest rank first.
type Candidate = Reverse<(u32, usize, usize, u32, u32)>;

/// Merges `initial` symbol ids by rank and appends the resulting ids to `out`.
pub(crate) fn merge(initial: &[u32], merges: &MergeTable, out: &mut Vec<u32>) {
    if initial.len() <= 1 {
        out.extend(initial.iter().copied().filter(|&id| id != NO_TOKEN));
        return;
    }
    let n = initial.len();
    let mut syms: Vec<Sym> = initial
        .iter()
        .enumerate()
        .map(|(i, &id)| Sym {
            id,
            prev: if i == 0 { NIL } else { i - 1 },
            next: if i + 1 == n { NIL } else { i + 1 },
            alive: true,
        })
        .collect();
    // heap of (rank, left index, right index, left id, right id)
    let mut heap: BinaryHeap<Candidate> = BinaryHeap::new();
    let push = |heap: &mut BinaryHeap<_>, syms: &[Sym], l: usize, r: usize| {
        if l == NIL || r == NIL {
            return;
        }
        if let Some(&(rank, _)) = merges.get(&(syms[l].id, syms[r].id)) {
            heap.push(Reverse((rank, l, r, syms[l].id, syms[r].id)));
        }
    };
    for i in 0..n - 1 {
        push(&mut heap, &syms, i, i + 1);
    }
    while let Some(Reverse((_, l, r, lid, rid))) = heap.pop() {
        if !syms[l].alive
            || !syms[r].alive
            || syms[l].next != r
            || syms[l].id != lid
            || syms[r].id != rid
        {
            continue;
        }
        let Some(&(_, merged)) = merges.get(&(lid, rid)) else {
            continue;
        };
        syms[l].id = merged;
        syms[r].alive = false;
        let rn = syms[r].next;
        syms[l].next = rn;
        if rn != NIL {
            syms[rn].prev = l;
        }
        let lp = syms[l].prev;
        push(&mut heap, &syms, lp, l);
        push(&mut heap, &syms, l, rn);
    }
    let mut i = 0;
    while i != NIL {
        if syms[i].id != NO_TOKEN {
            out.push(syms[i].id);
        }
        i = syms[i].next;
    }
}
