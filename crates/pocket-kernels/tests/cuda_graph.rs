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
        be.write_f32(
            &mut st.logits,
            &vec![f32::NAN; eager.len()],
            &[1, eager.len()],
        )
        .unwrap();
        be.synchronize().unwrap();
        be.begin_capture().unwrap();
        st.run(&be);
        let graph = be.end_capture().unwrap();
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
