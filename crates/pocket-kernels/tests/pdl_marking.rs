//! Every kernel marked PDL-aware (`cuda/kernels/pdl.rs` `PDL_AWARE`) really waits on its predecessor.
//!
//! A kernel launched with programmatic stream serialization may start while the previous kernel
//! still runs; only its `pdl_wait()` (`griddepcontrol.wait`) orders it after that kernel. Marking
//! a kernel that never waits would let it read its input before it is written. PDL is only used
//! with the sm_90 cubin (the compute_75 PTX cannot contain the wait: pdl_wait() is empty below
//! sm_90), so this test reads the machine code that actually runs: for each marked symbol it
//! finds the kernel's `.text.<symbol>` section in the embedded cubin and checks that
//!
//! - it contains ACQBULK, the sm_90 instruction `griddepcontrol.wait` compiles to, and
//! - no global-memory write (STG, ST, ATOM, ATOMG, RED, REDG) comes before the first ACQBULK in
//!   code order (a kernel must not write before its predecessor is done; branches can in
//!   principle reach later code first, so this is a check of the layout, not of every path).
//!
//! The SASS opcodes are the low bits of each 16-byte instruction's first word, as nvdisasm 13.1
//! decodes them on our cubins (checked against its listing when this test was written). Needs no
//! GPU.
#![cfg(feature = "cuda")]

use pocket_kernels::cuda::artifacts::ModuleId;
use pocket_kernels::cuda::kernels::{pdl_aware, pdl_pattern_matches, PDL_AWARE};

/// `griddepcontrol.wait` (12-bit opcode; the instruction has no operand forms).
const ACQBULK: u64 = 0x82e;
/// Base opcodes (low 9 bits; bits 9-11 select the operand form) of instructions that write
/// global memory: ST (generic), STG, ATOM / ATOM.CAS (generic), ATOMG / ATOMG.CAS, REDG (integer
/// and float forms).
const GLOBAL_WRITES: &[(u64, &str)] = &[
    (0x185, "ST"),
    (0x186, "STG"),
    (0x18a, "ATOM"),
    (0x18b, "ATOM.CAS"),
    (0x1a8, "ATOMG"),
    (0x1a9, "ATOMG.CAS"),
    (0x18e, "REDG"),
    (0x1a6, "REDG.F"),
];

fn u16_at(b: &[u8], o: usize) -> usize {
    u16::from_le_bytes([b[o], b[o + 1]]) as usize
}
fn u32_at(b: &[u8], o: usize) -> usize {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) as usize
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

/// The `.text.<symbol>` sections of an ELF64 little-endian cubin: (symbol, code bytes).
fn kernel_texts(elf: &[u8]) -> Vec<(String, &[u8])> {
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF image");
    assert_eq!(elf[4], 2, "not ELF64");
    let shoff = u64_at(elf, 0x28) as usize;
    let shentsize = u16_at(elf, 0x3a);
    let shnum = u16_at(elf, 0x3c);
    let shstrndx = u16_at(elf, 0x3e);
    let section = |i: usize| {
        let h = shoff + i * shentsize;
        // (name offset, file offset, size)
        (
            u32_at(elf, h),
            u64_at(elf, h + 24) as usize,
            u64_at(elf, h + 32) as usize,
        )
    };
    let (_, stroff, _) = section(shstrndx);
    let name = |off: usize| {
        let s = &elf[stroff + off..];
        let end = s.iter().position(|&c| c == 0).unwrap();
        String::from_utf8_lossy(&s[..end]).into_owned()
    };
    (0..shnum)
        .filter_map(|i| {
            let (n, off, size) = section(i);
            let sym = name(n).strip_prefix(".text.")?.to_string();
            Some((sym, &elf[off..off + size]))
        })
        .collect()
}

/// Byte offset of the first ACQBULK, and the global writes before it (offset, mnemonic).
fn wait_and_writes_before(code: &[u8]) -> (Option<usize>, Vec<(usize, &'static str)>) {
    assert_eq!(code.len() % 16, 0, "sm_90 instructions are 16 bytes");
    let mut writes = Vec::new();
    for (i, ins) in code.chunks_exact(16).enumerate() {
        let w = u64_at(ins, 0);
        if w & 0xfff == ACQBULK {
            return (Some(i * 16), writes);
        }
        if let Some(&(_, m)) = GLOBAL_WRITES.iter().find(|&&(op, _)| w & 0x1ff == op) {
            writes.push((i * 16, m));
        }
    }
    (None, writes)
}

#[test]
fn every_pdl_aware_kernel_waits_before_writing() {
    let mut failures = Vec::new();
    let mut marked = 0;
    let mut unmarked_waiting = Vec::new();
    for &m in ModuleId::ALL {
        for (sym, code) in kernel_texts(m.sm90_cubin()) {
            let (wait, writes) = wait_and_writes_before(code);
            if !pdl_aware(m, &sym) {
                if wait.is_some() {
                    unmarked_waiting.push(format!("{}::{sym}", m.name()));
                }
                continue;
            }
            marked += 1;
            match wait {
                None => failures.push(format!(
                    "{}::{sym} is marked PDL-aware but never executes griddepcontrol.wait",
                    m.name()
                )),
                Some(at) if !writes.is_empty() => failures.push(format!(
                    "{}::{sym} writes global memory before its griddepcontrol.wait (at {at:#x}): {writes:x?}",
                    m.name()
                )),
                Some(_) => {}
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!("{marked} PDL-aware kernels wait before writing");
    if !unmarked_waiting.is_empty() {
        // Not an error (they run without PDL), but each could be marked.
        eprintln!(
            "kernels that wait but are not marked PDL-aware ({}): {}",
            unmarked_waiting.len(),
            unmarked_waiting.join(" ")
        );
    }
}

#[test]
fn every_pdl_entry_names_a_kernel() {
    for &(m, pat) in PDL_AWARE {
        let texts = kernel_texts(m.sm90_cubin());
        assert!(
            texts.iter().any(|(sym, _)| pdl_pattern_matches(pat, sym)),
            "PDL_AWARE entry {}::{pat} matches no kernel of the cubin",
            m.name()
        );
    }
}

#[test]
fn decoder_finds_known_instructions() {
    // The decoder itself: every cubin has kernels, and the most common global write (STG) and
    // the exit path are found where expected (every kernel that writes has an STG or an atomic).
    let mut kernels = 0;
    let mut with_store = 0;
    for &m in ModuleId::ALL {
        for (_, code) in kernel_texts(m.sm90_cubin()) {
            kernels += 1;
            let any_write = code.chunks_exact(16).any(|ins| {
                let w = u64_at(ins, 0);
                GLOBAL_WRITES.iter().any(|&(op, _)| w & 0x1ff == op)
            });
            with_store += any_write as usize;
        }
    }
    assert!(kernels > 100, "only {kernels} kernels found in the cubins");
    // Every kernel of ours writes its output to global memory.
    assert_eq!(
        with_store, kernels,
        "a kernel without a global write: decoder is off"
    );
}
