//! `Device::capture` on every device that can be opened: the captured work runs exactly once at
//! capture, the CPU returns no graph, a CUDA graph replays the same ops over rewritten inputs, and
//! a failing capture reports the error and leaves the device usable.

use pocket_kernels::{Device, KernelError};

#[test]
fn capture_runs_once_and_replays_over_new_inputs() {
    for dev in Device::all_for_tests() {
        let mut x = dev.upload_f32(&[1.0, 2.0, 3.0], &[3]).unwrap();
        let mut y = dev.upload_f32(&[10.0, 20.0, 30.0], &[3]).unwrap();
        let (_, graph) = dev
            .capture(|| -> Result<(), KernelError> { dev.add_assign(&mut x, &y) })
            .unwrap();
        assert_eq!(dev.read_f32(&x).unwrap(), [11.0, 22.0, 33.0], "{dev:?}");
        assert_eq!(graph.is_some(), dev.supports_graphs(), "{dev:?}");
        if let Some(g) = graph {
            dev.write_f32(&mut y, &[1.0, 1.0, 1.0], &[3]).unwrap();
            g.replay().unwrap();
            g.replay().unwrap();
            assert_eq!(dev.read_f32(&x).unwrap(), [13.0, 24.0, 35.0], "{dev:?}");
        }
    }
}

#[test]
fn a_failing_capture_reports_and_recovers() {
    for dev in Device::all_for_tests() {
        let mut x = dev.upload_f32(&[1.0, 2.0], &[2]).unwrap();
        let y = dev.upload_f32(&[1.0, 2.0, 3.0], &[3]).unwrap();
        let r = dev.capture(|| -> Result<(), KernelError> { dev.add_assign(&mut x, &y) });
        assert!(r.is_err(), "{dev:?}: shape mismatch must fail");
        // The device still runs ordinary work afterwards.
        let z = dev.upload_f32(&[1.0, 1.0], &[2]).unwrap();
        dev.add_assign(&mut x, &z).unwrap();
        assert_eq!(dev.read_f32(&x).unwrap(), [2.0, 3.0], "{dev:?}");
    }
}
