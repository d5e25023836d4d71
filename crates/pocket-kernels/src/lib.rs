//! Devices (CPU and CUDA), device buffers and typed op launchers.
