//! GPT-2's reversible map between bytes and printable characters (byte-level BPE alphabet).

use std::sync::OnceLock;

struct Tables {
    to_char: [char; 256],
    to_byte: std::collections::HashMap<char, u8>,
}

fn tables() -> &'static Tables {
    static T: OnceLock<Tables> = OnceLock::new();
    T.get_or_init(|| {
        let mut to_char = ['\0'; 256];
        let printable = |b: u32| {
            (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b)
        };
        let mut next = 256u32;
        for b in 0..256u32 {
            let c = if printable(b) {
                b
            } else {
                let c = next;
                next += 1;
                c
            };
            to_char[b as usize] = char::from_u32(c).unwrap_or('\u{FFFD}');
        }
        let to_byte = to_char
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect();
        Tables { to_char, to_byte }
    })
}

/// Maps raw bytes to the byte-level alphabet (each byte becomes one char).
pub fn encode_bytes(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    encode_bytes_into(bytes, &mut s);
    s
}

/// Appends the byte-level form of `bytes` to `out`.
pub fn encode_bytes_into(bytes: &[u8], out: &mut String) {
    let t = tables();
    out.extend(bytes.iter().map(|&b| t.to_char[b as usize]));
}

/// Maps byte-level text back to bytes; chars outside the alphabet keep their UTF-8 bytes.
pub fn decode_to_bytes(text: &str, out: &mut Vec<u8>) {
    let t = tables();
    for c in text.chars() {
        match t.to_byte.get(&c) {
            Some(&b) => out.push(b),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
}
