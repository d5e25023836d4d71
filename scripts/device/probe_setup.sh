#!/usr/bin/env bash
# The common start of a quick-A/B call script on the GPU machine (source it from the carried
# tree's root, after carrying .cache/probe): the NCCL library link and library path the binaries
# need, /work/main pointing here (tests that read fixtures by that path), the probe bundle
# unpacked to bundle/, and ab.sh, trace.sh and trace_layers.py copied beside it.
#
#   . scripts/device/probe_setup.sh      (then e.g. AB_SETS=... bash bundle/ab.sh)
mkdir -p /tmp/pocket-lib
ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/pocket-lib/libnccl.so
export LD_LIBRARY_PATH=/tmp/pocket-lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rm -rf bundle
tar -xJf .cache/probe/probe.tar.xz
cp scripts/device/ab.sh scripts/device/trace.sh scripts/device/trace_layers.py bundle/
