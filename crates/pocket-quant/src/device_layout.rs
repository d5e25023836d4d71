//! Device-side layouts of quantized codes: reorders a GPU backend applies at upload so that its
//! kernels read the codes with coalesced loads. Pure byte moves (no value changes), on the CPU.

/// Reorders every whole 128-column tile of each `cols`-byte row of FP8 codes into tile-lane
/// order (the CUDA one-row GEMVs read this layout: kernels/fp8_row.cuh `fp8_lanes`): bytes `16k + 4i .. 16k + 4i + 4` of a tile take the
/// codes of its columns `4k + 32i .. 4k + 32i + 4` (k = 0..8, i = 0..4; a transpose of the
/// tile's 4 x 8 groups of four codes), so that the activations of each 16-byte chunk are four
/// float4 that the eight lanes of one tile read contiguously. A partial last tile keeps its
/// order.
pub fn fp8_tile_lanes(codes: &mut [u8], cols: usize) {
    use rayon::prelude::*;
    let whole = cols / 128 * 128;
    codes.par_chunks_mut(cols).for_each(|row| {
        for tile in row[..whole].chunks_exact_mut(128) {
            let src: [u8; 128] = (&*tile).try_into().expect("128-byte tile");
            for (i, group) in src.chunks_exact(32).enumerate() {
                for (k, four) in group.chunks_exact(4).enumerate() {
                    tile[16 * k + 4 * i..16 * k + 4 * i + 4].copy_from_slice(four);
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tile_lane_order_puts_each_chunk_where_the_kernel_reads_its_activations() {
        // 2 rows of 3 whole tiles and a partial one of 48 columns; code = column (mod 256).
        let cols = 3 * 128 + 48;
        let row: Vec<u8> = (0..cols).map(|c| (c % 256) as u8).collect();
        let mut codes = [row.clone(), row.clone()].concat();
        fp8_tile_lanes(&mut codes, cols);
        let nch = cols / 16;
        let nlane = nch / 8 * 8;
        for r in 0..2 {
            let got = &codes[r * cols..(r + 1) * cols];
            for c in 0..nch {
                for b in 0..16 {
                    let (i, m) = (b / 4, b % 4);
                    // kernels/fp8_row.cuh x4_index: the float4 of x that byte group i multiplies.
                    let x4 = if c < nlane {
                        32 * (c / 8) + c % 8 + 8 * i
                    } else {
                        4 * c + i
                    };
                    assert_eq!(
                        got[16 * c + b],
                        row[4 * x4 + m],
                        "row {r} chunk {c} byte {b}"
                    );
                }
            }
        }
        // The partial tile is untouched and every code of a tile stays in that tile.
        assert_eq!(&codes[3 * 128..cols], &row[3 * 128..]);
        let mut t0 = codes[..128].to_vec();
        t0.sort_unstable();
        assert_eq!(t0, row[..128].to_vec());
    }
}
