//! CUDA graph capture of a whole decode step replays to the same result as eager execution,
//! including after the step's inputs are rewritten between replays. Skipped without a GPU.
#![cfg(feature = "cuda")]

#[path = "cuda_common/step.rs"]
mod step;

use pocket_kernels::cuda::CudaBackend;
use pocket_kernels::Backend;
use pocket_quant::GgmlType;
use step::{Shape, Step};

const SMALL: Shape = Shape {
    hidden: 256,
    heads: 4,
    kv_heads: 2,
    head_dim: 64,
    ff: 512,
    vocab: 1000,
    layers: 3,
};

#[test]
fn decode_step_graph_replays_like_eager() {
    let be = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    for fmt in [GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q8_0] {
        let mut st = Step::new(&be, SMALL, fmt, GgmlType::Q6_K, 40);
        st.run(&be);
        let eager = be.read_f32(&st.logits).unwrap();
        assert!(
            eager.iter().all(|v| v.is_finite()),
            "{fmt:?}: eager logits not finite"
        );
        // Poison the logits so the replay must write them.
        st.poison_logits(&be);
        let graph = st.capture(&be);
        graph.replay().unwrap();
        be.synchronize().unwrap();
        let replayed = be.read_f32(&st.logits).unwrap();
        assert_eq!(eager, replayed, "{fmt:?}: graph replay differs from eager");
        // New token id written outside the graph: replay must match a fresh eager step.
        be.write_u32(&mut st.ids, &[7], &[1]).unwrap();
        graph.replay().unwrap();
        let replayed7 = be.read_f32(&st.logits).unwrap();
        st.run(&be);
        let eager7 = be.read_f32(&st.logits).unwrap();
        assert_eq!(
            eager7, replayed7,
            "{fmt:?}: replay after an input update differs"
        );
        assert_ne!(
            eager, eager7,
            "{fmt:?}: a different token should change the logits"
        );
    }
}

/// Larger than SMALL so each kernel has many blocks in flight when the next one launches.
const MEDIUM: Shape = Shape {
    hidden: 1024,
    heads: 8,
    kv_heads: 2,
    head_dim: 128,
    ff: 4096,
    vocab: 4096,
    layers: 4,
};

/// Programmatic dependent launch: eager steps with PDL on and a graph captured with PDL on
/// (which must keep programmatic edges) give logits bit-identical to eager steps without PDL,
/// on every one of many replays (a kernel reading its input before its predecessor finished
/// would show as a difference). Skipped without a GPU or where PDL is unsupported (below the
/// sm_90 cubin).
#[test]
fn pdl_decode_step_matches_plain_launches() {
    let be = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    if !be.pdl_supported() {
        eprintln!("skipped: PDL needs the sm_90 cubin ({})", be.name());
        return;
    }
    for (shape, fmt) in [
        (SMALL, GgmlType::Q4_0),
        (MEDIUM, GgmlType::Q4_0),
        (MEDIUM, GgmlType::Q4_K),
        (MEDIUM, GgmlType::Q8_0),
    ] {
        let label = format!("{fmt:?} hidden {}", shape.hidden);
        let mut st = Step::new(&be, shape, fmt, GgmlType::Q6_K, 40);
        assert!(!be.set_pdl(false));
        st.run(&be);
        let plain = be.read_f32(&st.logits).unwrap();
        assert!(plain.iter().all(|v| v.is_finite()), "{label}: not finite");
        let plain_next = be.read_u32(&st.next).unwrap();

        assert!(be.set_pdl(true));
        for _ in 0..3 {
            st.run(&be);
            assert_eq!(
                be.read_f32(&st.logits).unwrap(),
                plain,
                "{label}: eager PDL step differs from plain launches"
            );
        }

        // Capture with PDL on (logits poisoned); the graph must hold programmatic edges.
        st.poison_logits(&be);
        let graph = st.capture(&be);
        let (programmatic, edges) = graph.edge_counts().unwrap();
        eprintln!("{label}: PDL graph has {programmatic} programmatic of {edges} edges");
        assert!(
            programmatic > 0,
            "{label}: capture dropped the programmatic edges ({edges} edges)"
        );
        for i in 0..20 {
            graph.replay().unwrap();
            assert_eq!(
                be.read_f32(&st.logits).unwrap(),
                plain,
                "{label}: PDL graph replay {i} differs from plain eager launches"
            );
        }
        assert_eq!(be.read_u32(&st.next).unwrap(), plain_next, "{label}: token");

        // Without PDL a capture has no programmatic edge.
        be.set_pdl(false);
        let plain_graph = st.capture(&be);
        assert_eq!(plain_graph.edge_counts().unwrap().0, 0, "{label}");
        plain_graph.replay().unwrap();
        assert_eq!(be.read_f32(&st.logits).unwrap(), plain, "{label}");
    }
}

/// A capture that finds no scratch (none allocated yet, as right after another capture took the
/// backend's) allocates it inside the capture, growing the activation-quantization slot from the
/// hidden size to the FFN size mid-step. The graph replays like an eager step, and blocks of
/// every small size class allocated after the capture (where a block freed during the capture
/// would have been cached) keep their contents across replays: the graph owns what it addresses.
#[test]
fn a_capture_without_warm_up_owns_the_scratch_it_allocates() {
    let be = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    let mut st = Step::new(&be, MEDIUM, GgmlType::Q4_0, GgmlType::Q6_K, 40);
    let graph = st.capture(&be);
    // 256 B to 32 KiB in 256-byte steps: every class the step's small scratch can fall in.
    let canaries: Vec<_> = (1..=128usize)
        .map(|i| {
            let v: Vec<f32> = (0..i * 64).map(|j| (i * 1000 + j) as f32).collect();
            (be.upload_f32(&v, &[v.len()]).unwrap(), v)
        })
        .collect();
    graph.replay().unwrap();
    let replayed = be.read_f32(&st.logits).unwrap();
    assert!(replayed.iter().all(|v| v.is_finite()), "replay not finite");
    st.run(&be);
    let eager = be.read_f32(&st.logits).unwrap();
    assert_eq!(
        replayed, eager,
        "graph captured without warm-up differs from eager"
    );
    for _ in 0..3 {
        graph.replay().unwrap();
    }
    assert_eq!(
        be.read_f32(&st.logits).unwrap(),
        eager,
        "later replay differs"
    );
    for (t, v) in &canaries {
        assert_eq!(
            &be.read_f32(t).unwrap(),
            v,
            "a {}-byte tensor allocated after the capture was overwritten by a replay",
            v.len() * 4
        );
    }
}
