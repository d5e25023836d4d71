//! How a paged-attention launch is shaped: the decode kernel or the generic one, key splits,
//! query heads per block, and whether the decode splits merge inside a thread-block cluster.

use super::kernels::{Artifact, CacheType, Kernel, KernelTable};
use super::switch::{EnvChoice, EnvSwitch};
use super::CudaBackend;
use cudarc::driver::sys::CUfunction_attribute;

/// Decode attention kernel chosen by `POCKET_ATTN` (read once): `generic` sends decode to the
/// per-head kernel, kept for same-run comparison.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum DecodeKernel {
    Current,
    Generic,
}

pub(super) fn decode_kernel() -> DecodeKernel {
    static MODE: super::switch::EnvChoice<DecodeKernel> = super::switch::EnvChoice::new(
        "POCKET_ATTN",
        &[DecodeKernel::Current, DecodeKernel::Generic],
        |v| match v {
            Some("generic") => DecodeKernel::Generic,
            _ => DecodeKernel::Current,
        },
    );
    MODE.get()
}

/// Fewest keys a decode split gets: one pass of a 128-thread block over f16 rows of head_dim 128.
/// The kernel applies it to the real length on the device (`dec_splits` in attention.cu), so a
/// short context uses one block per KV head and no combine whatever the launch's split count.
pub(super) const DECODE_MIN_KEYS: usize = 32;

/// Most splits per (sequence, KV head): the combine's shared weight table (ATC_MAX_SPLITS).
pub(super) const DECODE_MAX_SPLITS: usize = 256;

/// Key splits (an upper bound; see [`DECODE_MIN_KEYS`]) of the decode kernel's
/// `sequences x kv_heads` blocks over at most `max_len` keys: one split per 32 keys, capped at
/// one wave of blocks (three 128-thread blocks per SM fit the register use of groups up to 4,
/// two for larger groups), so long contexts stream through resident blocks without a tail wave.
pub(super) fn choose_decode_splits(
    sm_count: u32,
    blocks: usize,
    max_len: usize,
    big_group: bool,
) -> usize {
    let per_sm = if big_group { 2 } else { 3 };
    (per_sm * sm_count as usize / blocks.max(1))
        .min(max_len.div_ceil(DECODE_MIN_KEYS))
        .clamp(1, DECODE_MAX_SPLITS)
}

/// Longest context bound (keys) at which the decode kernel spreads a GQA group's query heads over
/// several blocks: there the kernel's time is each thread's dependent chain, which grows with the
/// heads a block serves, and re-reading the few K/V rows once per block costs only L2 traffic.
pub(super) const HEAD_SPLIT_MAX_KEYS: usize = 256;

/// Most key-loop iterations a decode block with one or two heads runs without splitting.
pub(super) const SHORT_MAX_ITERS: usize = 4;

/// Keys per key-loop iteration of a decode block with one or two heads (attention.cu: 128
/// threads in groups of head_dim / 8 lanes, 4 keys in flight per group, `AtdUnroll`; the cluster
/// kernels never run unsplit).
pub(super) fn short_iter_keys(hd: usize) -> usize {
    128 / (hd / 8) * 4
}

/// Every heads-per-block value [`ATTN_HEADS`] may be set to: 0..=64 (at least a whole GQA
/// group of any supported model).
const HEADS_VALUES: [usize; 65] = {
    let mut v = [0usize; 65];
    let mut i = 0;
    while i < v.len() {
        v[i] = i;
        i += 1;
    }
    v
};

/// Query heads per decode block at short contexts: `POCKET_ATTN_HEADS` (default 1; 0 serves the
/// whole group from one block per KV head, the previous launch, kept for A/B), or
/// [`CudaBackend::set_attn_heads_per_block`].
static ATTN_HEADS: EnvChoice<usize> = EnvChoice::new("POCKET_ATTN_HEADS", &HEADS_VALUES, |v| {
    v.and_then(|v| v.parse::<usize>().ok())
        .map_or(1, |h| h.min(HEADS_VALUES.len() - 1))
});

/// The heads per decode block at short contexts ([`ATTN_HEADS`]).
pub(super) fn short_heads_per_block() -> usize {
    ATTN_HEADS.get()
}

impl CudaBackend {
    /// Query heads per block of the decode attention kernel for context bounds up to 256 keys:
    /// 0 the whole GQA group (the previous launch), n > 0 at most n (the default is 1; more than
    /// 64 counts as 64, a whole group of any supported model). As `POCKET_ATTN_HEADS`;
    /// process-wide, for A/B benchmarks and tests.
    pub fn set_attn_heads_per_block(&self, heads: usize) {
        ATTN_HEADS.set(Some(heads.min(HEADS_VALUES.len() - 1)));
    }
}

/// Whether decode attention writes its output's Q8 quantization for the output projection
/// (`POCKET_ATTN_Q8=0` turns it off: the GEMV quantizes in its own launch, as before).
pub(super) fn fused_q8_output() -> bool {
    static ON: EnvSwitch = EnvSwitch::on_unless_zero("POCKET_ATTN_Q8");
    ON.on()
}

/// Heads per decode block (0 or >= group: the whole group) and blocks per KV head for a group of
/// `group` query heads under a context bound of `keys`.
pub(super) fn decode_head_split(group: usize, keys: usize) -> (usize, usize) {
    let h = short_heads_per_block();
    if keys > HEAD_SPLIT_MAX_KEYS || h == 0 || h >= group {
        return (0, 1);
    }
    (h, group.div_ceil(h))
}

/// How many key splits a launch of `rows x heads` blocks over `max_len` keys should use: enough
/// blocks to fill the GPU twice, each split at least 32 keys (8 per warp), at most 64 splits.
/// Each warp walks its keys one memory round trip at a time, so short splits are what hides
/// latency when there are few query rows (decode).
pub(super) fn choose_splits(sm_count: u32, rows: usize, heads: usize, max_len: usize) -> usize {
    let blocks = rows * heads;
    let target = 2 * sm_count as usize;
    if blocks >= target {
        return 1;
    }
    target
        .div_ceil(blocks)
        .min(max_len.div_ceil(32))
        .clamp(1, 64)
}

/// Key splits of the cluster decode kernels (`ATD_CLUSTER` in kernels/attention_cluster.cuh).
pub(super) const CLUSTER_SPLITS: usize = 8;

/// Longest context bound (keys) at which the decode kernel's splits merge inside a thread-block
/// cluster of [`CLUSTER_SPLITS`] blocks instead of through global memory and an `attn_combine`
/// launch; longer contexts want more than 8 splits (at 2048 keys the cluster kernel alone took
/// 20.8 us against the split launch's 14.2 on the H200, session 16). A power of two, as the
/// decode graphs' context buckets are (a length's next power of two), so an eager step at the
/// exact length and the graph replay of its bucket choose alike and give the same bits.
pub(super) const CLUSTER_MAX_KEYS: usize = 1024;

/// `POCKET_ATTN_CLUSTER=0` merges every decode split through `attn_combine` (the launch before
/// the cluster kernels, kept for A/B), or [`CudaBackend::set_attn_cluster`].
static ATTN_CLUSTER: EnvChoice<bool> = EnvChoice::flag("POCKET_ATTN_CLUSTER", |v| v != Some("0"));

impl CudaBackend {
    /// Whether decode attention may merge its key splits inside a cluster (sm_90, groups up to
    /// 4, contexts up to [`CLUSTER_MAX_KEYS`]); `None` goes back to `POCKET_ATTN_CLUSTER`.
    /// Process-wide, for A/B benchmarks and tests.
    pub fn set_attn_cluster(&self, on: Option<bool>) {
        ATTN_CLUSTER.set(on);
    }
}

/// Whether a decode launch of `splits` key splits under a context bound of `keys` runs the
/// cluster kernel (with [`CLUSTER_SPLITS`] splits) instead of the split kernel and
/// `attn_combine`. Not for blocks serving more than 4 query heads (`big_group`): 8 blocks per
/// KV head of the Qwen3.5-27B shape (group 6, head_dim 256, 2 keys in flight per lane group)
/// were slower than the split launch (performance/cuda-dense.md, session 16).
pub(super) fn cluster_merge(be: &CudaBackend, splits: usize, keys: usize, big_group: bool) -> bool {
    splits > 1
        && !big_group
        && keys <= CLUSTER_MAX_KEYS
        && be.artifact() == Artifact::Sm90Cubin
        && ATTN_CLUSTER.get()
}

/// Most keys per lane group any decode launch stages (64 KiB of shared memory per block).
pub(super) const STAGE_MAX_KEYS: usize = 16;

/// Every value [`ATTN_STAGE`] may take: keys per lane group staged early.
const STAGE_VALUES: [usize; 5] = [0, 4, 8, 12, STAGE_MAX_KEYS];

/// Most keys per lane group whose K/V rows the decode kernel stages in shared memory before it
/// waits for the previous kernel (kernels/attention_stage.cuh): `POCKET_ATTN_STAGE` (one of
/// [`STAGE_VALUES`], default 12: the 96 keys of a head_dim-128 split, 48 KiB per block; 0
/// reads every key after the wait, as before), or [`CudaBackend::set_attn_stage`].
static ATTN_STAGE: EnvChoice<usize> = EnvChoice::new("POCKET_ATTN_STAGE", &STAGE_VALUES, |v| {
    stage_value(v.and_then(|v| v.parse::<usize>().ok()).unwrap_or(12))
});

/// `n` rounded down to one of [`STAGE_VALUES`].
fn stage_value(n: usize) -> usize {
    STAGE_VALUES
        .into_iter()
        .rev()
        .find(|&s| s <= n)
        .unwrap_or(0)
}

impl CudaBackend {
    /// Most keys per lane group the decode attention stages before its wait (rounded down to
    /// 0, 4, 8, 12 or 16); `None` goes back to `POCKET_ATTN_STAGE`. Process-wide, for A/B
    /// benchmarks and tests: staged or not, the results are the same bits.
    pub fn set_attn_stage(&self, keys: Option<usize>) {
        ATTN_STAGE.set(keys.map(stage_value));
    }
}

/// Bytes of dynamic shared memory per staged key (K and V rows of 16 bytes for each of the
/// block's 128 threads).
pub(super) const STAGE_BYTES_PER_KEY: usize = 2 * 128 * 16;

/// Lets every decode attention kernel of a 16-bit cache take the staging area at its largest
/// ([`STAGE_MAX_KEYS`]) as dynamic shared memory, beyond the 48 KiB default; once, at open, and
/// only on the sm_90 cubin (no PDL elsewhere: nothing to overlap). False if any refuses (a GPU
/// with less shared memory per block): then no launch stages.
pub(super) fn opt_in_stage_smem(kernels: &KernelTable) -> bool {
    if kernels.artifact != Artifact::Sm90Cubin {
        return false;
    }
    let attr = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
    let most = (STAGE_MAX_KEYS * STAGE_BYTES_PER_KEY) as i32;
    [CacheType::F16, CacheType::BF16]
        .into_iter()
        .flat_map(|c| {
            [
                Kernel::AttnDecode(c, false),
                Kernel::AttnDecode(c, true),
                Kernel::AttnDecodeCluster(c),
            ]
        })
        .all(|k| {
            kernels
                .get(k)
                .is_ok_and(|f| f.set_attribute(attr, most).is_ok())
        })
}

/// Keys per lane group a decode launch stages (`stage_keys` of AttnArgs): enough for a split's
/// share under the context bound `keys` (at least [`DECODE_MIN_KEYS`] per split, as the kernel's
/// `dec_splits` may give), at most [`ATTN_STAGE`]; 0 for f32 caches (the copies are 16-byte rows
/// of 16-bit values) and where [`opt_in_stage_smem`] did not succeed.
pub(super) fn stage_keys(
    be: &CudaBackend,
    half_cache: bool,
    hd: usize,
    keys: usize,
    splits: usize,
) -> usize {
    if !half_cache || !be.attn_stage_smem {
        return 0;
    }
    keys_per_lane_group(hd, keys, splits).min(ATTN_STAGE.get())
}

/// Keys a lane group of a 128-thread decode block (head_dim / 8 lanes) walks at most in one split
/// of `splits` under a context bound of `keys`, the split being at least [`DECODE_MIN_KEYS`].
fn keys_per_lane_group(hd: usize, keys: usize, splits: usize) -> usize {
    let lane_groups = 128 / (hd / 8);
    let per_split = keys.div_ceil(splits.max(1)).max(DECODE_MIN_KEYS);
    per_split.div_ceil(lane_groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_settings_round_down_to_the_built_sizes() {
        assert_eq!(
            [0, 3, 4, 11, 12, 15, 16, 99].map(stage_value),
            [0, 0, 4, 8, 12, 12, 16, 16]
        );
    }

    #[test]
    fn a_split_is_walked_by_every_lane_group_alike() {
        // 8B: head_dim 128 (8 lane groups), the cluster's 8 splits of a 1024-key bound: 128 keys
        // a split, 16 a group; at 640 keys 80 a split, 10 a group.
        assert_eq!(keys_per_lane_group(128, 1024, 8), 16);
        assert_eq!(keys_per_lane_group(128, 640, 8), 10);
        // head_dim 64 (16 groups) with many splits: the 32-key minimum split decides.
        assert_eq!(keys_per_lane_group(64, 640, 26), 2);
        // head_dim 256 (4 groups), 16 splits of 16384 keys: 1024 a split.
        assert_eq!(keys_per_lane_group(256, 16384, 16), 256);
    }
}
